"""docs/SPEC.md §6 through distil.torch: the named divergences, alpha, the given normaliser and
tau^2 on both losses, and Liger's KL / TVD losses (distil.torch.KLDivLoss, TVDLoss), each
against a float64 torch reference written here from docs/SPEC.md §6 (or torch.nn.KLDivLoss),
under the bounds of docs/SPEC.md §3; torch.compile(fullgraph=True) and opcheck of the ops."""

import math

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
    log_probs,
    normal,
    ref_jsd_rows,
)

import distil.torch as dt
from distil import _lib

DIVS = [
    ("forward_kl", 0.1),
    ("reverse_kl", 0.1),
    ("skew_kl", 0.1),
    ("skew_kl", 0.9),
    ("skew_reverse_kl", 0.1),
    ("skew_reverse_kl", 0.9),
    ("tvd", 0.1),
    ("jsd", 0.1),
]


def ref_div_rows(x, y, divergence, alpha=0.1, beta=0.5):
    """Per-row divergence of student log-probs x from teacher log-probs y, float64."""
    q, p = x.exp(), y.exp()
    if divergence == "jsd":
        return ref_jsd_rows(x, y, beta)
    if divergence == "forward_kl":
        e = p * (y - x)
    elif divergence == "reverse_kl":
        e = q * (x - y)
    elif divergence == "skew_kl":
        e = p * (y - torch.log(alpha * p + (1 - alpha) * q))
    elif divergence == "skew_reverse_kl":
        e = q * (x - torch.log((1 - alpha) * p + alpha * q))
    else:
        e = 0.5 * (p - q).abs()
    return e.sum(-1)


def ref_div(x, y, labels, divergence, alpha, n=None, ignore_index=-100):
    rows = ref_div_rows(x, y, divergence, alpha)
    valid = labels != ignore_index if labels is not None else torch.ones_like(rows, dtype=bool)
    total = torch.where(valid, rows, torch.zeros_like(rows)).sum()
    n = valid.sum() if n is None else n
    return total / n if n > 0 else total * 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("divergence,alpha", DIVS)
def test_jsd_divergences(device, dtype, divergence, alpha):
    g = gen(hash((divergence, alpha)) % 1000)
    x0, y0 = log_probs(g, (29, 777), dtype), log_probs(g, (29, 777), dtype)
    lab = labels_for(g, 29, 777)
    x = leaf(x0, device)
    loss = dt.JSD(divergence=divergence, alpha=alpha)(x, y0.to(device), lab.to(device))
    assert loss.dtype == torch.float32
    (loss * 1.5).backward()
    xr = x0.double().requires_grad_(True)
    ref = ref_div(xr, y0.double(), lab, divergence, alpha)
    (ref * 1.5).backward()
    lb, gb = bounds(dtype)
    check("loss", loss, ref, lb)
    check("grad", x.grad, xr.grad, gb)


@pytest.mark.parametrize("device", DEVICES)
def test_given_normaliser(device):
    """N as a number, as a device tensor (no .item()), and N <= 0 there: loss and gradient 0."""
    g = gen(40)
    x0, y0 = log_probs(g, (12, 300), torch.float32), log_probs(g, (12, 300), torch.float32)
    lab = labels_for(g, 12, 300).to(device)
    for n in [
        37.5,
        torch.tensor(11.0, device=device),
        torch.tensor([0.0], device=device),
        torch.tensor(-4.0, device=device),
    ]:
        x = leaf(x0, device)
        loss = dt.jsd(x, y0.to(device), lab, divergence="skew_kl", alpha=0.2, normaliser=n)
        loss.backward()
        nv = float(n) if not isinstance(n, torch.Tensor) else n.item()
        xr = x0.double().requires_grad_(True)
        ref = ref_div(xr, y0.double(), lab.cpu(), "skew_kl", 0.2, n=nv if nv > 0 else 0)
        if nv > 0:
            ref.backward()
            check("loss / N", loss, ref, 1e-5)
            check("grad / N", x.grad, xr.grad, 1e-5)
        else:
            assert loss.item() == 0.0 and torch.equal(x.grad, torch.zeros_like(x.grad))
    with pytest.raises(ValueError, match="normaliser"):
        dt.jsd(x0.to(device), y0.to(device), normaliser=-1.0)
    with pytest.raises(ValueError, match="normaliser"):
        dt.jsd(x0.to(device), y0.to(device), normaliser=2.0, reduction="sum")
    with pytest.raises(ValueError, match="alpha"):
        dt.jsd(x0.to(device), y0.to(device), divergence="skew_kl", alpha=1.5)
    with pytest.raises(ValueError, match="divergence"):
        dt.jsd(x0.to(device), y0.to(device), divergence="kl")


