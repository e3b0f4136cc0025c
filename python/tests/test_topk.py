"""distil.torch's cached top-k teacher losses (docs/SPEC.md §7) against a float64 PyTorch
reference written from the spec (not distil's "ref" backend), under the bounds of §3; the cache
helper; torch.compile(fullgraph=True); opcheck; bad input."""

import math

import pytest
import torch
from conftest import DEVICES, bounds, check, gen, labels_for, leaf, log_probs, normal

import distil
import distil.torch as dt

TAILS = ["tail", "renormalise", "zero"]
# (divergence, beta, alpha): every divergence of docs/SPEC.md §6
DIVS = [
    ("forward_kl", 0.5, 0.1),
    ("reverse_kl", 0.5, 0.1),
    ("jsd", 0.3, 0.1),
    ("skew_kl", 0.5, 0.2),
    ("skew_reverse_kl", 0.5, 0.7),
    ("tvd", 0.5, 0.1),
]
TIE_GAP = 0.03  # TVD: outcomes kept this far (log space) from p = q, as tests/common/topk_untie.c


def ref_elem(X, Y, divergence, beta, alpha=0.1):
    """docs/SPEC.md §1 / §6's element term in float64; 0 where the weighting probability is 0."""
    q, p = X.exp(), Y.exp()
    zero = torch.zeros_like(X)
    if divergence == "forward_kl":
        return torch.where(p > 0, p * (Y - X), zero)
    if divergence == "reverse_kl":
        return torch.where(q > 0, q * (X - Y), zero)
    if divergence == "tvd":
        return 0.5 * (p - q).abs()
    if divergence == "skew_kl":  # KL(p || m), m = alpha p + (1 - alpha) q
        m = torch.logaddexp(math.log(alpha) + Y, math.log1p(-alpha) + X)
        return torch.where(p > 0, p * (Y - m), zero)
    if divergence == "skew_reverse_kl":  # KL(q || m), m = (1 - alpha) p + alpha q
        m = torch.logaddexp(math.log1p(-alpha) + Y, math.log(alpha) + X)
        return torch.where(q > 0, q * (X - m), zero)
    m = torch.logaddexp(math.log(beta) + Y, math.log1p(-beta) + X)
    return torch.where(p > 0, beta * p * (Y - m), zero) + torch.where(
        q > 0, (1 - beta) * q * (X - m), zero
    )


def outcomes(x, ids, y, tail, pad_id=-1):
    """The outcomes (X, Y) of docs/SPEC.md §7 per row, float64: the k slots [T, k] (pads masked
    out by `valid`), and the tail [T] (None for renormalise)."""
    valid = ids != pad_id
    safe = torch.where(valid, ids, torch.zeros_like(ids))
    mask = torch.zeros_like(x, dtype=torch.bool)
    for r, c in valid.nonzero().tolist():  # (a scatter of the pads' False could race a real id)
        mask[r, ids[r, c]] = True
    xk = x.gather(1, safe)
    yk = torch.where(valid, y, torch.zeros_like(y))  # pads: finite stand-ins, zeroed by callers
    qk = torch.where(valid, xk.exp(), torch.zeros_like(xk)).sum(-1)
    pk = torch.where(valid, yk.exp(), torch.zeros_like(yk)).sum(-1)
    if tail == "renormalise":
        return valid, (xk - qk.log()[:, None], yk - pk.log()[:, None]), None
    qt = torch.where(mask, torch.zeros_like(x), x.exp()).sum(-1)
    pt = (1 - pk).clamp_min(0) if tail == "tail" else torch.zeros_like(pk)
    return valid, (xk, yk), (qt.log(), pt.log())


def untie(x, ids, logp, tail):
    """TVD's gradient jumps where p = q and rounding picks the side there (docs/SPEC.md §6):
    move the teacher's log-probs (slot j, or slot 0 for the tail) down until every outcome of
    the student log-probs x (float64) is TIE_GAP from a tie. Returns the new logp (its dtype)."""
    y = logp.double().clone()
    for _ in range(64):
        valid, (xk, yk), t = outcomes(x, ids, y.to(logp.dtype).double(), tail)
        near = valid & ((xk - yk).abs() < TIE_GAP)
        if tail == "renormalise":
            near &= valid.sum(-1, keepdim=True) > 1  # one slot: X = Y = 0, gradient 0 anyway
        if t is not None:
            near[:, 0] |= torch.isfinite(t[1]) & ((t[0] - t[1]).abs() < TIE_GAP)
        if not near.any():
            break
        y = torch.where(near, y - 2 * TIE_GAP, y)
    return y.to(logp.dtype)


