"""Offline distillation from a cached top-k teacher (docs/SPEC.md §7) for PyTorch.

  topk_cache(teacher_logits, k, temperature=1.0) -> (ids [..., k] int64, logprobs [..., k] fp32)
      the cache a teacher pass writes once: its top-k token ids and log-softmax(logits / T)
  topk_loss(student_logp, teacher_ids, teacher_logp, labels=None, *, tail="tail",
            divergence="forward_kl", beta=0.5, ignore_index=-100, reduction="batchmean",
            pad_id=-1, normaliser=None, alpha=0.1)
      the divergence between student log-probs [..., V] and the cached teacher (like jsd)
  fused_linear_topk_loss(student_input, student_weight, teacher_ids, teacher_logp, labels,
            student_bias=None, weight_hard_loss=0.5, weight_soft_loss=0.5, *, tail="tail",
            divergence="forward_kl", beta=0.5, temperature=1.0, ignore_index=-100,
            reduction="batchmean", pad_id=-1, chunk_rows=0, return_soft_hard_loss=False,
            normaliser=None, alpha=0.1)
      hard CE + the soft divergence through the student's head, chunked: the [T, V] logits never
      exist, and the teacher costs O(T k)
  TopKLoss, FusedLinearTopKLoss: the same as modules.
tail: "tail" (the teacher's mass outside the top k as one more outcome), "renormalise" or
"zero"; divergence: any of the dense losses' (docs/SPEC.md §6): "forward_kl", "reverse_kl",
"jsd" (with beta), "skew_kl", "skew_reverse_kl" (with alpha) or "tvd". The teacher's log-probs are
used as given (fp32, bf16 or fp16; ids int64 or int32): a teacher temperature belongs in
topk_cache. Ops: distil::topk and distil::fused_linear_topk, with fake kernels and autograd as
distil::jsd and distil::fused_linear_jsd (gradients computed in the forward call, scaled by the
upstream gradient in backward).
"""

import dataclasses
from typing import NamedTuple

import torch
from torch import Tensor

from .. import _errors, _lib, _options, _topk
from . import _ops
from .functional import _check_temperature, _fail, _labels, _rows, _same, _wants_grad, _wants_grads

_IDS = {torch.int64: _topk.IDS_I64, torch.int32: _topk.IDS_I32}


def topk_cache(teacher_logits: Tensor, k: int, temperature: float = 1.0):
    """(ids, logprobs) of the teacher's top k: int64 ids [..., k] and fp32 log-probs [..., k]
    of log_softmax(teacher_logits / temperature), highest first."""
    if not 1 <= int(k) <= teacher_logits.shape[-1]:
        _fail(f"topk_cache: k {k} is not in [1, {teacher_logits.shape[-1]}]")
    _check_temperature("topk_cache", float(temperature))
    with torch.no_grad():
        logp = torch.log_softmax(teacher_logits.float() / float(temperature), dim=-1)
        values, ids = torch.topk(logp, int(k), dim=-1)
    return ids, values


def _teacher_tensors(fn, ids: Tensor, logp: Tensor, rows: int, device):
    if ids.dtype not in _IDS:
        _fail(f"{fn}: teacher_ids must be int64 or int32, got {ids.dtype}")
    if logp.dtype not in _ops._DTYPES:
        _fail(f"{fn}: teacher_logp must be float32, bfloat16 or float16, got {logp.dtype}")
    if ids.shape != logp.shape or ids.dim() < 1:
        _fail(f"{fn}: teacher_ids {tuple(ids.shape)} and teacher_logp {tuple(logp.shape)} differ")
    for name, t in (("teacher_ids", ids), ("teacher_logp", logp)):
        if t.device != device:
            _fail(f"{fn}: {name} is on {t.device}, the student on {device}")
    k = ids.shape[-1]
    ids, logp = ids.reshape(-1, k).contiguous(), logp.reshape(-1, k).contiguous()
    if ids.shape[0] != rows:
        _fail(f"{fn}: the teacher has {ids.shape[0]} rows, the student {rows}")
    return ids, logp


