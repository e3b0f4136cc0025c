"""Which path a distil.torch call takes, and what the eager one keeps.

Plain eager calls take an autograd.Function over the ops' kernels (bench/host_overhead.py: it
costs a fraction of the custom op's dispatcher); anything that traces (FakeTensorMode, make_fx,
torch.compile) must take the torch.library ops, which have fake kernels. The eager path's
results are compared with the ops' bit for bit (the same kernels) and with the float64
reference under docs/SPEC.md §3's bounds.
"""

import pytest
import torch
from conftest import (  # noqa: F401
    DEVICES,
    check,
    fused_op_call,
    gen,
    jsd_op_call,
    labels_for,
    leaf,
    log_probs,
    normal,
    ref_fused,
    ref_jsd,
)
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import distil
import distil.torch as dt
from distil.torch import _ops


def _fused_inputs(device, seed=30, t=6, v=37, hs=16, ht=24):
    g = gen(seed)
    xs = leaf(normal(g, (t, hs), torch.float32), device)
    ws = leaf(normal(g, (v, hs), torch.float32, 0.3), device)
    xt = normal(g, (t, ht), torch.float32).to(device)
    wt = normal(g, (v, ht), torch.float32, 0.3).to(device)
    return xs, ws, xt, wt, labels_for(g, t, v).to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_plain_calls_take_the_function(device):
    x = leaf(log_probs(gen(1), (5, 29), torch.float32), device)
    y = log_probs(gen(2), (5, 29), torch.float32).to(device)
    assert type(dt.jsd(x, y).grad_fn).__name__ == "_JsdFunctionBackward"
    xs, ws, xt, wt, lab = _fused_inputs(device)
    loss = dt.FusedLinearJSDLoss()(xs, ws, xt, wt, lab)
    assert type(loss.grad_fn).__name__ == "_FusedFunctionBackward"


def test_fake_tensors_take_the_op():
    x = log_probs(gen(3), (5, 29), torch.float32).requires_grad_(True)
    y = log_probs(gen(4), (5, 29), torch.float32)
    xs, ws, xt, wt, lab = _fused_inputs("cpu")
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        f = [mode.from_tensor(t) for t in (x, y, xs, ws, xt, wt, lab)]
        loss = dt.jsd(f[0], f[1], reduction="none")
        assert (tuple(loss.shape), loss.dtype) == ((5,), torch.float32)
        loss, soft, hard = dt.FusedLinearJSDLoss(return_soft_hard_loss=True)(*f[2:])
        assert [tuple(t.shape) for t in (loss, soft, hard)] == [(), (), ()]


def test_make_fx_traces_the_op():
    x = log_probs(gen(5), (5, 29), torch.float32)
    y = log_probs(gen(6), (5, 29), torch.float32)
    gm = make_fx(lambda a, b: dt.jsd(a, b))(x, y)
    assert torch.ops.distil.jsd.default in [n.target for n in gm.graph.nodes]
    assert torch.equal(gm(x, y), dt.jsd(x, y))
    xs, ws, xt, wt, lab = (t.detach() for t in _fused_inputs("cpu"))
    gm = make_fx(lambda *a: dt.fused_linear_jsd_loss(*a))(xs, ws, xt, wt, lab)
    assert torch.ops.distil.fused_linear_jsd.default in [n.target for n in gm.graph.nodes]


