"""distil.torch.FusedLinearJSD / FusedLinearJSDLoss against the float64 reference
(docs/SPEC.md §2, bounds of §3)."""

import pytest
import torch
from conftest import (  # noqa: F401
    DEVICES,
    DTYPES,
    bounds,
    check,
    fused_op_call,
    gen,
    jsd_op_call,
    labels_for,
    leaf,
    normal,
    ref_fused,
)

import distil
import distil.torch as dt


def make(seed, dtype, t=24, v=517, hs=32, ht=48, bias=True, lead=None):
    g = gen(seed)
    shape_s = (lead + (hs,)) if lead else (t, hs)
    shape_t = (lead + (ht,)) if lead else (t, ht)
    rows = 1
    for d in shape_s[:-1]:
        rows *= d
    return dict(
        xs=normal(g, shape_s, dtype),
        ws=normal(g, (v, hs), dtype, 0.3),
        xt=normal(g, shape_t, dtype),
        wt=normal(g, (v, ht), dtype, 0.3),
        bs=normal(g, (v,), dtype, 0.5) if bias else None,
        bt=normal(g, (v,), dtype, 0.5) if bias else None,
        labels=labels_for(g, rows, v).reshape(shape_s[:-1]),
    )


def run_loss_case(device, dtype, inputs, grad_out=1.0, parts=False, no_labels=False, **kw):
    """One module called twice on fresh leaves, each call against the reference."""
    mod = dt.FusedLinearJSDLoss(return_soft_hard_loss=parts, **kw)
    for _ in range(2):
        _loss_case_once(mod, device, dtype, inputs, grad_out, parts, no_labels, kw)


