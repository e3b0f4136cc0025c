"""The fp8 teacher head (docs/SPEC.md §6) through distil.torch: teacher_head_precision="fp8" on
FusedLinearJSDLoss, FusedLinearJSD and the functional forms, against a float64 torch reference
of the SPEC's formula (rows rounded to e4m3 with scale amax / 448 in fp32, the product of the
codes times both scales in float64), in every dtype; the result must also be far from the exact
head's (self-distillation: the exact soft part is 0). Bad names are refused."""

import pytest
import torch
from conftest import DEVICES, DTYPES, bounds, check, gen, labels_for, leaf, normal, ref_jsd_rows

import distil.torch as dt
import distil.torch.functional as F
from distil import _testing


def e4m3_rows(x):
    """(codes' values as float64, scales [rows] float64) of docs/SPEC.md §6: s = amax / 448 in
    fp32 (1 where that is 0), e4m3(x / s) by round to nearest even with saturation at 448."""
    x = x.float()
    amax = x.abs().amax(-1)
    s = amax / 448.0
    s = torch.where(s > 0, s, torch.ones_like(s))
    q = (x / s[:, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.double(), s.double()


def ref_fp8(
    xs,
    ws,
    xt,
    wt,
    labels,
    bs,
    bt,
    weight_hard=0.5,
    weight_soft=0.5,
    beta=0.5,
    temperature=1.0,
    ignore_index=-100,
    fp8=True,
):
    """(loss, soft part, teacher_lse) in float64 with the fp8 teacher head (fp8=False: the exact
    one)."""
    zs = xs.double() @ ws.double().T + bs.double()
    if fp8:
        qx, sx = e4m3_rows(xt)
        qw, sw = e4m3_rows(wt)
        zt = sx[:, None] * sw[None, :] * (qx @ qw.T) + bt.double()
    else:
        zt = xt.double() @ wt.double().T + bt.double()
    valid = labels != ignore_index
    safe = torch.where(valid, labels, torch.zeros_like(labels))
    ce = torch.logsumexp(zs, -1) - zs.gather(1, safe[:, None])[:, 0]
    soft_rows = ref_jsd_rows(
        torch.log_softmax(zs / temperature, -1), torch.log_softmax(zt / temperature, -1), beta
    )
    n = valid.sum().clamp_min(1)
    zero = torch.zeros_like(ce)
    soft = torch.where(valid, soft_rows, zero).sum() / n
    loss = weight_hard * torch.where(valid, ce, zero).sum() / n + weight_soft * soft
    return loss, soft, torch.logsumexp(zt, -1)


def teacher_bound(device, lb):
    """The soft part's and teacher LSEs' bound: lb, or 1e-3 where the product may be the fp8
    tensor cores' (cuda unless the test hook fp8=emulate), which add the e4m3 products with fewer
    bits than fp32 (docs/SPEC.md §6; this self-distillation's soft part, a second-order quantity
    of the e4m3 rounding, moved by 2e-4 relative on an H200)."""
    if device.startswith("cuda") and not _testing.hook("fp8=emulate"):
        return max(lb, 1e-3)
    return lb


def make(seed, dtype, t=20, v=300, h=40):
    """Self-distillation inputs: the student is the teacher (same rows, head and bias)."""
    g = gen(seed)
    x, w, b = normal(g, (t, h), dtype), normal(g, (v, h), dtype, 0.5), normal(g, (v,), dtype, 0.5)
    return dict(
        xs=x, ws=w, bs=b, xt=x.clone(), wt=w.clone(), bt=b.clone(), labels=labels_for(g, t, v)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_module_against_reference(device, dtype):
    inp = make(7, dtype)
    xs, ws, bs = (leaf(inp[k], device) for k in ("xs", "ws", "bs"))
    xt, wt, bt, lab = (inp[k].to(device) for k in ("xt", "wt", "bt", "labels"))
    loss, soft, _, _, lt = dt.FusedLinearJSDLoss(
        temperature=2.0,
        teacher_head_precision="fp8",
        return_lse=True,
        chunk_rows=7,
        return_soft_hard_loss=True,
    )(xs, ws, xt, wt, lab, bs, bt)
    loss.backward()
    r = {k: v.double() for k, v in inp.items() if k != "labels"}
    args = (r["xs"], r["ws"], r["xt"], r["wt"], inp["labels"], r["bs"], r["bt"])
    want, want_soft, want_lt = ref_fp8(*args, temperature=2.0)
    _, exact_soft, _ = ref_fp8(*args, temperature=2.0, fp8=False)
    lb, _ = bounds(dtype)
    check("loss", loss.detach().cpu(), want, lb)
    check("soft part", soft.cpu(), want_soft, teacher_bound(str(device), lb))
    check("teacher_lse", lt.cpu(), want_lt, teacher_bound(str(device), lb))
    # the fp8 head is not the exact one: its soft part is e4m3's alone (the exact head's is 0)
    assert abs(float(exact_soft)) < 1e-12 and float(soft) > 1e-5
    assert xs.grad is not None and torch.isfinite(xs.grad).all()


@pytest.mark.parametrize("device", DEVICES)
def test_functional_forms(device):
    inp = make(8, torch.bfloat16)
    xs, ws, xt, wt = (inp[k].to(device) for k in ("xs", "ws", "xt", "wt"))
    lab = inp["labels"].to(device)
    a = F.fused_linear_jsd_loss(
        xs,
        ws,
        xt,
        wt,
        lab,
        teacher_head_precision="fp8",
        weight_hard_loss=0.0,
        weight_soft_loss=1.0,
    )
    b = F.fused_linear_jsd(xs, ws, xt, wt, lab, teacher_head_precision="fp8")
    c = dt.FusedLinearJSD(teacher_head_precision="fp8")(xs, ws, xt, wt, lab)
    exact = F.fused_linear_jsd(xs, ws, xt, wt, lab)
    assert float(a) == pytest.approx(float(b), rel=1e-6)
    assert float(b) == float(c)
    assert float(b) > 0 and float(exact) < 1e-6 * float(b)


def test_bad_name():
    inp = make(9, torch.float32)
    with pytest.raises(ValueError, match="teacher_head_precision"):
        F.fused_linear_jsd(
            inp["xs"], inp["ws"], inp["xt"], inp["wt"], inp["labels"], teacher_head_precision="int4"
        )


def _distinct(seed, dtype, device, t=20, v=300, hs=24, ht=40):
    """A student and a teacher of their own (the head made once must be the teacher's)."""
    g = gen(seed)
    return dict(
        xs=leaf(normal(g, (t, hs), dtype), device),
        ws=leaf(normal(g, (v, hs), dtype, 0.5), device),
        xt=normal(g, (t, ht), dtype).to(device),
        wt=normal(g, (v, ht), dtype, 0.5).to(device),
        labels=labels_for(g, t, v).to(device),
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_head_made_once(device, dtype):
    """e4m3_head's head gives the bits of the call that rounds Wt itself (docs/SPEC.md §6):
    loss, parts and gradients, through the functional form, a module's cache and a module
    given the head per call. Where a head is given the teacher weight passed beside it is zeros
    (it gives the shape only), so a call that ignored the head would fail here."""
    inp = _distinct(11, dtype, device)
    xs, ws, xt, wt, lab = (inp[k] for k in ("xs", "ws", "xt", "wt", "labels"))
    head = dt.e4m3_head(wt)
    assert head.dtype is torch.uint8 and head.device == wt.device

    zeros = torch.zeros_like(wt)

    def run(w=wt, **kw):
        xs.grad = ws.grad = None
        loss = F.fused_linear_jsd_loss(
            xs, ws, xt, w, lab, teacher_head_precision="fp8", chunk_rows=7, **kw
        )
        loss.backward()
        return loss.detach().clone(), xs.grad.clone(), ws.grad.clone()

    want = run()
    got = run(zeros, teacher_weight_e4m3=head)
    assert not torch.equal(run(zeros)[0], want[0])  # zeros are a weight of another loss
    for name, a, b in zip(("loss", "grad_xs", "grad_Ws"), want, got, strict=False):
        assert torch.equal(a, b), name
    module = dt.FusedLinearJSDLoss(
        teacher_head_precision="fp8", cache_teacher_head=True, chunk_rows=7
    )
    first = None
    for _ in range(2):  # made on the first call, reused on the second
        xs.grad = ws.grad = None
        loss = module(xs, ws, xt, wt, lab)
        loss.backward()
        assert torch.equal(loss.detach(), want[0]) and torch.equal(xs.grad, want[1])
        first = first if first is not None else module._head_cache.head
    kept = module._head_cache.head
    assert kept is first  # a cache that never hit would make a new head per call
    assert kept is not None and torch.equal(kept, head)
    loss = dt.FusedLinearJSDLoss(teacher_head_precision="fp8", chunk_rows=7)(
        xs, ws, xt, zeros, lab, teacher_weight_e4m3=head
    )
    assert torch.equal(loss.detach(), want[0])


@pytest.mark.parametrize("device", DEVICES)
def test_head_cache_follows_the_weight(device):
    """An in-place change of the teacher's weight makes the cache round it again: the loss
    follows the new weight (the stale head would give the old loss)."""
    inp = _distinct(12, torch.bfloat16, device)
    xs, ws, xt, wt, lab = (inp[k] for k in ("xs", "ws", "xt", "wt", "labels"))
    module = dt.FusedLinearJSD(teacher_head_precision="fp8", cache_teacher_head=True)
    before = module(xs, ws, xt, wt, lab).detach().clone()
    first = module._head_cache.head
    with torch.no_grad():
        wt.mul_(-1.5)
    after = module(xs, ws, xt, wt, lab).detach()
    fresh = F.fused_linear_jsd(xs, ws, xt, wt, lab, teacher_head_precision="fp8").detach()
    assert module._head_cache.head is not first
    assert torch.equal(after, fresh) and not torch.equal(after, before)


@pytest.mark.parametrize("device", DEVICES)
def test_head_cache_not_fooled(device):
    """The cache keys on the weight's storage object and view, not its address: a new tensor
    that the allocator placed where the old one was (a clone each step), a transposed view of
    the same storage and an inference tensor (no version counter) each get their own head."""
    inp = _distinct(15, torch.bfloat16, device)
    xs, ws, xt, wt, lab = (inp[k] for k in ("xs", "ws", "xt", "wt", "labels"))
    module = dt.FusedLinearJSD(teacher_head_precision="fp8", cache_teacher_head=True)

    def fresh(w):
        return F.fused_linear_jsd(xs, ws, xt, w, lab, teacher_head_precision="fp8").detach()

    master = wt.clone()
    for _ in range(3):
        with torch.no_grad():
            master.mul_(-1.3)
        step = master.clone()  # version 0, often at the address the last step's clone had
        assert torch.equal(module(xs, ws, xt, step, lab).detach(), fresh(step))
        del step
    sq = _distinct(16, torch.bfloat16, device, v=40, ht=40)  # Wt square: Wt.t() fits too
    square = dt.FusedLinearJSD(teacher_head_precision="fp8", cache_teacher_head=True)
    for w in (sq["wt"], sq["wt"].t()):
        args = (sq["xs"], sq["ws"], sq["xt"], w, sq["labels"])
        assert torch.equal(
            square(*args).detach(), F.fused_linear_jsd(*args, teacher_head_precision="fp8").detach()
        )
    with torch.inference_mode():
        frozen = wt.clone()
    assert torch.equal(module(xs, ws, xt, frozen, lab).detach(), fresh(frozen))


@pytest.mark.parametrize("device", DEVICES)
def test_head_cache_checks_first(device):
    """A module's cache makes no head for a call that its own checks refuse: the teacher's
    weight of another dtype is not rounded, and the message names the loss, not e4m3_head."""
    inp = _distinct(17, torch.float32, device)
    xs, ws, xt, wt, lab = (inp[k] for k in ("xs", "ws", "xt", "wt", "labels"))
    loss = dt.FusedLinearJSDLoss(teacher_head_precision="fp8", cache_teacher_head=True)
    with pytest.raises(ValueError, match="fused_linear_jsd: teacher_weight is float16"):
        loss(xs, ws, xt, wt.half(), lab)
    assert loss._head_cache.head is None
    jsd = dt.FusedLinearJSD(teacher_head_precision="fp8", cache_teacher_head=True)
    with pytest.raises(ValueError, match="fused_linear_jsd: teacher_weight must be 2-D"):
        jsd(xs, ws, xt, wt[0], lab)
    assert jsd._head_cache.head is None


@pytest.mark.parametrize("device", DEVICES)
def test_head_misuse(device):
    """A head of another shape, of another dtype, or without the fp8 precision is refused with
    a message naming the argument."""
    inp = _distinct(13, torch.float32, device)
    xs, ws, xt, wt, lab = (inp[k] for k in ("xs", "ws", "xt", "wt", "labels"))
    other = dt.e4m3_head(wt[:, :24].contiguous())
    with pytest.raises(ValueError, match="teacher_weight_e4m3_bytes"):
        F.fused_linear_jsd(
            xs, ws, xt, wt, lab, teacher_head_precision="fp8", teacher_weight_e4m3=other
        )
    head = dt.e4m3_head(wt)
    with pytest.raises(ValueError, match="teacher_weight_e4m3"):
        F.fused_linear_jsd(xs, ws, xt, wt, lab, teacher_weight_e4m3=head)
    with pytest.raises(ValueError, match="teacher_weight_e4m3"):
        F.fused_linear_jsd(
            xs, ws, xt, wt, lab, teacher_head_precision="fp8", teacher_weight_e4m3=head.float()
        )
    with pytest.raises(ValueError, match="teacher_weight"):
        dt.e4m3_head(wt[0])


def test_head_made_once_compiles():
    """teacher_weight_e4m3 through torch.compile(fullgraph=True): the same loss and gradient
    as eager (the op takes the head as a tensor argument)."""
    inp = _distinct(14, torch.float32, "cpu", t=16)
    xs, ws, xt, wt, lab = (inp[k] for k in ("xs", "ws", "xt", "wt", "labels"))
    head = dt.e4m3_head(wt)

    def f(xs, ws, xt, wt, lab, head):
        return F.fused_linear_jsd_loss(
            xs, ws, xt, wt, lab, teacher_head_precision="fp8", teacher_weight_e4m3=head
        )

    want = F.fused_linear_jsd_loss(xs, ws, xt, wt, lab, teacher_head_precision="fp8")
    want.backward()
    want_grad, xs.grad = xs.grad.clone(), None
    # zeros beside the head: only a compiled op that reads the head gives the eager loss
    got = torch.compile(f, fullgraph=True)(xs, ws, xt, torch.zeros_like(wt), lab, head)
    got.backward()
    assert torch.equal(got.detach(), want.detach()) and torch.equal(xs.grad, want_grad)
