"""Shared pieces of the Python tests: devices, dtypes, the float64 reference,
docs/SPEC.md §3 bounds.

The reference is plain PyTorch autograd in float64 on the same rounded inputs, written from
docs/SPEC.md §1-§2 (it is not distil's "ref" backend): a test compares distil's loss and every
gradient element with it, under the bounds of docs/SPEC.md §3.
"""

import math

import pytest
import torch

import distil
from distil import _testing
from distil.torch import _ops

_testing.hooks_from_env()  # DISTIL_TEST_HOOKS, for every context the tests create

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# docs/SPEC.md §3: (loss, gradient) bounds by input dtype; the fused loss's fp32 gradients 1e-4.
BOUNDS = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-3, 1e-2), torch.float16: (2e-3, 1e-2)}
FUSED_F32_GRAD = 1e-4


HAVE_CPU = distil.backends().get("cpu", 0) > 0


def _devices():
    out = ["cpu"]
    if torch.cuda.is_available() and distil.backends().get("cuda", 0) > 0:
        out.append("cuda")
    return out


DEVICES = _devices()


def pytest_collection_modifyitems(config, items):
    """A libdistil without the cpu backend (a GPU machine without OpenBLAS) runs the CUDA
    cases only: every test that needs CPU tensors is skipped with a message."""
    if HAVE_CPU:
        return
    skip = pytest.mark.skip(reason="libdistil has no cpu backend: CPU-tensor tests skipped")
    for item in items:
        if "cuda" not in item.nodeid:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def poisoned_outputs():
    """Every op output starts as NaN, so that an unwritten element fails the comparison."""
    _ops.POISON_OUTPUTS = True
    yield
    _ops.POISON_OUTPUTS = False


def bounds(dtype, fused=False):
    loss, grad = BOUNDS[dtype]
    return loss, (FUSED_F32_GRAD if fused and dtype == torch.float32 else grad)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def log_probs(g, shape, dtype, scale=2.0):
    """Random log-probabilities (log-softmax of normal logits) rounded to dtype."""
    return torch.log_softmax(torch.randn(shape, generator=g, dtype=torch.float64) * scale, -1).to(
        dtype
    )


def normal(g, shape, dtype, std=1.0):
    t = torch.randn(shape, generator=g, dtype=torch.float64) * std
    # Never exactly 0 (a zero input can hide a missing term).
    return torch.where(t.abs() < std / 64, torch.full_like(t, std / 64), t).to(dtype)


def labels_for(g, rows, vocab, ignored_every=5, ignore_index=-100):
    lab = torch.randint(0, vocab, (rows,), generator=g)
    if ignored_every:
        lab[ignored_every - 1 :: ignored_every] = ignore_index
    return lab


# ----------------------------------------------------------------------- float64 reference


def ref_jsd_rows(x, y, beta):
    """Per-row generalised JSD of log-probs x (student) and y (teacher), float64
    (docs/SPEC.md §1)."""
    q, p = x.exp(), y.exp()
    if beta == 0:
        e = p * (y - x)
    elif beta == 1:
        e = q * (x - y)
    else:
        m = torch.logaddexp(math.log(beta) + y, math.log1p(-beta) + x)
        e = beta * p * (y - m) + (1 - beta) * q * (x - m)
    return e.sum(-1)


def ref_jsd(x, y, labels=None, beta=0.5, ignore_index=-100, reduction="batchmean"):
    rows = ref_jsd_rows(x, y, beta)
    valid = (
        torch.ones_like(rows, dtype=torch.bool)
        if labels is None
        else labels.reshape(rows.shape) != ignore_index
    )
    rows = torch.where(valid, rows, torch.zeros_like(rows))
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    n = valid.sum()
    return rows.sum() / n if n > 0 else rows.sum() * 0