def ref_topk_rows(x, ids, y, tail, divergence, beta, alpha=0.1, pad_id=-1):
    """Per-row loss of docs/SPEC.md §7 for student log-probs x [T, V] (a free variable: Q_t is
    the sum of exp(x) outside the ids) and the teacher (ids, y) [T, k], float64."""
    valid, (xk, yk), t = outcomes(x, ids, y, tail, pad_id)
    e = ref_elem(xk, yk, divergence, beta, alpha)
    e = torch.where(valid, e, torch.zeros_like(e)).sum(-1)
    return e if t is None else e + ref_elem(t[0], t[1], divergence, beta, alpha)


def make(seed, dtype, t=20, v=300, k=8, hs=16, pad=True, tdtype=torch.float32):
    g = gen(seed)
    teacher = torch.randn((t, v), generator=g, dtype=torch.float64) * 3
    ids, logp = dt.topk_cache(teacher, k)
    if pad:
        ids[2::3, k // 2 :] = -1  # rows with fewer than k entries
    return dict(
        x=log_probs(g, (t, v), dtype),
        ids=ids,
        logp=logp.to(tdtype),
        xs=normal(g, (t, hs), dtype),
        ws=normal(g, (v, hs), dtype, 0.5),
        bs=normal(g, (v,), dtype, 0.5),
        labels=labels_for(g, t, v),
    )


def test_topk_cache():
    logits = torch.randn(4, 7, 50, dtype=torch.float64)
    ids, logp = dt.topk_cache(logits, 6, temperature=2.0)
    assert ids.shape == (4, 7, 6) and ids.dtype == torch.int64 and logp.dtype == torch.float32
    full = torch.log_softmax(logits / 2.0, -1)
    assert torch.allclose(logp.double(), full.gather(-1, ids), atol=1e-6)
    assert (logp[..., :-1] >= logp[..., 1:]).all()
    assert torch.equal(full.topk(6, -1).indices, ids)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("divergence,beta,alpha", DIVS)
def test_topk_loss(device, dtype, tail, divergence, beta, alpha):
    if tail == "zero" and divergence == "reverse_kl":
        pytest.skip("reverse KL against a teacher that is 0 off the ids is +inf")
    i = make(1, dtype)
    if divergence == "tvd":
        i["logp"] = untie(i["x"].double(), i["ids"], i["logp"], tail)
    x = leaf(i["x"], device)
    loss = dt.topk_loss(
        x,
        i["ids"].to(device),
        i["logp"].to(device),
        i["labels"].to(device),
        tail=tail,
        divergence=divergence,
        beta=beta,
        alpha=alpha,
    )
    (loss * 0.75).backward()
    rx = i["x"].double().requires_grad_(True)
    rows = ref_topk_rows(rx, i["ids"], i["logp"].double(), tail, divergence, beta, alpha)
    valid = i["labels"] != -100
    ref = torch.where(valid, rows, torch.zeros_like(rows)).sum() / valid.sum()
    (ref * 0.75).backward()
    lb, gb = bounds(dtype)
    check("loss", loss, ref, lb)
    check("grad", x.grad, rx.grad, gb)


@pytest.mark.parametrize("device", DEVICES)
def test_topk_loss_none_int32_f16_teacher(device):
    i = make(2, torch.float32, tdtype=torch.float16)
    loss = dt.TopKLoss(tail="tail", divergence="jsd", beta=0.5, reduction="none")(
        i["x"].to(device), i["ids"].int().to(device), i["logp"].to(device)
    )
    ref = ref_topk_rows(i["x"].double(), i["ids"], i["logp"].double(), "tail", "jsd", 0.5)
    assert loss.shape == (20,)
    check("rows", loss, ref, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "tail,divergence,beta,alpha",
    [
        ("tail", "forward_kl", 0.5, 0.1),
        ("renormalise", "jsd", 0.4, 0.1),
        ("zero", "forward_kl", 0.5, 0.1),
        ("tail", "reverse_kl", 0.5, 0.1),
        ("tail", "skew_kl", 0.5, 0.3),
        ("renormalise", "skew_reverse_kl", 0.5, 0.6),
        ("zero", "skew_reverse_kl", 0.5, 0.1),
        ("tail", "tvd", 0.5, 0.1),
        ("zero", "tvd", 0.5, 0.1),
    ],
)
def test_fused_topk(device, dtype, tail, divergence, beta, alpha):
    i = make(3, dtype)
    tau = 1.5
    if divergence == "tvd":
        z = i["xs"].double() @ i["ws"].double().T + i["bs"].double()
        i["logp"] = untie(torch.log_softmax(z / tau, -1), i["ids"], i["logp"], tail)
    xs, ws, bs = (leaf(i[k], device) for k in ("xs", "ws", "bs"))
    module = dt.FusedLinearTopKLoss(
        0.3,
        0.7,
        tail=tail,
        divergence=divergence,
        beta=beta,
        alpha=alpha,
        temperature=tau,
        chunk_rows=7,
        return_soft_hard_loss=True,
    )
    loss, soft, hard = module(
        xs, ws, i["ids"].to(device), i["logp"].to(device), i["labels"].to(device), bs
    )
    (loss * 2.0).backward()
    r = {k: (v.double() if v.is_floating_point() else v) for k, v in i.items()}
    rxs, rws, rbs = (r[k].requires_grad_(True) for k in ("xs", "ws", "bs"))
    z = rxs @ rws.T + rbs
    valid = r["labels"] != -100
    safe = torch.where(valid, r["labels"], torch.zeros_like(r["labels"]))
    ce = torch.logsumexp(z, -1) - z.gather(1, safe[:, None])[:, 0]
    rows = ref_topk_rows(
        torch.log_softmax(z / tau, -1), r["ids"], r["logp"], tail, divergence, beta, alpha
    )
    n = valid.sum()
    rhard = torch.where(valid, ce, torch.zeros_like(ce)).sum() / n
    rsoft = torch.where(valid, rows, torch.zeros_like(rows)).sum() / n
    ref = 0.3 * rhard + 0.7 * rsoft
    (ref * 2.0).backward()
    lb, gb = bounds(dtype, fused=True)
    check("loss", loss, ref, lb)
    check("soft", soft, rsoft, lb)
    check("hard", hard, rhard, lb)
    check("grad_student_input", xs.grad, rxs.grad, gb)
    check("grad_student_weight", ws.grad, rws.grad, gb)
    check("grad_student_bias", bs.grad, rbs.grad, gb)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    i = make(4, torch.float32)
    ids, logp, lab = i["ids"].to(device), i["logp"].to(device), i["labels"].to(device)
    mod = dt.FusedLinearTopKLoss(divergence="jsd", beta=0.5, temperature=2.0)
    compiled = torch.compile(
        lambda a, b, c: (
            mod(a, b, ids, logp, lab, c) + dt.topk_loss(torch.log_softmax(a @ b.T, -1), ids, logp)
        ),
        fullgraph=True,
    )
    xs, ws, bs = (leaf(i[k], device) for k in ("xs", "ws", "bs"))
    out = compiled(xs, ws, bs)
    out.backward()
    xs2, ws2, bs2 = (leaf(i[k], device) for k in ("xs", "ws", "bs"))
    eager = mod(xs2, ws2, ids, logp, lab, bs2) + dt.topk_loss(
        torch.log_softmax(xs2 @ ws2.T, -1), ids, logp
    )
    eager.backward()
    check("compiled loss", out, eager, 1e-6)
    check("compiled grad_student_input", xs.grad, xs2.grad, 1e-5)
    check("compiled grad_student_weight", ws.grad, ws2.grad, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    from distil.torch import topk

    i = {k: v.to(device) for k, v in make(5, torch.float32).items()}
    x = i["x"].detach().requires_grad_(True)
    n = torch.tensor(7.0, device=device)
    for tensors, opts in [
        ((x, i["ids"], i["logp"], i["labels"], None), topk.TopkOptions()),
        (
            (x, i["ids"].int(), i["logp"], None, None),
            topk.TopkOptions("renormalise", "jsd", 0.3, reduction="none"),
        ),
        ((x, i["ids"], i["logp"], None, n), topk.TopkOptions("tail", "skew_kl", 0.3, 0.25)),
    ]:
        torch.library.opcheck(topk.topk_op, tensors, dict(opts.op_kwargs(), want_grad=True))
    req = [i[k].detach().requires_grad_(True) for k in ("xs", "ws", "bs")]
    cases = [
        (
            (req[0], req[1], req[2], i["ids"], i["logp"], i["labels"], None),
            topk.FusedTopkOptions(),
            (True, True, True),
        ),
        (
            (req[0], i["ws"], None, i["ids"], i["logp"].bfloat16(), None, None),
            topk.FusedTopkOptions(
                "zero",
                "jsd",
                reduction="sum",
                weight_hard=0.0,
                weight_soft=1.0,
                temperature=2.0,
                chunk_rows=4,
            ),
            (True, False, False),
        ),
        (
            (req[0], req[1], None, i["ids"], i["logp"], i["labels"], None),
            topk.FusedTopkOptions("tail", "skew_reverse_kl", alpha=0.4, normaliser=12.5),
            (True, True, False),
        ),
    ]
    for tensors, opts, (gx, gw, gb) in cases:
        torch.library.opcheck(
            topk.fused_topk_op,
            tensors,
            dict(opts.op_kwargs(), want_grad_hidden=gx, want_grad_weight=gw, want_grad_bias=gb),
        )


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise_with_message(device):
    i = {k: v.to(device) for k, v in make(6, torch.float32).items()}
    with pytest.raises(ValueError, match="tail"):
        dt.topk_loss(i["x"], i["ids"], i["logp"], tail="none")
    with pytest.raises(ValueError, match="divergence"):
        dt.topk_loss(i["x"], i["ids"], i["logp"], divergence="hellinger")
    with pytest.raises(ValueError, match="alpha"):
        dt.topk_loss(i["x"], i["ids"], i["logp"], divergence="skew_kl", alpha=1.5)
    with pytest.raises(ValueError, match="alpha"):
        dt.fused_linear_topk_loss(
            i["xs"],
            i["ws"],
            i["ids"],
            i["logp"],
            i["labels"],
            divergence="skew_reverse_kl",
            alpha=-0.1,
        )
    with pytest.raises(ValueError, match="teacher_ids"):
        dt.topk_loss(i["x"], i["ids"].float(), i["logp"])
    with pytest.raises(ValueError, match="rows"):
        dt.topk_loss(i["x"][:5], i["ids"], i["logp"])
    with pytest.raises(ValueError, match="pad_id"):
        dt.topk_loss(i["x"], i["ids"], i["logp"], pad_id=3)
    bad = i["ids"].clone()
    bad[4, 1] = bad[4, 0]
    # the cpu backend raises at the call; on a GPU the error is deferred to the next check()
    with pytest.raises(distil.InvalidLabel, match="teacher_ids: row 4"):
        dt.topk_loss(i["x"], bad, i["logp"])
        dt.check(i["x"].device)


@pytest.mark.parametrize("device", DEVICES)
def test_given_normaliser(device):
    """batchmean's N given as a host value or as a device tensor: loss and gradient are the
    counted one's times (counted N / given N)."""
    i = make(7, torch.float32)
    args = (i["ids"].to(device), i["logp"].to(device), i["labels"].to(device))
    n = (i["labels"] != -100).sum().item()
    grads = []
    for given in (None, 40.0, torch.tensor(40.0, device=device)):
        x = leaf(i["x"], device)
        loss = dt.topk_loss(x, *args, normaliser=given)
        loss.backward()
        grads.append((loss.detach(), x.grad))
    for loss, grad in grads[1:]:
        check("loss", loss, grads[0][0] * n / 40.0, 1e-6)
        check("grad", grad, grads[0][1] * n / 40.0, 1e-6)
    xs, ws = leaf(i["xs"], device), leaf(i["ws"], device)
    a = dt.fused_linear_topk_loss(xs, ws, *args, normaliser=torch.tensor(3.0, device=device))
    b = dt.fused_linear_topk_loss(xs, ws, *args)
    check("fused loss", a, b * n / 3.0, 1e-6)
