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

from typing import Optional

import torch
from torch import Tensor

from .. import _errors, _lib, _topk
from . import _ops
from .functional import (_check_temperature, _fail, _labels, _rows, _same, _wants_grad,
                         _wants_grads)

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


def _teacher_key(ids, logp, pad_id, tail, divergence, beta, normaliser, alpha):
    return (ids.shape[1], _ops._DTYPES[logp.dtype], _IDS[ids.dtype], int(pad_id), tail,
            divergence, float(beta), float(normaliser), float(alpha))


# ---------------------------------------------------------------------- log-prob form op


def _topk_impl(student_logp: Tensor, teacher_ids: Tensor, teacher_logp: Tensor,
               labels: Optional[Tensor], tail: str, divergence: str, beta: float,
               ignore_index: int, reduction: str, pad_id: int, want_grad: bool,
               normaliser: float, normaliser_tensor: Optional[Tensor],
               alpha: float) -> tuple[Tensor, Tensor]:
    rows, vocab = student_logp.shape
    loss = _ops._out(student_logp, (rows,) if reduction == "none" else (), torch.float32)
    grad = _ops._out(student_logp, (rows, vocab) if want_grad else (0,), student_logp.dtype)
    ctx = _ops.context_for(student_logp)
    teacher = _teacher_key(teacher_ids, teacher_logp, pad_id, tail, divergence, beta, normaliser,
                           alpha)
    desc, nbytes = _topk.topk_plan(ctx, rows, vocab, (student_logp.stride(0), vocab),
                                   _ops._DTYPES[student_logp.dtype], teacher, ignore_index,
                                   reduction)
    ws = _ops._workspace(student_logp, nbytes)
    _ops._torch_errors(_topk.run_topk, ctx, desc, _ops._addr(ws), nbytes,
                       (student_logp.data_ptr(), teacher_ids.data_ptr(), teacher_logp.data_ptr(),
                        _ops._addr(labels), _ops._addr(loss),
                        _ops._addr(grad) if want_grad else 0), _ops._addr(normaliser_tensor))
    _ops._after_call(ctx, student_logp)
    return loss, grad


topk_op = torch.library.custom_op("distil::topk", _topk_impl, mutates_args=())


@topk_op.register_fake
def _topk_fake(student_logp, teacher_ids, teacher_logp, labels, tail, divergence, beta,
               ignore_index, reduction, pad_id, want_grad, normaliser, normaliser_tensor, alpha):
    rows, vocab = student_logp.shape
    loss = student_logp.new_empty((rows,) if reduction == "none" else (), dtype=torch.float32)
    grad = student_logp.new_empty((rows, vocab) if want_grad else (0,))
    return loss, grad


_TOPK_NARGS = 14


def _topk_setup(ctx, inputs, output):
    ctx.reduction = inputs[8]
    ctx.want_grad = inputs[10]
    ctx.save_for_backward(output[1] if inputs[10] else None)


def _topk_backward(ctx, grad_loss, grad_grad):
    (grad,) = ctx.saved_tensors
    rest = (None,) * (_TOPK_NARGS - 1)
    if not ctx.want_grad:
        return (None,) + rest
    if ctx.reduction == "none":
        return (grad * grad_loss.unsqueeze(-1).to(grad.dtype),) + rest
    return (_ops._scaled(ctx, [grad], grad_loss)[0],) + rest


topk_op.register_autograd(_topk_backward, setup_context=_topk_setup)


class _TopkFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *args):
        loss, grad = _topk_impl(*args)
        _topk_setup(ctx, args, (loss, grad))
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        return _topk_backward(ctx, grad_loss, None)


def _tensors(args) -> tuple:
    return tuple(a for a in args if isinstance(a, Tensor))


def _topk_call(*args) -> Tensor:
    # The plain Function only where nothing traces (torch.compile, FakeTensorMode, make_fx,
    # functorch) and every tensor is plain, as the dense losses decide (_ops._untraced).
    if not _ops._untraced(*_tensors(args)):
        return topk_op(*args)[0]
    return _TopkFunction.apply(*args)


# ------------------------------------------------------------------------- fused form op


def _fused_outputs(xs, ws, want_hidden, want_weight, want_bias, make):
    """(loss parts [3] fp32, grad_xs, grad_Ws, grad_bs), make's unwanted (shape None) where a
    gradient is unwanted."""
    parts = make(xs, (3,), torch.float32)
    gx = make(xs, xs.shape if want_hidden else None, xs.dtype)
    gw = make(ws, ws.shape if want_weight else None, ws.dtype)
    gb = make(ws, (ws.shape[0],) if want_bias else None, ws.dtype)
    return parts, gx, gw, gb