def ref_fused_div(
    xs,
    ws,
    xt,
    wt,
    labels,
    bs,
    weight_hard,
    weight_soft,
    temperature,
    divergence,
    alpha,
    n=None,
    tau_sq=False,
):
    zs, zt = xs @ ws.T + bs, xt @ wt.T
    valid = labels != -100
    safe = torch.where(valid, labels, torch.zeros_like(labels))
    ce = torch.logsumexp(zs, -1) - zs.gather(1, safe[:, None])[:, 0]
    x = torch.log_softmax(zs / temperature, -1)
    y = torch.log_softmax(zt / temperature, -1)
    soft_rows = ref_div_rows(x, y, divergence, alpha)
    zero = torch.zeros_like(ce)
    n = valid.sum().clamp_min(1) if n is None else n
    hard = torch.where(valid, ce, zero).sum() / n
    soft = torch.where(valid, soft_rows, zero).sum() / n
    t2 = temperature**2 if tau_sq else 1.0
    return weight_hard * hard + t2 * weight_soft * soft, hard, soft


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "divergence,alpha,tau_sq,n",
    [
        ("forward_kl", 0.1, False, None),
        ("reverse_kl", 0.1, True, None),
        ("skew_kl", 0.1, True, 50.0),
        ("skew_reverse_kl", 0.3, False, "device"),
        ("tvd", 0.1, True, None),
    ],
)
def test_fused_divergences(device, dtype, divergence, alpha, tau_sq, n):
    g = gen(50)
    T, V, Hs, Ht, tau = 21, 511, 32, 48, 1.7
    xs0, ws0 = normal(g, (T, Hs), dtype), normal(g, (V, Hs), dtype, 3 / math.sqrt(Hs))
    bs0 = normal(g, (V,), dtype, 0.5)
    xt0, wt0 = normal(g, (T, Ht), dtype), normal(g, (V, Ht), dtype, 3 / math.sqrt(Ht))
    lab = labels_for(g, T, V)
    xs, ws, bs = leaf(xs0, device), leaf(ws0, device), leaf(bs0, device)
    given = torch.tensor(40.0, device=device) if n == "device" else n
    loss_fn = dt.FusedLinearJSDLoss(
        weight_hard_loss=0.3,
        weight_soft_loss=0.7,
        temperature=tau,
        return_soft_hard_loss=True,
        divergence=divergence,
        alpha=alpha,
        temperature_squared=tau_sq,
    )
    loss, soft, hard = loss_fn(
        xs, ws, xt0.to(device), wt0.to(device), lab.to(device), bs, normaliser=given
    )
    loss.backward()
    r = [t.double().requires_grad_(True) for t in (xs0, ws0, bs0)]
    nv = None if n is None else (40.0 if n == "device" else n)
    rl, rh, rs = ref_fused_div(
        r[0],
        r[1],
        xt0.double(),
        wt0.double(),
        lab,
        r[2],
        0.3,
        0.7,
        tau,
        divergence,
        alpha,
        nv,
        tau_sq,
    )
    rl.backward()
    lb, gb = bounds(dtype, fused=True)
    check("loss", loss, rl, lb)
    check("hard part", hard, rh, lb)
    check("soft part (without tau^2)", soft, rs, lb)
    for name, got, want in (
        ("grad xs", xs.grad, r[0].grad),
        ("grad Ws", ws.grad, r[1].grad),
        ("grad bs", bs.grad, r[2].grad),
    ):
        check(name, got, want, gb)