def _loss_case_once(mod, device, dtype, inputs, grad_out, parts, no_labels, kw):
    xs, ws = leaf(inputs["xs"], device), leaf(inputs["ws"], device)
    bs = leaf(inputs["bs"], device) if inputs["bs"] is not None else None
    xt, wt = inputs["xt"].to(device), inputs["wt"].to(device)
    bt = inputs["bt"].to(device) if inputs["bt"] is not None else None
    lab = None if no_labels else inputs["labels"].to(device)
    out = mod(xs, ws, xt, wt, lab, bs, bt)
    loss = out[0] if parts else out
    assert loss.dtype == torch.float32 and loss.dim() == 0
    (loss * grad_out).backward()

    r = {
        k: (v.double() if v is not None and v.is_floating_point() else v) for k, v in inputs.items()
    }
    hs, ht = r["xs"].shape[-1], r["xt"].shape[-1]
    rxs = r["xs"].reshape(-1, hs).requires_grad_(True)
    rws = r["ws"].requires_grad_(True)
    rbs = r["bs"].requires_grad_(True) if r["bs"] is not None else None
    rlab = None if no_labels else r["labels"].reshape(-1)
    ref, hard, soft = ref_fused(
        rxs,
        rws,
        r["xt"].reshape(-1, ht),
        r["wt"],
        rlab,
        rbs,
        r["bt"],
        kw.get("weight_hard_loss", 0.5),
        kw.get("weight_soft_loss", 0.5),
        kw.get("beta", 0.5),
        kw.get("temperature", 1.0),
    )
    (ref * grad_out).backward()
    lb, gb = bounds(dtype, fused=True)
    check("loss", loss, ref, lb)
    if parts:
        assert not out[1].requires_grad and not out[2].requires_grad
        check("soft", out[1], soft, lb)
        if no_labels:
            assert out[2].item() == 0.0
        else:
            check("hard", out[2], hard, lb)
    assert xs.grad.dtype == dtype and xs.grad.shape == xs.shape
    check("grad_student_input", xs.grad.reshape(-1, hs), rxs.grad, gb)
    check("grad_student_weight", ws.grad, rws.grad, gb)
    if bs is not None:
        check("grad_student_bias", bs.grad, rbs.grad, gb)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_loss_against_reference(device, dtype):
    run_loss_case(device, dtype, make(1, dtype), parts=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("beta,temperature", [(0.0, 1.0), (1.0, 2.0), (0.3, 0.5), (0.5, 4.0)])
def test_beta_and_temperature(device, beta, temperature):
    run_loss_case(
        device,
        torch.float32,
        make(2, torch.float32, bias=False),
        beta=beta,
        temperature=temperature,
        weight_hard_loss=0.3,
        weight_soft_loss=0.7,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_three_dimensional_like_trl(device, dtype):
    run_loss_case(device, dtype, make(3, dtype, lead=(2, 9)), grad_out=0.25)


@pytest.mark.parametrize("device", DEVICES)
def test_weight_hard_zero_needs_no_labels(device):
    run_loss_case(
        device,
        torch.float32,
        make(4, torch.float32),
        parts=True,
        no_labels=True,
        weight_hard_loss=0.0,
        weight_soft_loss=1.0,
    )
    with pytest.raises(ValueError, match="labels"):
        run_loss_case(device, torch.float32, make(4, torch.float32), no_labels=True)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device):
    inputs = make(5, torch.float32)
    inputs["xs"] = inputs["xs"].T.contiguous().T  # stride(-1) != 1
    inputs["wt"] = torch.cat([inputs["wt"], inputs["wt"]], 1)[:, ::2]
    run_loss_case(device, torch.float32, inputs)


@pytest.mark.parametrize("device", DEVICES)
def test_all_rows_ignored(device):
    inputs = make(6, torch.float32)
    inputs["labels"][:] = -100
    xs = leaf(inputs["xs"], device)
    loss = dt.FusedLinearJSDLoss()(
        xs,
        inputs["ws"].to(device),
        inputs["xt"].to(device),
        inputs["wt"].to(device),
        inputs["labels"].to(device),
    )
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(xs.grad, torch.zeros_like(xs.grad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_linear_jsd_module(device, dtype):
    """LigerFusedLinearJSD: JSD only, no biases, labels optional."""
    inputs = make(7, dtype, bias=False)
    for labels in (inputs["labels"], None):
        xs, ws = leaf(inputs["xs"], device), leaf(inputs["ws"], device)
        mod = dt.FusedLinearJSD(jsd_beta=0.3, temperature=2.0)
        loss = mod(
            xs,
            ws,
            inputs["xt"].to(device),
            inputs["wt"].to(device),
            labels.to(device) if labels is not None else None,
        )
        loss.backward()
        rxs = inputs["xs"].double().requires_grad_(True)
        rws = inputs["ws"].double().requires_grad_(True)
        ref, _, _ = ref_fused(
            rxs,
            rws,
            inputs["xt"].double(),
            inputs["wt"].double(),
            labels,
            weight_hard=0.0,
            weight_soft=1.0,
            beta=0.3,
            temperature=2.0,
        )
        ref.backward()
        lb, gb = bounds(dtype, fused=True)
        check("loss", loss, ref, lb)
        check("grad_student_input", xs.grad, rxs.grad, gb)
        check("grad_student_weight", ws.grad, rws.grad, gb)


@pytest.mark.parametrize("device", DEVICES)
def test_only_wanted_gradients(device):
    """A frozen head gets no gradient; the hidden states still do (and the reverse)."""
    inputs = make(8, torch.float32)
    xs = leaf(inputs["xs"], device)
    ws = inputs["ws"].to(device)
    loss = dt.FusedLinearJSDLoss()(
        xs, ws, inputs["xt"].to(device), inputs["wt"].to(device), inputs["labels"].to(device)
    )
    loss.backward()
    assert xs.grad is not None and not ws.requires_grad
    with torch.no_grad():
        out = dt.FusedLinearJSDLoss()(
            xs, ws, inputs["xt"].to(device), inputs["wt"].to(device), inputs["labels"].to(device)
        )
    assert torch.equal(out, loss.detach())


@pytest.mark.parametrize("device", DEVICES)
def test_functional_forms(device):
    inputs = {
        k: (v.to(device) if v is not None else None) for k, v in make(9, torch.float32).items()
    }
    args = (
        inputs["xs"],
        inputs["ws"],
        inputs["xt"],
        inputs["wt"],
        inputs["labels"],
        inputs["bs"],
        inputs["bt"],
    )
    a = dt.FusedLinearJSDLoss(0.4, 0.6, 0.2, -100, 1.5, False, 512, True)(*args)
    b = dt.fused_linear_jsd_loss(*args, 0.4, 0.6, 0.2, -100, 1.5, False, 512, True)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=False))
    c = dt.LigerFusedLinearJSD(0.2, -100, 1.5)(*args[:5])
    d = dt.liger_fused_linear_jsd(*args[:5], 0.2, -100, 1.5)
    assert torch.equal(c, d)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    inputs = make(10, torch.float32)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.loss = dt.FusedLinearJSDLoss(beta=0.25, temperature=2.0)

        def forward(self, xs, ws, xt, wt, lab, bs, bt):
            return self.loss(xs, ws, xt, wt, lab, bs, bt)

    compiled = torch.compile(Head(), fullgraph=True)
    xs, ws, bs = (leaf(inputs[k], device) for k in ("xs", "ws", "bs"))
    loss = compiled(
        xs,
        ws,
        inputs["xt"].to(device),
        inputs["wt"].to(device),
        inputs["labels"].to(device),
        bs,
        inputs["bt"].to(device),
    )
    (loss * 1.5).backward()
    r = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    rxs, rws, rbs = (r[k].requires_grad_(True) for k in ("xs", "ws", "bs"))
    ref, _, _ = ref_fused(
        rxs, rws, r["xt"], r["wt"], r["labels"], rbs, r["bt"], beta=0.25, temperature=2.0
    )
    (ref * 1.5).backward()
    check("compiled loss", loss, ref, 1e-5)
    check("compiled grad_student_input", xs.grad, rxs.grad, 1e-4)
    check("compiled grad_student_weight", ws.grad, rws.grad, 1e-4)
    check("compiled grad_student_bias", bs.grad, rbs.grad, 1e-4)


# The op's docs/SPEC.md §6 arguments at their defaults: the divergence's (JSD, alpha, no given
# normaliser, no tau^2), then the head options' (scales 1, caps 0, the student's temperature for
# the teacher, no LSEs).


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    from distil.torch import _ops

    i = {k: (v.to(device) if v is not None else None) for k, v in make(11, torch.float32).items()}
    req = [i[k].detach().requires_grad_(True) for k in ("xs", "ws", "bs")]
    cases = [
        fused_op_call(
            req[0],
            req[1],
            req[2],
            i["xt"],
            i["wt"],
            i["bt"],
            i["labels"],
            outputs=dict(grad_hidden=True, grad_weight=True, grad_bias=True),
        ),
        fused_op_call(
            req[0],
            i["ws"],
            None,
            i["xt"],
            i["wt"],
            None,
            None,
            weight_hard=0.0,
            weight_soft=1.0,
            beta=0.0,
            temperature=2.0,
            chunk_rows=8,
            outputs=dict(grad_hidden=True),
        ),
    ]
    for args, kwargs in cases:
        torch.library.opcheck(_ops.fused_op, args, kwargs)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise_with_message(device):
    i = {k: (v.to(device) if v is not None else None) for k, v in make(12, torch.float32).items()}
    args = [i["xs"], i["ws"], i["xt"], i["wt"], i["labels"]]
    with pytest.raises(ValueError, match="beta"):
        dt.FusedLinearJSDLoss(beta=-0.5)(*args)
    with pytest.raises(ValueError, match="temperature"):
        dt.FusedLinearJSDLoss(temperature=0.0)
    with pytest.raises(ValueError, match="weight_hard|weight_soft"):
        dt.FusedLinearJSDLoss(weight_hard_loss=0.0, weight_soft_loss=0.0)(*args)
    with pytest.raises(ValueError, match="rows"):
        dt.FusedLinearJSDLoss()(i["xs"][:5], *args[1:])
    with pytest.raises(ValueError, match="hidden|student_weight"):
        dt.FusedLinearJSDLoss()(i["xs"], i["ws"][:, :7], *args[2:])
    with pytest.raises(ValueError, match="teacher_weight|bfloat16"):
        dt.FusedLinearJSDLoss()(i["xs"], i["ws"], i["xt"], i["wt"].bfloat16(), i["labels"])
    with pytest.raises(distil.InvalidArgument, match="student_bias"):
        dt.FusedLinearJSDLoss()(*args, i["bs"][:3])


def test_invalid_label_raises_on_cpu():
    i = make(13, torch.float32)
    lab = i["labels"].clone()
    lab[3] = 10**6
    with pytest.raises(distil.InvalidLabel, match="3"):
        dt.FusedLinearJSDLoss()(i["xs"], i["ws"], i["xt"], i["wt"], lab)
    assert issubclass(distil.InvalidLabel, ValueError)