def _fused_topk_impl(student_hidden: Tensor, student_weight: Tensor,
                     student_bias: Optional[Tensor], teacher_ids: Tensor, teacher_logp: Tensor,
                     labels: Optional[Tensor], weight_hard: float, weight_soft: float, tail: str,
                     divergence: str, beta: float, temperature: float, ignore_index: int,
                     reduction: str, pad_id: int, chunk_rows: int, want_grad_hidden: bool,
                     want_grad_weight: bool, want_grad_bias: bool, normaliser: float,
                     normaliser_tensor: Optional[Tensor],
                     alpha: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    xs, ws, bs = student_hidden, student_weight, student_bias
    parts, gx, gw, gb = _fused_outputs(xs, ws, want_grad_hidden, want_grad_weight,
                                            want_grad_bias, _ops._out)
    ctx = _ops.context_for(xs)
    rows, hs = xs.shape
    want = want_grad_hidden or want_grad_weight or want_grad_bias
    teacher = _teacher_key(teacher_ids, teacher_logp, pad_id, tail, divergence, beta, normaliser,
                           alpha)
    desc, nbytes = _topk.fused_topk_plan(ctx, rows, ws.shape[0], hs, _ops._dtype_code(xs), teacher,
                                         (weight_hard, weight_soft), temperature, ignore_index,
                                         reduction, chunk_rows, want, ws.shape[1])
    work = _ops._workspace(xs, nbytes)
    a = _ops._addr
    _ops._torch_errors(_topk.run_fused_topk, ctx, desc, a(work), nbytes,
                       [a(xs), a(ws), a(bs), a(teacher_ids), a(teacher_logp), a(labels),
                        a(parts), a(gx), a(gw), a(gb)], a(normaliser_tensor))
    _ops._after_call(ctx, xs)
    return parts, gx, gw, gb


fused_topk_op = torch.library.custom_op("distil::fused_linear_topk", _fused_topk_impl,
                                        mutates_args=())


@fused_topk_op.register_fake
def _fused_topk_fake(student_hidden, student_weight, student_bias, teacher_ids, teacher_logp,
                     labels, weight_hard, weight_soft, tail, divergence, beta, temperature,
                     ignore_index, reduction, pad_id, chunk_rows, want_grad_hidden,
                     want_grad_weight, want_grad_bias, normaliser, normaliser_tensor, alpha):
    return _fused_outputs(student_hidden, student_weight, want_grad_hidden,
                               want_grad_weight, want_grad_bias, _ops._fake)


_FUSED_NARGS = 22


def _fused_topk_setup(ctx, inputs, output):
    ctx.wants = inputs[16:19]
    ctx.save_for_backward(*output[1:])


def _fused_topk_backward(ctx, grad_parts, grad_gx, grad_gw, grad_gb):
    grads = [g if want else None for g, want in zip(ctx.saved_tensors, ctx.wants)]
    # (xs, Ws, bs) get gradients; the teacher, labels and options none.
    return tuple(_ops._scaled(ctx, grads, grad_parts[0])) + (None,) * (_FUSED_NARGS - 3)


fused_topk_op.register_autograd(_fused_topk_backward, setup_context=_fused_topk_setup)


class _FusedTopkFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *args):
        out = _fused_topk_impl(*args)
        _fused_topk_setup(ctx, args, out)
        return out[0]

    @staticmethod
    def backward(ctx, grad_parts):
        return _fused_topk_backward(ctx, grad_parts, None, None, None)


def _fused_topk(*args) -> Tensor:
    if not _ops._untraced(*_tensors(args)):
        return fused_topk_op(*args)[0]
    return _FusedTopkFunction.apply(*args)


# ----------------------------------------------------------------------------- functional


def _normaliser_args(fn, normaliser, device):
    """(host value, device tensor) of a given N: a number, or a 0-dim fp32 tensor on device."""
    if normaliser is None:
        return 0.0, None
    if isinstance(normaliser, Tensor):
        if normaliser.numel() != 1 or normaliser.dtype != torch.float32:
            _fail(f"{fn}: normaliser must be one float32 value, got {normaliser.dtype} "
                  f"{tuple(normaliser.shape)}")
        if normaliser.device != device:
            _fail(f"{fn}: normaliser is on {normaliser.device}, the student on {device}")
        return 0.0, normaliser.reshape(()).contiguous()
    return float(normaliser), None


def topk_loss(student_logp: Tensor, teacher_ids: Tensor, teacher_logp: Tensor,
              labels: Optional[Tensor] = None, *, tail: str = "tail",
              divergence: str = "forward_kl", beta: float = 0.5, ignore_index: int = -100,
              reduction: str = "batchmean", pad_id: int = -1, normaliser=None,
              alpha: float = 0.1) -> Tensor:
    """The divergence between student log-probs [..., V] (taken as given, as in jsd) and a
    cached teacher (ids, log-probs [..., k]); fp32, per row for reduction="none". normaliser:
    batchmean's N given instead of counted, a float or a 0-dim fp32 tensor on the device.
    alpha: the skew of "skew_kl" / "skew_reverse_kl" (docs/SPEC.md §6)."""
    fn = "topk_loss"
    _same(fn, ("student_logp",), (student_logp,))
    lead = student_logp.shape[:-1]
    x = _rows("student_logp", student_logp)
    ids, logp = _teacher_tensors(fn, teacher_ids, teacher_logp, x.shape[0], x.device)
    lab = _labels(fn, labels, x.shape[0], x.device)
    loss = _topk_call(x, ids, logp, lab, tail, divergence, float(beta), int(ignore_index),
                      reduction, int(pad_id), _wants_grad(student_logp),
                      *_normaliser_args(fn, normaliser, x.device), float(alpha))
    return loss.reshape(lead) if reduction == "none" else loss