@pytest.mark.parametrize("device", DEVICES)
def test_eager_equals_the_op(device):
    x = leaf(log_probs(gen(7), (7, 41), torch.float32), device)
    y = log_probs(gen(8), (7, 41), torch.float32).to(device)
    lab = labels_for(gen(9), 7, 41).to(device)
    loss = dt.jsd(x, y, lab, beta=0.3)
    (loss * 1.5).backward()
    args, kwargs = jsd_op_call(x.detach(), y, lab, beta=0.3)
    want, grad = _ops.jsd_op(*args, **kwargs)
    assert torch.equal(loss, want) and torch.equal(x.grad, grad * 1.5)
    xs, ws, xt, wt, lab = _fused_inputs(device)
    loss, soft, hard = dt.fused_linear_jsd_loss(xs, ws, xt, wt, lab, return_soft_hard_loss=True)
    (loss * -2.0).backward()
    args, kwargs = fused_op_call(
        xs.detach(),
        ws.detach(),
        None,
        xt,
        wt,
        None,
        lab,
        outputs=dict(grad_hidden=True, grad_weight=True),
    )
    parts, gx, gw, *_ = _ops.fused_op(*args, **kwargs)
    assert torch.equal(torch.stack([loss, hard, soft]), parts)
    assert torch.equal(xs.grad, gx * -2.0) and torch.equal(ws.grad, gw * -2.0)
    # Without return_soft_hard_loss the eager call asks the library for the loss alone.
    xs.grad = ws.grad = None
    loss = dt.fused_linear_jsd_loss(xs, ws, xt, wt, lab)
    loss.backward()
    assert torch.equal(loss, parts[0])
    assert torch.equal(xs.grad, gx) and torch.equal(ws.grad, gw)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_loss_modified_in_place(device):
    # The eager Function's loss must not be a view autograd forbids modifying in place.
    xs, ws, xt, wt, lab = _fused_inputs(device, seed=31)
    loss = dt.FusedLinearJSDLoss(beta=0.4)(xs, ws, xt, wt, lab)
    loss *= 3.0
    loss.backward()
    r = [t.detach().double().cpu().requires_grad_(True) for t in (xs, ws)]
    ref, _, _ = ref_fused(r[0], r[1], xt.double().cpu(), wt.double().cpu(), lab.cpu(), beta=0.4)
    (ref * 3.0).backward()
    check("loss * 3", loss, ref * 3.0, 1e-5)
    check("grad_xs", xs.grad, r[0].grad, 1e-4)
    check("grad_Ws", ws.grad, r[1].grad, 1e-4)


def test_fused_second_backward_refused():
    xs, ws, xt, wt, lab = _fused_inputs("cpu", seed=32)
    loss = dt.FusedLinearJSDLoss()(xs, ws, xt, wt, lab) * 2.0
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        loss.backward()


def test_eager_errors_switch_keeps_the_path():
    # set_eager_errors rebinds a module global of _ops: calls must still work both ways.
    x = leaf(log_probs(gen(10), (4, 19), torch.float32), "cpu")
    y = log_probs(gen(11), (4, 19), torch.float32)
    want = ref_jsd(x.detach().double(), y.double())
    try:
        dt.set_eager_errors(True)
        check("eager errors on", dt.jsd(x, y), want, 1e-5)
    finally:
        dt.set_eager_errors(False)
    check("eager errors off", dt.jsd(x, y), want, 1e-5)
    with pytest.raises(distil.InvalidArgument, match="beta"):
        dt.jsd(x, y, beta=2.0)


def test_topk_fake_tensors_and_make_fx_take_the_op():
    """The top-k losses decide their path as the dense ones do (_ops._untraced): under
    FakeTensorMode and make_fx they take the ops (the plain Function broke there before)."""
    x = log_probs(gen(7), (5, 29), torch.float32)
    ids, logp = dt.topk_cache(normal(gen(8), (5, 29), torch.float32), 4)
    xs, ws, _, _, lab = (t.detach() for t in _fused_inputs("cpu", t=5, v=29))
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        f = [mode.from_tensor(t) for t in (x, ids, logp, xs, ws, lab)]
        loss = dt.topk_loss(f[0], f[1], f[2], reduction="none")
        assert (tuple(loss.shape), loss.dtype) == ((5,), torch.float32)
        loss = dt.fused_linear_topk_loss(f[3], f[4], f[1], f[2], f[5])
        assert (tuple(loss.shape), loss.dtype) == ((), torch.float32)
    gm = make_fx(lambda a, b, c: dt.topk_loss(a, b, c))(x, ids, logp)
    assert torch.ops.distil.topk.default in [n.target for n in gm.graph.nodes]
    assert torch.equal(gm(x, ids, logp), dt.topk_loss(x, ids, logp))
