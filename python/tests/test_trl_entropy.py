"""The student's entropy (docs/SPEC.md §6 "Student entropy") through distil.torch:
return_entropy=True on the fused losses and modules, eager and under torch.compile, against a
float64 torch reference; what TRL's DistillationTrainer logs as `entropy`."""

import pytest
import torch
from conftest import DEVICES, DTYPES, bounds, gen, labels_for, leaf, normal

import distil.torch as dt
import distil.torch.functional as F


def ref_entropy(xs, ws, labels, temperature, scale=1.0, cap=0.0, ignore_index=-100):
    """[T] float64: -sum q log q of softmax(z' / tau), z' = cap tanh(scale z / cap); ignored
    rows 0."""
    z = xs.double() @ ws.double().T
    z = cap * torch.tanh(scale * z / cap) if cap > 0 else scale * z
    lp = torch.log_softmax(z / temperature, -1)
    h = -(lp.exp() * lp).sum(-1)
    return torch.where(labels != ignore_index, h, torch.zeros_like(h))


def check_entropy(got, want, dtype):
    """Every row within the loss bound of max(H, 1e-2) (docs/SPEC.md §6); ignored rows 0."""
    got = got.detach().double().cpu()
    assert torch.isfinite(got).all(), "an entropy element is NaN (unwritten?)"
    assert torch.equal(got[want == 0], want[want == 0])
    err = ((got - want).abs() / want.clamp_min(1e-2)).max().item()
    assert err <= bounds(dtype)[0], f"student entropy: error {err:.3e}"


def problem(device, dtype, seed=11, rows=(3, 5), vocab=301):
    g = gen(seed)
    xs = normal(g, rows + (24,), dtype)
    ws = normal(g, (vocab, 24), dtype, std=0.5)
    xt = normal(g, rows + (40,), dtype)
    wt = normal(g, (vocab, 40), dtype, std=0.5)
    lab = labels_for(g, rows[0] * rows[1], vocab).reshape(rows)
    return leaf(xs, device), leaf(ws, device), xt.to(device), wt.to(device), lab.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tau,scale,cap", [(1.0, 1.0, 0.0), (2.0, 0.8, 4.0), (0.5, 1.5, 0.0)])
def test_return_entropy_matches_reference(device, dtype, tau, scale, cap):
    xs, ws, xt, wt, lab = problem(device, dtype)
    loss, ent = F.fused_linear_jsd_loss(
        xs,
        ws,
        xt,
        wt,
        lab,
        weight_hard_loss=0.0,
        weight_soft_loss=1.0,
        temperature=tau,
        student_logit_scale=scale,
        student_softcap=cap,
        return_entropy=True,
    )
    assert ent.shape == lab.shape and ent.dtype == torch.float32 and not ent.requires_grad
    want = ref_entropy(xs.reshape(-1, 24).cpu(), ws.cpu(), lab.reshape(-1).cpu(), tau, scale, cap)
    check_entropy(ent.reshape(-1), want, dtype)
    # the loss and its gradients are the call's without the entropy, bit for bit
    plain = F.fused_linear_jsd_loss(
        xs,
        ws,
        xt,
        wt,
        lab,
        weight_hard_loss=0.0,
        weight_soft_loss=1.0,
        temperature=tau,
        student_logit_scale=scale,
        student_softcap=cap,
    )
    assert torch.equal(loss, plain)


@pytest.mark.parametrize("device", DEVICES)
def test_return_entropy_order_and_modules(device):
    """Last in the result, after the parts and the LSEs; the modules' keyword; the
    no-hard-loss form."""
    xs, ws, xt, wt, lab = problem(device, torch.float32)
    out = F.fused_linear_jsd_loss(
        xs, ws, xt, wt, lab, return_soft_hard_loss=True, return_lse=True, return_entropy=True
    )
    assert len(out) == 6
    want = ref_entropy(xs.reshape(-1, 24).cpu(), ws.cpu(), lab.reshape(-1).cpu(), 1.0)
    check_entropy(out[5].reshape(-1), want, torch.float32)
    module = dt.FusedLinearJSDLoss(return_entropy=True)
    check_entropy(module(xs, ws, xt, wt, lab)[1].reshape(-1), want, torch.float32)
    _loss, ent = F.fused_linear_jsd(xs, ws, xt, wt, lab, return_entropy=True)
    check_entropy(ent.reshape(-1), want, torch.float32)
    _, ent = dt.FusedLinearJSD(return_entropy=True)(xs, ws, xt, wt, lab)
    check_entropy(ent.reshape(-1), want, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_return_entropy_compiled(device):
    xs, ws, xt, wt, lab = problem(device, torch.float32)

    def f(a, b):
        return F.fused_linear_jsd_loss(
            a,
            b,
            xt,
            wt,
            lab,
            weight_hard_loss=0.0,
            weight_soft_loss=1.0,
            temperature=2.0,
            student_softcap=4.0,
            return_entropy=True,
        )

    loss, ent = torch.compile(f, fullgraph=True)(xs, ws)
    loss.backward()
    want = ref_entropy(xs.reshape(-1, 24).cpu(), ws.cpu(), lab.reshape(-1).cpu(), 2.0, 1.0, 4.0)
    check_entropy(ent.reshape(-1), want, torch.float32)
    assert xs.grad is not None and torch.isfinite(xs.grad).all()
