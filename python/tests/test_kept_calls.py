"""Fused calls kept by signature (python/distil/torch/_prepared.py): a call like one that
succeeded skips its preparation, and any change of a tensor's shape, strides, dtype, device or
requires_grad, of grad mode, autocast or the options is prepared and checked again: refused by
name or computed right against the float64 reference."""

import pytest
import torch
from conftest import DEVICES, FUSED_F32_GRAD, check, gen, labels_for, normal, ref_fused

import distil
import distil.torch as dt
from distil.torch import _ops, _prepared
from distil.torch import functional as F

ROWS, VOCAB, HS, HT = 6, 40, 8, 12


def _tensors(device, seed=1):
    g = gen(seed)
    xs, ws, xt, wt = (
        normal(g, s, torch.float32).to(device)
        for s in ((ROWS, HS), (VOCAB, HS), (ROWS, HT), (VOCAB, HT))
    )
    return xs, ws, xt, wt, labels_for(g, ROWS, VOCAB).to(device)


def _leaves(xs, ws):
    return xs.detach().clone().requires_grad_(), ws.detach().clone().requires_grad_()


def _check_call(loss_fn, xs, ws, xt, wt, lab, beta=0.5, bias=None):
    """loss_fn's loss and gradients against the float64 reference."""
    xs, ws = _leaves(xs, ws)
    loss = loss_fn(xs, ws, xt, wt, lab, bias)
    loss.backward()
    d = [t.detach().double().cpu().requires_grad_() for t in (xs, ws)]
    rest = [t.detach().double().cpu() for t in (xt, wt)]
    b = None if bias is None else bias.detach().double().cpu()
    want = ref_fused(d[0], d[1], rest[0], rest[1], lab.cpu().long(), bs=b, beta=beta)[0]
    want.backward()
    check("loss", loss, want, 1e-5)
    check("grad_input", xs.grad, d[0].grad, FUSED_F32_GRAD)
    check("grad_weight", ws.grad, d[1].grad, FUSED_F32_GRAD)


@pytest.mark.parametrize("device", DEVICES)
def test_a_call_like_a_passed_one_skips_its_preparation(monkeypatch, device):
    """The second and third calls with one signature are not prepared again, and are right."""
    _prepared.clear()
    prepared = []
    real = F._fused_tensors
    monkeypatch.setattr(F, "_fused_tensors", lambda *a: prepared.append(1) or real(*a))
    mod = dt.FusedLinearJSDLoss()
    for seed in (1, 2, 3):
        _check_call(mod, *_tensors(device, seed))
    assert len(prepared) == 1


def _bias(n):
    return torch.full((n,), 0.25)


# Each case: a call that differs from a kept one in one respect, and what it must give:
# an InvalidArgument matching the text, or None: the right loss and gradients.
CHANGES = {
    "labels on meta": (lambda t: t[:4] + (t[4].to("meta"),), "labels is on meta"),
    "a bias of the wrong length": (lambda t: t + (_bias(1),), "student_bias has shape \\(1,\\)"),
    "a teacher of one row": (lambda t: (t[0], t[1], t[2][:1], t[3], t[4]), "teacher_input 1"),
    "float64 hidden states": (lambda t: (t[0].double(),) + t[1:], "student_input"),
    "labels of another length": (lambda t: t[:4] + (t[4][:3],), "labels"),
    "no labels with a hard loss": (lambda t: t[:4] + (None,), "labels are None"),
    "transposed hidden states": (lambda t: (t[0].t().contiguous().t(),) + t[1:], None),
    "int32 labels": (lambda t: t[:4] + (t[4].to(torch.int32),), None),
    "a bias": (lambda t: t + (_bias(VOCAB),), None),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_is_checked_again(change):
    """After a kept call, the changed call twice (the second may find it kept)."""
    _prepared.clear()
    make, refused = CHANGES[change]
    mod = dt.FusedLinearJSDLoss()
    good = _tensors("cpu")
    _check_call(mod, *good)
    changed = make(good)
    args, bias = changed[:5], (changed[5] if len(changed) > 5 else None)
    for _ in range(2):
        if refused:
            with pytest.raises(distil.InvalidArgument, match=refused):
                mod(*_leaves(*args[:2]), *args[2:], bias)
        else:
            _check_call(mod, *args, bias=bias)


def test_grad_mode_and_requires_grad():
    """A call kept without gradients does not serve one that wants them."""
    _prepared.clear()
    mod = dt.FusedLinearJSDLoss()
    xs, ws, xt, wt, lab = _tensors("cpu")
    with torch.no_grad():
        assert not mod(*_leaves(xs, ws), xt, wt, lab).requires_grad
    _check_call(mod, xs, ws, xt, wt, lab)
    _prepared.clear()
    mod(xs.detach().clone(), ws.detach().clone().requires_grad_(), xt, wt, lab).backward()
    _check_call(mod, xs, ws, xt, wt, lab)


def test_options_and_returns():
    """The options and what the call returns are part of the key."""
    _prepared.clear()
    xs, ws, xt, wt, lab = _tensors("cpu")
    soft = dt.FusedLinearJSDLoss(weight_hard_loss=0.0, weight_soft_loss=1.0)
    soft(*_leaves(xs, ws), xt, wt, None)
    soft.weight_hard_loss = 0.5
    with pytest.raises(distil.InvalidArgument, match="labels are None"):
        soft(*_leaves(xs, ws), xt, wt, None)
    mod = dt.FusedLinearJSDLoss()
    _check_call(mod, xs, ws, xt, wt, lab)
    mod.beta = 0.0
    _check_call(mod, xs, ws, xt, wt, lab, beta=0.0)
    mod.return_lse = True
    loss, ls, lt = mod(*_leaves(xs, ws), xt, wt, lab)
    assert ls.shape == lt.shape == (ROWS,)


def test_autocast_is_not_kept(monkeypatch):
    """Under autocast the call runs in its dtype (fp32 tensors cast per call), also after an
    fp32 call with the same tensors was kept."""
    _prepared.clear()
    seen = []
    real = _ops.fused_call
    monkeypatch.setattr(
        _ops, "fused_call", lambda t, *a, **k: seen.append(t.xs.dtype) or real(t, *a, **k)
    )
    mod = dt.FusedLinearJSDLoss()
    xs, ws, xt, wt, lab = _tensors("cpu")
    mod(*_leaves(xs, ws), xt, wt, lab)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x, w = _leaves(xs, ws)
        loss = mod(x, w, xt, wt, lab)
    loss.backward()
    assert seen == [torch.float32, torch.bfloat16]
    assert w.grad.dtype is torch.float32 and x.grad.dtype is torch.float32
    d = [t.detach().to(torch.bfloat16).double() for t in (xs, ws, xt, wt)]
    check("loss", loss, ref_fused(*d, lab)[0], 2e-3)


def test_options_hash_once_and_pickle_their_fields():
    """Options objects key every cache by a hash computed once; pickles and copies carry the
    fields only (a str's hash differs between processes)."""
    import copy
    import pickle

    from distil import _options

    for o in (_options.JsdOptions(reduction="sum"), _options.FusedOptions(beta=0.25)):
        h = hash(o)
        for c in (pickle.loads(pickle.dumps(o)), copy.copy(o), copy.deepcopy(o)):
            assert "_hash" not in vars(c) and c == o and hash(c) == h