def ref_fused(
    xs,
    ws,
    xt,
    wt,
    labels,
    bs=None,
    bt=None,
    weight_hard=0.5,
    weight_soft=0.5,
    beta=0.5,
    temperature=1.0,
    ignore_index=-100,
    heads=None,
):
    """(loss, hard, soft) of docs/SPEC.md §2 in float64; labels None means every row counts.
    heads (docs/SPEC.md §6): a dict of student_logit_scale, student_softcap,
    teacher_logit_scale, teacher_softcap, teacher_temperature (each optional); given, the loss
    runs over the common vocabulary prefix with each head's logits c tanh(s z / c), and the
    result gains (student_lse, teacher_lse)."""
    h = heads or {}
    v = min(ws.shape[0], wt.shape[0])
    zs = _capped(xs @ ws[:v].T + (bs[:v] if bs is not None else 0), h, "student")
    zt = _capped(xt @ wt[:v].T + (bt[:v] if bt is not None else 0), h, "teacher")
    if labels is None:
        valid = torch.ones(zs.shape[0], dtype=torch.bool)
        ce = torch.zeros(zs.shape[0], dtype=zs.dtype)
    else:
        valid = labels != ignore_index
        safe = torch.where(valid, labels, torch.zeros_like(labels))
        ce = torch.logsumexp(zs, -1) - zs.gather(1, safe[:, None])[:, 0]
    x = torch.log_softmax(zs / temperature, -1)
    y = torch.log_softmax(zt / (h.get("teacher_temperature") or temperature), -1)
    soft_rows = ref_jsd_rows(x, y, beta)
    zero = torch.zeros_like(ce)
    n = valid.sum().clamp_min(1)
    hard = torch.where(valid, ce, zero).sum() / n
    soft = torch.where(valid, soft_rows, zero).sum() / n
    out = (weight_hard * hard + weight_soft * soft, hard, soft)
    if heads is None:
        return out
    return out + (torch.logsumexp(zs, -1), torch.logsumexp(zt, -1))


def _capped(z, heads, who):
    """A head's logits after its scale s and softcap c: c tanh(s z / c), or s z without a cap."""
    s = heads.get(f"{who}_logit_scale", 1.0)
    c = heads.get(f"{who}_softcap", 0.0)
    return c * torch.tanh(s * z / c) if c > 0 else s * z


# --------------------------------------------------------------------------- comparisons


def rel(got, want):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert torch.isfinite(got).all(), "an output element is NaN or inf (unwritten?)"
    scale = want.norm()
    return ((got - want).norm() / scale).item() if scale > 0 else got.norm().item()


def check(what, got, want, bound):
    err = rel(got, want)
    print(f"  {what}: error {err:.3e} (bound {bound:.0e})")
    assert err <= bound, f"{what}: relative error {err:.3e} > {bound:.0e}"


def leaf(t, device):
    return t.detach().to(device).requires_grad_(True)


def jsd_op_call(x, y, labels=None, normaliser_device=None, want_grad=True, **options):
    """(args, kwargs) of distil::jsd: the tensors, then JsdOptions' fields (options: its
    field names, e.g. divergence=3) and want_grad by name."""
    from distil import _options

    return (x, y, labels, normaliser_device), dict(
        _options.JsdOptions(**options).op_kwargs(), want_grad=want_grad
    )


def fused_op_call(
    xs,
    ws,
    bs,
    xt,
    wt,
    bt=None,
    labels=None,
    normaliser_device=None,
    head=None,
    outputs=None,
    **options,
):
    """(args, kwargs) of distil::fused_linear_jsd: the tensors, then FusedOptions' and
    FusedOutputs' fields by name (outputs: a dict of FusedOutputs' fields)."""
    from distil import _options

    kwargs = _options.FusedOptions(**options).op_kwargs()
    kwargs.update(_options.FusedOutputs(**(outputs or {})).op_kwargs())
    return (xs, ws, bs, xt, wt, bt, labels, normaliser_device, head), kwargs