# ------------------------------------------------------------------ Liger's KL and TVD


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["batchmean", "mean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_loss(device, dtype, reduction, log_target):
    g = gen(60)
    x0 = log_probs(g, (4, 9, 203), dtype)
    yl = log_probs(g, (4, 9, 203), dtype)
    y0 = yl if log_target else yl.exp()  # probabilities in the input dtype
    if not log_target:  # a target of 0: a term of exactly 0 (a log target of -inf is too, where
        y0[0, 0, :5] = 0.0  # torch and Liger give NaN: docs/SPEC.md §1's 0 * -inf = 0)
    x = leaf(x0, device)
    mod = dt.KLDivLoss(reduction=reduction, log_target=log_target)
    assert isinstance(mod, torch.nn.KLDivLoss) and dt.LigerKLDIVLoss is dt.KLDivLoss
    loss = mod(x, y0.to(device))
    assert loss.dtype == torch.float32
    assert loss.shape == (x0.shape if reduction == "none" else ())
    w = normal(g, loss.shape, torch.float64).to(device) if reduction == "none" else 1.0
    (loss * w).sum().backward()
    xr = x0.double().requires_grad_(True)
    ref = torch.nn.KLDivLoss(reduction=reduction, log_target=log_target)(xr, y0.double())
    (ref * (w.cpu() if reduction == "none" else 1.0)).sum().backward()
    lb, gb = bounds(dtype)
    check("loss", loss, ref, lb)
    assert x.grad.dtype == dtype
    check("grad", x.grad, xr.grad, gb)


def ref_tvd(p, q, labels, reduction, ignore_index=-100):
    """Liger's TVD in float64: 1/2 |p - q|, batchmean over rows not ignored, mean over those
    rows x V, ignored rows 0."""
    e = 0.5 * (p - q).abs()
    valid = (labels != ignore_index) if labels is not None else torch.ones(p.shape[:-1], dtype=bool)
    e = torch.where(valid[..., None], e, torch.zeros_like(e))
    n = valid.sum()
    if reduction == "none":
        return e
    if reduction == "sum":
        return e.sum()
    return e.sum() / (n if reduction == "batchmean" else n * p.shape[-1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["batchmean", "mean", "sum", "none"])
@pytest.mark.parametrize("with_labels", [False, True])
def test_tvd_loss(device, dtype, reduction, with_labels):
    g = gen(70)
    p0 = log_probs(g, (30, 301), dtype).exp()
    q0 = log_probs(g, (30, 301), dtype).exp()
    p0[0, :3] = 0.0  # a probability of 0 on the differentiated side: gradient -1/2 there
    q0[1, :3] = 0.0
    p0[2, :2], q0[2, :2] = 0.0, 0.0  # both 0: loss and gradient 0
    lab = labels_for(g, 30, 301, ignore_index=-1) if with_labels else None
    p = leaf(p0, device)
    mod = dt.TVDLoss(reduction=reduction, ignore_index=-1)
    assert dt.LigerTVDLoss is dt.TVDLoss
    loss = mod(p, q0.to(device), lab.to(device) if lab is not None else None)
    assert loss.dtype == torch.float32
    w = normal(g, loss.shape, torch.float64).to(device) if reduction == "none" else 1.0
    (loss * w).sum().backward()
    pr = p0.double().requires_grad_(True)
    ref = ref_tvd(pr, q0.double(), lab, reduction, ignore_index=-1)
    (ref * (w.cpu() if reduction == "none" else 1.0)).sum().backward()
    lb, gb = bounds(dtype)
    check("loss", loss, ref, lb)
    check("grad", p.grad, pr.grad, gb)
    assert p.grad[2, :2].abs().max() == 0


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    g = gen(80)
    x0, y0 = log_probs(g, (8, 64), torch.float32), log_probs(g, (8, 64), torch.float32)
    lab = labels_for(g, 8, 64).to(device)
    n = torch.tensor(5.0, device=device)
    fns = {
        "jsd skew_reverse_kl": (
            lambda a, b: dt.jsd(a, b, lab, divergence="skew_reverse_kl", alpha=0.3, normaliser=n),
            lambda a, b: ref_div(a, b, lab.cpu(), "skew_reverse_kl", 0.3, n=5.0),
        ),
        "KLDivLoss": (
            lambda a, b: dt.KLDivLoss(reduction="batchmean", log_target=True)(a, b),
            lambda a, b: torch.nn.KLDivLoss(reduction="batchmean", log_target=True)(a, b),
        ),
        "TVDLoss": (
            lambda a, b: dt.TVDLoss()(a.exp(), b.exp(), lab),
            lambda a, b: ref_tvd(a.exp(), b.exp(), lab.cpu(), "batchmean"),
        ),
    }
    for name, (fn, ref_fn) in fns.items():
        x = leaf(x0, device)
        loss = torch.compile(fn, fullgraph=True)(x, y0.to(device))
        (loss * 2).backward()
        xr = x0.double().requires_grad_(True)
        ref = ref_fn(xr, y0.double())
        (ref * 2).backward()
        check(f"compiled {name} loss", loss, ref, 1e-5)
        check(f"compiled {name} grad", x.grad, xr.grad, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    from distil.torch import _ops

    g = gen(90)
    x = log_probs(g, (6, 33), torch.float32).to(device).requires_grad_(True)
    y = log_probs(g, (6, 33), torch.float32).to(device)
    lab = labels_for(g, 6, 33).to(device)
    n = torch.tensor(7.0, device=device)
    for args, kwargs in [
        jsd_op_call(x, y, lab, n, divergence=3, alpha=0.2),
        jsd_op_call(x, y, None, reduction="sum", divergence=5),
        jsd_op_call(x, y, lab, divergence=4, alpha=0.7, normaliser=9.0),
    ]:
        torch.library.opcheck(_ops.jsd_op, args, kwargs)
    xs = normal(g, (5, 8), torch.float32).to(device).requires_grad_(True)
    ws = normal(g, (33, 8), torch.float32).to(device).requires_grad_(True)
    xt, wt = (
        normal(g, (5, 12), torch.float32).to(device),
        normal(g, (33, 12), torch.float32).to(device),
    )
    lab5 = labels_for(g, 5, 33).to(device)
    args, kwargs = fused_op_call(
        xs,
        ws,
        None,
        xt,
        wt,
        None,
        lab5,
        n,
        temperature=2.0,
        divergence=4,
        alpha=0.3,
        temperature_squared=True,
        outputs=dict(grad_hidden=True, grad_weight=True),
    )
    torch.library.opcheck(_ops.fused_op, args, kwargs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["none", "batchmean"])
def test_compiled_equals_eager_bit_for_bit(device, reduction):
    """KL with a probability target and TVD take torch math before distil's kernel (a log, an
    absolute difference): compiled, that math must round as eagerly, so the loss and the
    gradient are the same bits (Liger-Kernel's own tests ask for torch.equal)."""
    g = gen(81)
    p = torch.softmax(torch.randn(64, 1271, generator=g), -1).to(device)
    q = torch.softmax(torch.randn(64, 1271, generator=g), -1).to(device)
    logp = torch.log_softmax(torch.randn(64, 1271, generator=g), -1).to(device)
    calls = {
        "tvd": (dt.TVDLoss(reduction=reduction), p),
        "kl": (dt.KLDivLoss(reduction=reduction, log_target=False), logp),
    }
    for name, (module, x0) in calls.items():
        torch._dynamo.reset()
        compiled = torch.compile(module)
        x1, x2 = leaf(x0, device), leaf(x0, device)
        out1, out2 = module(x1, q), compiled(x2, q)
        assert torch.equal(out1, out2), f"{name}: compiled loss differs from eager"
        if reduction != "none":
            out1.backward()
            out2.backward()
            assert torch.equal(x1.grad, x2.grad), f"{name}: compiled gradient differs"


@pytest.mark.parametrize("device", DEVICES)
def test_every_library_divergence(device):
    """The Python layers take the library's names (distil_divergence_name), in value order, and
    every divergence it names runs through both losses with finite gradients."""
    names = _lib.DIVERGENCES
    assert list(names.values()) == list(range(len(names)))
    for value, name in enumerate(names):
        assert _lib.lib.distil_divergence_name(value).decode() == name
    assert _lib.lib.distil_divergence_name(len(names)) is None
    pinned = ["jsd", "forward_kl", "reverse_kl", "skew_kl", "skew_reverse_kl", "tvd"]
    assert list(names)[: len(pinned)] == pinned
    g = gen(77)
    T, V, H = 9, 130, 16
    y, lab = log_probs(g, (T, V), torch.float32).to(device), labels_for(g, T, V).to(device)
    xs0, w0 = normal(g, (T, H), torch.float32), normal(g, (V, H), torch.float32, 0.5)
    for name in names:
        x = leaf(log_probs(g, (T, V), torch.float32), device)
        loss = dt.JSD(divergence=name, alpha=0.3)(x, y, lab)
        loss.backward()
        xs, w = leaf(xs0, device), leaf(w0, device)
        fused = dt.FusedLinearJSDLoss(divergence=name, alpha=0.3)(
            xs, w, xs0.to(device), w0.to(device), lab
        )
        fused.backward()
        for t in (loss, x.grad, fused, xs.grad, w.grad):
            assert torch.isfinite(t).all(), name