@dataclasses.dataclass(frozen=True)
class TopkOptions:
    """distil_topk_desc's options (docs/SPEC.md §7); normaliser 0.0: counted."""

    tail: str = "tail"
    divergence: str = "forward_kl"
    beta: float = 0.5
    alpha: float = 0.1
    ignore_index: int = -100
    reduction: str = "batchmean"
    pad_id: int = -1
    normaliser: float = 0.0

    def op_kwargs(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class FusedTopkOptions(TopkOptions):
    """distil_fused_linear_topk_desc's: TopkOptions' and the fused loss's own."""

    weight_hard: float = 0.5
    weight_soft: float = 0.5
    temperature: float = 1.0
    chunk_rows: int = 0


def _shared_options(tail, divergence, beta, alpha, ignore_index, reduction, pad_id, normaliser):
    """TopkOptions' fields by name, as both top-k losses take them from their keywords."""
    return dict(
        tail=tail,
        divergence=divergence,
        beta=float(beta),
        alpha=float(alpha),
        ignore_index=int(ignore_index),
        reduction=reduction,
        pad_id=int(pad_id),
        normaliser=normaliser,
    )


def _teacher_key(ids, logp, opts: TopkOptions):
    """What _topk's plans take of the teacher and the options (its own tuple's order)."""
    return (
        ids.shape[1],
        _ops._DTYPES[logp.dtype],
        _IDS[ids.dtype],
        opts.pad_id,
        opts.tail,
        opts.divergence,
        opts.beta,
        opts.normaliser,
        opts.alpha,
    )


class TopkTensors(NamedTuple):
    """A top-k call's tensors: student log-probs [T, V], the teacher's ids and log-probs
    [T, k], labels [T] or None, N on the device or None."""

    student_logp: Tensor
    teacher_ids: Tensor
    teacher_logp: Tensor
    labels: Tensor | None = None
    normaliser: Tensor | None = None


# ---------------------------------------------------------------------- log-prob form op


def _topk_run(t: TopkTensors, opts: TopkOptions, want_grad: bool):
    x = t.student_logp
    rows, vocab = x.shape
    loss = _ops._out(x, (rows,) if opts.reduction == "none" else (), torch.float32)
    grad = _ops._out(x, (rows, vocab) if want_grad else (0,), x.dtype)
    ctx = _ops.context_for(x)
    desc, nbytes = _topk.topk_plan(
        ctx,
        rows,
        vocab,
        (x.stride(0), vocab),
        _ops._DTYPES[x.dtype],
        _teacher_key(t.teacher_ids, t.teacher_logp, opts),
        opts.ignore_index,
        opts.reduction,
    )
    ws = _ops._workspace(x, nbytes)
    a = _ops._addr
    _ops._torch_errors(
        _topk.run_topk,
        ctx,
        desc,
        a(ws),
        nbytes,
        (
            x.data_ptr(),
            t.teacher_ids.data_ptr(),
            t.teacher_logp.data_ptr(),
            a(t.labels),
            a(loss),
            a(grad) if want_grad else 0,
        ),
        a(t.normaliser),
    )
    _ops._after_call(ctx, x)
    return loss, grad


def _topk_impl(*tensors, **kw):
    """topk_op's kernel: TopkTensors' five, TopkOptions' fields and want_grad by name."""
    return _topk_run(TopkTensors(*tensors), _options.fields_of(TopkOptions, kw), kw["want_grad"])


topk_op = torch.library.custom_op(
    "distil::topk",
    _topk_impl,
    mutates_args=(),
    schema="(Tensor student_logp, Tensor teacher_ids, Tensor teacher_logp, Tensor? labels, "
    f"Tensor? normaliser_device, *, {_ops._schema_of(TopkOptions)}, bool want_grad) -> "
    "(Tensor, Tensor)",
)


@topk_op.register_fake
def _topk_fake(*tensors, **kw):
    x = TopkTensors(*tensors).student_logp
    rows, vocab = x.shape
    loss = x.new_empty((rows,) if kw["reduction"] == "none" else (), dtype=torch.float32)
    grad = x.new_empty((rows, vocab) if kw["want_grad"] else (0,))
    return loss, grad


def _topk_setup(ctx, inputs, keyword_only_inputs, output):
    ctx.per_row = keyword_only_inputs["reduction"] == "none"
    ctx.want_grad = keyword_only_inputs["want_grad"]
    ctx.save_for_backward(output[1] if ctx.want_grad else None)


def _topk_grad(ctx, grad, grad_loss):
    if ctx.per_row:
        return grad * grad_loss.unsqueeze(-1).to(grad.dtype)
    return _ops._scaled(ctx, [grad], grad_loss)[0]


def _topk_backward(ctx, grad_loss, grad_grad):
    (grad,) = ctx.saved_tensors
    return (_topk_grad(ctx, grad, grad_loss) if ctx.want_grad else None,) + (None,) * 4


topk_op.register_autograd(_topk_backward, setup_context=_topk_setup)


class _TopkFunction(torch.autograd.Function):
    """The eager route: apply(student_logp, call), call = (TopkTensors, options, want_grad)."""

    @staticmethod
    def forward(ctx, x, call):
        t, opts, want_grad = call
        loss, grad = _topk_run(t._replace(student_logp=x), opts, want_grad)
        ctx.per_row, ctx.want_grad = opts.reduction == "none", want_grad
        ctx.grads = (grad,)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        (grad,) = _ops._take_grads(ctx)
        return (_topk_grad(ctx, grad, grad_loss) if ctx.want_grad else None), None


def _topk_call(t: TopkTensors, opts: TopkOptions, want_grad: bool) -> Tensor:
    # The plain Function only where nothing traces (torch.compile, FakeTensorMode, make_fx,
    # functorch) and every tensor is plain, as the dense losses decide (_ops._untraced).
    if not _ops._untraced(*t):
        return topk_op(*t, **opts.op_kwargs(), want_grad=want_grad)[0]
    return _TopkFunction.apply(t.student_logp, _ops._Opaque((t, opts, want_grad)))


# ------------------------------------------------------------------------- fused form op


class FusedTopkTensors(NamedTuple):
    """A fused top-k call's tensors: the student's hidden states, head and bias, the teacher's
    ids and log-probs, labels, N on the device."""

    xs: Tensor
    ws: Tensor
    bs: Tensor | None
    teacher_ids: Tensor
    teacher_logp: Tensor
    labels: Tensor | None = None
    normaliser: Tensor | None = None


def _fused_outputs(xs, ws, want: _options.FusedOutputs, make):
    """(loss parts [3] fp32, grad_xs, grad_Ws, grad_bs), make's unwanted (shape None) where a
    gradient is unwanted."""
    parts = make(xs, (3,), torch.float32)
    gx = make(xs, xs.shape if want.grad_hidden else None, xs.dtype)
    gw = make(ws, ws.shape if want.grad_weight else None, ws.dtype)
    gb = make(ws, (ws.shape[0],) if want.grad_bias else None, ws.dtype)
    return parts, gx, gw, gb


def _fused_topk_run(t: FusedTopkTensors, opts: FusedTopkOptions, want: _options.FusedOutputs):
    xs, ws = t.xs, t.ws
    parts, gx, gw, gb = _fused_outputs(xs, ws, want, _ops._out)
    ctx = _ops.context_for(xs)
    rows, hs = xs.shape
    desc, nbytes = _topk.fused_topk_plan(
        ctx,
        rows,
        ws.shape[0],
        hs,
        _ops._dtype_code(xs),
        _teacher_key(t.teacher_ids, t.teacher_logp, opts),
        (opts.weight_hard, opts.weight_soft),
        opts.temperature,
        opts.ignore_index,
        opts.reduction,
        opts.chunk_rows,
        want.grads,
        ws.shape[1],
    )
    work = _ops._workspace(xs, nbytes)
    a = _ops._addr
    _ops._torch_errors(
        _topk.run_fused_topk,
        ctx,
        desc,
        a(work),
        nbytes,
        [
            a(xs),
            a(ws),
            a(t.bs),
            a(t.teacher_ids),
            a(t.teacher_logp),
            a(t.labels),
            a(parts),
            a(gx),
            a(gw),
            a(gb),
        ],
        a(t.normaliser),
    )
    _ops._after_call(ctx, xs)
    return parts, gx, gw, gb


_GRAD_WANTS = ("want_grad_hidden", "want_grad_weight", "want_grad_bias")


def _fused_topk_impl(*tensors, **kw):
    """fused_topk_op's kernel: FusedTopkTensors' seven, the options and wants by name."""
    want = _options.FusedOutputs(*(kw[k] for k in _GRAD_WANTS))
    return _fused_topk_run(
        FusedTopkTensors(*tensors), _options.fields_of(FusedTopkOptions, kw), want
    )


fused_topk_op = torch.library.custom_op(
    "distil::fused_linear_topk",
    _fused_topk_impl,
    mutates_args=(),
    schema="(Tensor student_hidden, Tensor student_weight, Tensor? student_bias, "
    "Tensor teacher_ids, Tensor teacher_logp, Tensor? labels, Tensor? normaliser_device, "
    f"*, {_ops._schema_of(FusedTopkOptions)}, bool want_grad_hidden, "
    "bool want_grad_weight, bool want_grad_bias) -> (Tensor, Tensor, Tensor, Tensor)",
)


@fused_topk_op.register_fake
def _fused_topk_fake(*tensors, **kw):
    t = FusedTopkTensors(*tensors)
    want = _options.FusedOutputs(*(kw[k] for k in _GRAD_WANTS))
    return _fused_outputs(t.xs, t.ws, want, _ops._fake)


def _fused_topk_setup(ctx, inputs, keyword_only_inputs, output):
    ctx.wants = tuple(keyword_only_inputs[k] for k in _GRAD_WANTS)
    ctx.save_for_backward(*output[1:])


def _fused_topk_backward(ctx, grad_parts, grad_gx, grad_gw, grad_gb):
    grads = [g if want else None for g, want in zip(ctx.saved_tensors, ctx.wants, strict=False)]
    # (xs, Ws, bs) get gradients; the teacher, labels and N none.
    return tuple(_ops._scaled(ctx, grads, grad_parts[0])) + (None,) * 4


fused_topk_op.register_autograd(_fused_topk_backward, setup_context=_fused_topk_setup)


class _FusedTopkFunction(torch.autograd.Function):
    """The eager route: apply(xs, Ws, bs, call), call = (tensors, options, wants); returns the
    parts [3]."""

    @staticmethod
    def forward(ctx, xs, ws, bs, call):
        t, opts, want = call
        out = _fused_topk_run(t._replace(xs=xs, ws=ws, bs=bs), opts, want)
        ctx.wants = (want.grad_hidden, want.grad_weight, want.grad_bias)
        ctx.grads = out[1:]
        return out[0]

    @staticmethod
    def backward(ctx, grad_parts):
        grads = [g if w else None for g, w in zip(_ops._take_grads(ctx), ctx.wants, strict=False)]
        return tuple(_ops._scaled(ctx, grads, grad_parts[0])) + (None,)


def _fused_topk(t: FusedTopkTensors, opts: FusedTopkOptions, want: _options.FusedOutputs):
    if not _ops._untraced(*t):
        return fused_topk_op(
            *t,
            **opts.op_kwargs(),
            want_grad_hidden=want.grad_hidden,
            want_grad_weight=want.grad_weight,
            want_grad_bias=want.grad_bias,
        )[0]
    return _FusedTopkFunction.apply(t.xs, t.ws, t.bs, _ops._Opaque((t, opts, want)))


# ----------------------------------------------------------------------------- functional


def _normaliser_args(fn, normaliser, device):
    """(host value, device tensor) of a given N: a number, or a 0-dim fp32 tensor on device."""
    if normaliser is None:
        return 0.0, None
    if isinstance(normaliser, Tensor):
        if normaliser.numel() != 1 or normaliser.dtype != torch.float32:
            _fail(
                f"{fn}: normaliser must be one float32 value, got {normaliser.dtype} "
                f"{tuple(normaliser.shape)}"
            )
        if normaliser.device != device:
            _fail(f"{fn}: normaliser is on {normaliser.device}, the student on {device}")
        return 0.0, normaliser.reshape(()).contiguous()
    return float(normaliser), None


def topk_loss(
    student_logp: Tensor,
    teacher_ids: Tensor,
    teacher_logp: Tensor,
    labels: Tensor | None = None,
    *,
    tail: str = "tail",
    divergence: str = "forward_kl",
    beta: float = 0.5,
    ignore_index: int = -100,
    reduction: str = "batchmean",
    pad_id: int = -1,
    normaliser=None,
    alpha: float = 0.1,
) -> Tensor:
    """The divergence between student log-probs [..., V] (taken as given, as in jsd) and a
    cached teacher (ids, log-probs [..., k]); fp32, per row for reduction="none". normaliser:
    batchmean's N given instead of counted, a float or a 0-dim fp32 tensor on the device.
    alpha: the skew of "skew_kl" / "skew_reverse_kl" (docs/SPEC.md §6)."""
    fn = "topk_loss"
    _same(fn, ("student_logp",), (student_logp,))
    lead = student_logp.shape[:-1]
    x = _rows("student_logp", student_logp)
    ids, logp = _teacher_tensors(fn, teacher_ids, teacher_logp, x.shape[0], x.device)
    lab = _labels(fn, labels, x.shape[0])
    n_host, n_dev = _normaliser_args(fn, normaliser, x.device)
    opts = TopkOptions(
        **_shared_options(tail, divergence, beta, alpha, ignore_index, reduction, pad_id, n_host)
    )
    loss = _topk_call(TopkTensors(x, ids, logp, lab, n_dev), opts, _wants_grad(student_logp))
    return loss.reshape(lead) if reduction == "none" else loss


def fused_linear_topk_loss(
    student_input: Tensor,
    student_weight: Tensor,
    teacher_ids: Tensor,
    teacher_logp: Tensor,
    labels: Tensor | None,
    student_bias: Tensor | None = None,
    weight_hard_loss: float = 0.5,
    weight_soft_loss: float = 0.5,
    *,
    tail: str = "tail",
    divergence: str = "forward_kl",
    beta: float = 0.5,
    temperature: float = 1.0,
    ignore_index: int = -100,
    reduction: str = "batchmean",
    pad_id: int = -1,
    chunk_rows: int = 0,
    return_soft_hard_loss: bool = False,
    normaliser=None,
    alpha: float = 0.1,
):
    """weight_hard_loss * CE / N + weight_soft_loss * soft / N through the student's head
    (reduction "sum": N = 1). Returns the fp32 loss, or (loss, soft, hard) with
    return_soft_hard_loss (the parts detached). labels may be None when weight_hard_loss == 0."""
    fn = "fused_linear_topk_loss"
    _same(
        fn,
        ("student_input", "student_weight", "student_bias"),
        (student_input, student_weight, student_bias),
    )
    _check_temperature(fn, float(temperature))
    xs = _rows("student_input", student_input).contiguous()
    if student_weight.dim() != 2:
        _fail(f"{fn}: student_weight must be 2-D [V, H] (nn.Linear layout)")
    if student_bias is not None and tuple(student_bias.shape) != (student_weight.shape[0],):
        _fail(
            f"{fn}: student_bias has shape {tuple(student_bias.shape)}, its head "
            f"{tuple(student_weight.shape)}"
        )
    if labels is None and weight_hard_loss != 0:
        _fail(f"{fn}: labels are None but weight_hard_loss is {weight_hard_loss}")
    ids, logp = _teacher_tensors(fn, teacher_ids, teacher_logp, xs.shape[0], xs.device)
    lab = _labels(fn, labels, xs.shape[0])
    ws = student_weight.contiguous()
    bs = student_bias.contiguous() if student_bias is not None else None
    n_host, n_dev = _normaliser_args(fn, normaliser, xs.device)
    opts = FusedTopkOptions(
        **_shared_options(tail, divergence, beta, alpha, ignore_index, reduction, pad_id, n_host),
        weight_hard=float(weight_hard_loss),
        weight_soft=float(weight_soft_loss),
        temperature=float(temperature),
        chunk_rows=int(chunk_rows),
    )
    want = _options.FusedOutputs(*_wants_grads(student_input, student_weight, student_bias))
    parts = _fused_topk(FusedTopkTensors(xs, ws, bs, ids, logp, lab, n_dev), opts, want)
    loss, hard, soft = parts[0], parts[1].detach(), parts[2].detach()
    return (loss, soft, hard) if return_soft_hard_loss else loss


# -------------------------------------------------------------------------------- modules


class TopKLoss(torch.nn.Module):
    """topk_loss as a module: forward(student_logp, teacher_ids, teacher_logp, labels=None)."""

    def __init__(
        self,
        tail="tail",
        divergence="forward_kl",
        beta=0.5,
        ignore_index=-100,
        reduction="batchmean",
        pad_id=-1,
        alpha=0.1,
    ):
        super().__init__()
        self.kw = dict(
            tail=tail,
            divergence=divergence,
            beta=beta,
            ignore_index=ignore_index,
            reduction=reduction,
            pad_id=pad_id,
            alpha=alpha,
        )

    def forward(self, student_logp, teacher_ids, teacher_logp, labels=None, normaliser=None):
        return topk_loss(
            student_logp, teacher_ids, teacher_logp, labels, **self.kw, normaliser=normaliser
        )


class FusedLinearTopKLoss(torch.nn.Module):
    """fused_linear_topk_loss as a module: forward(student_input, student_weight, teacher_ids,
    teacher_logp, labels, student_bias=None)."""

    def __init__(
        self,
        weight_hard_loss=0.5,
        weight_soft_loss=0.5,
        tail="tail",
        divergence="forward_kl",
        beta=0.5,
        temperature=1.0,
        ignore_index=-100,
        reduction="batchmean",
        pad_id=-1,
        chunk_rows=0,
        return_soft_hard_loss=False,
        normaliser=None,
        alpha=0.1,
    ):
        super().__init__()
        self.weights = (weight_hard_loss, weight_soft_loss)
        self.kw = dict(
            tail=tail,
            divergence=divergence,
            beta=beta,
            temperature=temperature,
            ignore_index=ignore_index,
            reduction=reduction,
            pad_id=pad_id,
            chunk_rows=chunk_rows,
            return_soft_hard_loss=return_soft_hard_loss,
            alpha=alpha,
        )

    def forward(
        self,
        student_input,
        student_weight,
        teacher_ids,
        teacher_logp,
        labels,
        student_bias=None,
        normaliser=None,
    ):
        return fused_linear_topk_loss(
            student_input,
            student_weight,
            teacher_ids,
            teacher_logp,
            labels,
            student_bias,
            *self.weights,
            **self.kw,
            normaliser=normaliser,
        )


__all__ = ["topk_cache", "topk_loss", "fused_linear_topk_loss", "TopKLoss", "FusedLinearTopKLoss"]
_ = _errors, _lib  # the error types callers see come from these (ValueError, RuntimeError)