def fused_linear_topk_loss(student_input: Tensor, student_weight: Tensor, teacher_ids: Tensor,
                           teacher_logp: Tensor, labels: Optional[Tensor],
                           student_bias: Optional[Tensor] = None, weight_hard_loss: float = 0.5,
                           weight_soft_loss: float = 0.5, *, tail: str = "tail",
                           divergence: str = "forward_kl", beta: float = 0.5,
                           temperature: float = 1.0, ignore_index: int = -100,
                           reduction: str = "batchmean", pad_id: int = -1, chunk_rows: int = 0,
                           return_soft_hard_loss: bool = False, normaliser=None,
                           alpha: float = 0.1):
    """weight_hard_loss * CE / N + weight_soft_loss * soft / N through the student's head
    (reduction "sum": N = 1). Returns the fp32 loss, or (loss, soft, hard) with
    return_soft_hard_loss (the parts detached). labels may be None when weight_hard_loss == 0."""
    fn = "fused_linear_topk_loss"
    _same(fn, ("student_input", "student_weight", "student_bias"),
          (student_input, student_weight, student_bias))
    _check_temperature(fn, float(temperature))
    xs = _rows("student_input", student_input).contiguous()
    if student_weight.dim() != 2:
        _fail(f"{fn}: student_weight must be 2-D [V, H] (nn.Linear layout)")
    if student_bias is not None and tuple(student_bias.shape) != (student_weight.shape[0],):
        _fail(f"{fn}: student_bias has shape {tuple(student_bias.shape)}, its head "
              f"{tuple(student_weight.shape)}")
    if labels is None and weight_hard_loss != 0:
        _fail(f"{fn}: labels are None but weight_hard_loss is {weight_hard_loss}")
    ids, logp = _teacher_tensors(fn, teacher_ids, teacher_logp, xs.shape[0], xs.device)
    lab = _labels(fn, labels, xs.shape[0], xs.device)
    ws = student_weight.contiguous()
    bs = student_bias.contiguous() if student_bias is not None else None
    parts = _fused_topk(xs, ws, bs, ids, logp, lab, float(weight_hard_loss),
                        float(weight_soft_loss), tail, divergence, float(beta),
                        float(temperature), int(ignore_index), reduction, int(pad_id),
                        int(chunk_rows), *_wants_grads(student_input, student_weight, student_bias),
                        *_normaliser_args(fn, normaliser, xs.device), float(alpha))
    loss, hard, soft = parts[0], parts[1].detach(), parts[2].detach()
    return (loss, soft, hard) if return_soft_hard_loss else loss


# -------------------------------------------------------------------------------- modules


class TopKLoss(torch.nn.Module):
    """topk_loss as a module: forward(student_logp, teacher_ids, teacher_logp, labels=None)."""

    def __init__(self, tail="tail", divergence="forward_kl", beta=0.5, ignore_index=-100,
                 reduction="batchmean", pad_id=-1, alpha=0.1):
        super().__init__()
        self.kw = dict(tail=tail, divergence=divergence, beta=beta, ignore_index=ignore_index,
                       reduction=reduction, pad_id=pad_id, alpha=alpha)

    def forward(self, student_logp, teacher_ids, teacher_logp, labels=None, normaliser=None):
        return topk_loss(student_logp, teacher_ids, teacher_logp, labels, **self.kw,
                         normaliser=normaliser)


class FusedLinearTopKLoss(torch.nn.Module):
    """fused_linear_topk_loss as a module: forward(student_input, student_weight, teacher_ids,
    teacher_logp, labels, student_bias=None)."""

    def __init__(self, weight_hard_loss=0.5, weight_soft_loss=0.5, tail="tail",
                 divergence="forward_kl", beta=0.5, temperature=1.0, ignore_index=-100,
                 reduction="batchmean", pad_id=-1, chunk_rows=0, return_soft_hard_loss=False,
                 normaliser=None, alpha=0.1):
        super().__init__()
        self.weights = (weight_hard_loss, weight_soft_loss)
        self.kw = dict(tail=tail, divergence=divergence, beta=beta, temperature=temperature,
                       ignore_index=ignore_index, reduction=reduction, pad_id=pad_id,
                       chunk_rows=chunk_rows, return_soft_hard_loss=return_soft_hard_loss,
                       alpha=alpha)

    def forward(self, student_input, student_weight, teacher_ids, teacher_logp, labels,
                student_bias=None, normaliser=None):
        return fused_linear_topk_loss(student_input, student_weight, teacher_ids, teacher_logp,
                                      labels, student_bias, *self.weights, **self.kw,
                                      normaliser=normaliser)


__all__ = ["topk_cache", "topk_loss", "fused_linear_topk_loss", "TopKLoss",
           "FusedLinearTopKLoss"]
_ = _errors, _lib  # the error types callers see come from these (ValueError, RuntimeError)
