"""Functional forms of distil's losses for PyTorch, with Liger-Kernel's signatures.

  jsd(input, target, shift_labels=None, beta=0.5, ignore_index=-100)
      = liger_kernel.transformers.functional.liger_jsd
  fused_linear_jsd(student_input, student_weight, teacher_input, teacher_weight,
                   shift_labels=None, jsd_beta=0.5, ignore_index=-100, temperature=1.0)
      = liger_kernel.transformers.functional.liger_fused_linear_jsd
  fused_linear_jsd_loss(student_input, student_weight, teacher_input, teacher_weight,
                        true_labels, student_bias=None, teacher_bias=None,
                        weight_hard_loss=0.5, weight_soft_loss=0.5, beta=0.5, ignore_index=-100,
                        temperature=1.0, compiled=True, chunk_size=1024,
                        return_soft_hard_loss=False)
      = liger_kernel.chunked_loss.functional.liger_fused_linear_jsd

Where distil deliberately differs from Liger (docs/SPEC.md §1-§2): the loss is always fp32
(Liger's JSD casts it back to the input dtype); logits stay fp32 through the softmax; the head's
weight gradient is accumulated in fp32 and written once; the token count stays on the device
(Liger reads it back with .item()). `compiled` and `chunk_size` are accepted and ignored:
distil's kernels need no torch.compile and plan their own chunks (`chunk_rows` overrides).
Hidden states may be 2-D [BT, H] or 3-D [B, T, H] (as TRL passes them), labels of the matching
shape; non-contiguous tensors are made contiguous.

Beyond Liger (docs/SPEC.md §6), keyword-only on every loss here: divergence= one of "jsd" (the
default, with beta), "forward_kl", "reverse_kl", "skew_kl", "skew_reverse_kl" (with alpha=, 0.1
by default) and "tvd"; normaliser= N of the mean instead of the counted rows: a number > 0, or
a tensor of one element on the inputs' device, read there without a host synchronisation (TRL's
num_items_in_batch, a token count across ranks; N <= 0 there gives loss and gradient 0); and, on
the fused losses, temperature_squared=True for the soft part times tau^2.
"""

import math
from typing import Optional

import torch
from torch import Tensor

from .. import _calls, _errors, _lib
from . import _ops


def _fail(message):
    raise _errors.make_error(_lib.ERR_INVALID_ARG, message)


def _rows(name: str, t: Tensor) -> Tensor:
    """t as a 2-D [rows, last] tensor whose rows are dense (a view when possible)."""
    dim = t.dim()
    if dim == 2 and t.is_contiguous():  # the usual case, in one call
        return t
    if dim < 1:
        _fail(f"{name}: a tensor of at least 1 dimension is needed, got a scalar")
    t = t.reshape(-1, t.shape[-1]) if dim != 2 else t
    return t if t.stride(-1) == 1 and t.stride(0) >= t.shape[1] else t.contiguous()


def _labels(name: str, labels: Optional[Tensor], rows: int, device) -> Optional[Tensor]:
    if labels is None:
        return None
    if (labels.dtype is torch.int64 and labels.dim() == 1 and labels.shape[0] == rows
            and labels.is_contiguous() and labels.device == device):
        return labels  # the usual case, checked at once: as the library takes them
    if labels.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        _fail(f"{name}: labels must be integers, got {labels.dtype}")
    if labels.numel() != rows:
        _fail(f"{name}: {labels.numel()} labels for {rows} rows (shape {tuple(labels.shape)})")
    if labels.device != device:
        _fail(f"{name}: labels are on {labels.device}, the inputs on {device}")
    if labels.dtype is torch.int64 and labels.dim() == 1 and labels.is_contiguous():
        return labels  # as the library takes them: no reshape, cast or copy to pay for
    return labels.reshape(rows).to(torch.int64).contiguous()


def _same(fn: str, names: tuple, tensors: tuple):
    """Every present tensor has the first one's dtype and device, and a dtype distil takes."""
    first = tensors[0]
    dtype = first.dtype
    if dtype not in _ops._DTYPES:
        _fail(f"{fn}: {names[0]}: dtype {dtype} is not float32, bfloat16 or float16")
    if first.is_cpu:  # a cpu tensor's device is always 'cpu' (no index): is_cpu says it all
        for t in tensors:
            if t is not None and (t.dtype is not dtype or not t.is_cpu):
                break
        else:
            return
    _same_each(fn, names, tensors)


def _same_each(fn: str, names: tuple, tensors: tuple):
    """_same's checks tensor by tensor with device objects (GPU tensors, or a mismatch: the
    message names the first tensor that fails)."""
    dtype, device = tensors[0].dtype, tensors[0].device
    for name, t in zip(names, tensors):
        if t is None:
            continue
        if t.dtype is not dtype:
            _fail(f"{fn}: {name} is {t.dtype} but {names[0]} is {dtype} "
                  "(one dtype for every float input)")
        if t.device != device:
            _fail(f"{fn}: {name} is on {t.device} but {names[0]} on {device}")


def _wants_grad(t: Optional[Tensor]) -> bool:
    return t is not None and t.requires_grad and torch.is_grad_enabled()


def _wants_grads(x: Tensor, w: Tensor, b: Optional[Tensor]) -> tuple:
    """_wants_grad of each, grad mode read once."""
    if not torch.is_grad_enabled():
        return False, False, False
    return x.requires_grad, w.requires_grad, b is not None and b.requires_grad


def _check_biases(fn, student_bias, student_weight, teacher_bias, teacher_weight):
    for name, b, w in (("student_bias", student_bias, student_weight),
                       ("teacher_bias", teacher_bias, teacher_weight)):
        if b is not None and tuple(b.shape) != (w.shape[0],):
            _fail(f"{fn}: {name} has shape {tuple(b.shape)}, its head {tuple(w.shape)}")


def _divergence(divergence, alpha, normaliser, like: Tensor, fn: str):
    """(code, alpha, host normaliser, device normaliser tensor or None) for the ops; a device
    normaliser must be on like's device."""
    code = _calls.divergence_code(divergence)
    if normaliser is None:  # the usual case first
        return code, float(alpha), 0.0, None
    if isinstance(normaliser, Tensor):
        device = like.device
        if normaliser.numel() != 1:
            _fail(f"{fn}: normaliser: a tensor of one element is needed, got shape "
                  f"{tuple(normaliser.shape)}")
        if normaliser.device != device:
            _fail(f"{fn}: normaliser is on {normaliser.device}, the inputs on {device}")
        return code, float(alpha), 0.0, normaliser.detach().reshape(()).to(torch.float32)
    n = float(normaliser)
    if not n > 0:  # 0 would mean "counted" to the library: refuse it here, with the same rule
        _fail(f"{fn}: normaliser {n} must be > 0")
    return code, float(alpha), n, None


def _check_temperature(fn: str, temperature: float):
    if not (math.isfinite(temperature) and temperature > 0):
        _fail(f"{fn}: temperature {temperature} must be finite and > 0")


# ------------------------------------------------------------------------------------ JSD


def jsd(input: Tensor, target: Tensor, shift_labels: Optional[Tensor] = None, beta: float = 0.5,
        ignore_index: int = -100, *, reduction: str = "batchmean", divergence: str = "jsd",
        alpha: float = 0.1, normaliser=None, _record=None) -> Tensor:
    """Generalised JSD between student log-probs `input` and teacher log-probs `target`.

    input, target: [..., V] log-probabilities (not re-normalised); shift_labels: [...] or None.
    beta weights the teacher: 0 gives KL(p||q), 1 gives KL(q||p). reduction "batchmean"
    (Liger's, the default: sum over rows / rows whose label != ignore_index), "sum" or "none"
    (per row, shaped like the leading dimensions). Returns an fp32 loss. divergence, alpha,
    normaliser (batchmean only): see the module docstring.
    """
    fn = "jsd"
    _same(fn, ("input", "target"), (input, target))
    if input.shape != target.shape:
        _fail(f"{fn}: input {tuple(input.shape)} and target {tuple(target.shape)} differ")
    x, y = _rows("input", input), _rows("target", target)
    labels = None if shift_labels is None else _labels(fn, shift_labels, x.shape[0], x.device)
    code, alpha, n_host, n_dev = _divergence(divergence, alpha, normaliser, x, fn)
    args = (x, y, labels, float(beta), int(ignore_index), reduction, _wants_grad(input), code,
            alpha, n_host, n_dev)
    loss = _ops.jsd(*args)
    if _record is not None:  # the op's arguments, for a call site (_site.py)
        _record.append(args)
    return loss.reshape(input.shape[:-1]) if reduction == "none" else loss


# ------------------------------------------------------------------------ fused linear JSD


_FUSED_NAMES = ("student_input", "student_weight", "teacher_input", "teacher_weight",
                "student_bias", "teacher_bias")


def _head_options(student_logit_scale=1.0, student_softcap=0.0, teacher_logit_scale=1.0,
                  teacher_softcap=0.0, teacher_temperature=None, return_lse=False,
                  teacher_head_precision=None, teacher_weight_e4m3=None, return_entropy=False):
    """The head options of docs/SPEC.md §6 as the op takes them: (heads tuple, want_lse,
    want_entropy: the student's entropy, docs/SPEC.md §6 "Student entropy"). The
    library checks the values (scales > 0, caps >= 0, finite) and names the bad one.
    teacher_temperature None (or 0) is the student's temperature; teacher_head_precision None
    / "default" or "fp8" (the fp8 teacher head, docs/SPEC.md §6), as the op's code, then the
    teacher's head made once (e4m3_head) or None."""
    heads = (float(student_logit_scale), float(student_softcap), float(teacher_logit_scale),
             float(teacher_softcap), float(teacher_temperature or 0.0),
             _calls.head_precision_code(teacher_head_precision), teacher_weight_e4m3)
    return heads, bool(return_lse), bool(return_entropy)


def e4m3_head(teacher_weight: Tensor) -> Tensor:
    """The teacher's head [V, Ht] rounded to fp8 e4m3 once (docs/SPEC.md §6): a uint8 tensor on
    its device holding each row's codes and scale in the backend's own form.

    Pass it as teacher_weight_e4m3= with teacher_head_precision="fp8" to the fused losses: the
    call then skips rounding Wt itself (the same numbers, bit for bit; less time and working
    memory per call). The head is a copy: make it again after the teacher's weight changes.
    Made eagerly (call it outside torch.compile and CUDA-graph capture, once)."""
    fn = "e4m3_head"
    _same(fn, ("teacher_weight",), (teacher_weight,))
    if teacher_weight.dim() != 2:
        _fail(f"{fn}: teacher_weight must be 2-D [V, Ht] (nn.Linear layout)")
    w = teacher_weight.detach().contiguous()
    ctx = _ops.context_for(w)  # bound to the current stream
    rows, cols = w.shape
    nbytes = _calls.e4m3_head_size(ctx, rows, cols)
    head = torch.empty(nbytes, dtype=torch.uint8, device=w.device)
    _calls.run_e4m3_head(ctx, _ops._DTYPES[w.dtype], w.data_ptr(), rows, cols, head.data_ptr(),
                         nbytes)
    return head


def _check_e4m3_head(fn, head, xs):
    """A head made once (e4m3_head): uint8, dense, on the inputs' device; the library checks its
    size, alignment and header (the shape and backend it was made for) against the teacher's
    head (on cuda / hip a wrong header is reported by the next synchronize)."""
    if head.dtype is not torch.uint8 or head.dim() != 1 or not head.is_contiguous():
        _fail(f"{fn}: teacher_weight_e4m3 must be the 1-D uint8 tensor of e4m3_head, not "
              f"{head.dtype} {tuple(head.shape)}")
    if head.device != xs.device:
        _fail(f"{fn}: teacher_weight_e4m3 is on {head.device} but student_input on {xs.device}")


def _check_tensors(fn, student_input, student_weight, teacher_input, teacher_weight,
                   student_bias=None, teacher_bias=None):
    """The fused losses' first checks, named after fn: one dtype (one distil takes) and one
    device for every float input, and both heads 2-D. The modules run them before their cache
    makes a head (so a call refused here rounds nothing and the message names the loss)."""
    _same(fn, _FUSED_NAMES, (student_input, student_weight, teacher_input, teacher_weight,
                             student_bias, teacher_bias))
    if student_weight.dim() != 2 or teacher_weight.dim() != 2:
        _fail(f"{fn}: student_weight and teacher_weight must be 2-D [V, H] (nn.Linear layout)")


def _fused(fn, student_input, student_weight, teacher_input, teacher_weight, labels,
           student_bias, teacher_bias, weight_hard, weight_soft, beta, ignore_index,
           temperature, chunk_rows, div=("jsd", 0.1, None, False),
           heads=_calls.DEFAULT_HEADS, want_lse=False, want_parts=False, record=None,
           want_entropy=False):
    """The fused op on 2-D views; returns (loss, parts, student_lse, teacher_lse,
    student_entropy): parts the detached [3] (loss, hard, soft) with want_parts (else possibly
    None: the library then writes the loss alone); the LSEs and the entropy shaped like the
    leading dimensions (None unless want_lse / want_entropy). record: a list that receives the
    op's arguments (for a call site, _site.py)."""
    _check_tensors(fn, student_input, student_weight, teacher_input, teacher_weight,
                   student_bias, teacher_bias)
    _check_temperature(fn, float(temperature))
    xs = _rows("student_input", student_input).contiguous()
    xt = _rows("teacher_input", teacher_input).contiguous()
    if xs.shape[0] != xt.shape[0]:
        _fail(f"{fn}: student_input has {xs.shape[0]} rows, teacher_input {xt.shape[0]}")
    if student_bias is not None or teacher_bias is not None:
        _check_biases(fn, student_bias, student_weight, teacher_bias, teacher_weight)
    if labels is None and weight_hard != 0:
        _fail(f"{fn}: labels are None but weight_hard_loss is {weight_hard}: the hard loss "
              "needs labels (give them, or set weight_hard_loss=0)")
    lab = None if labels is None else _labels(fn, labels, xs.shape[0], xs.device)
    ws, wt = student_weight.contiguous(), teacher_weight.contiguous()
    bs = student_bias.contiguous() if student_bias is not None else None
    bt = teacher_bias.contiguous() if teacher_bias is not None else None
    code, alpha, n_host, n_dev = _divergence(div[0], div[1], div[2], xs, fn)
    args = (xs, ws, bs, xt, wt, bt, lab, float(weight_hard), float(weight_soft), float(beta),
            float(temperature), int(ignore_index), int(chunk_rows),
            *_wants_grads(student_input, student_weight, student_bias), code, alpha, n_host,
            n_dev, bool(div[3]), *heads[:5], want_lse, heads[5],
            heads[6] if len(heads) > 6 else None, bool(want_entropy))
    if args[28] is not None:
        _check_e4m3_head(fn, args[28], xs)
    loss, parts, ls, lt, ent = _ops.fused(*args, parts=want_parts)
    if record is not None:
        record.append(args)
    lead = student_input.shape[:-1]
    lse = (ls.reshape(lead), lt.reshape(lead)) if want_lse else (None, None)
    ent = ent.reshape(lead).detach() if want_entropy else None
    # Without labels (weight_hard == 0) every row counts and the library writes a hard part of 0.
    return (loss, parts) + lse + (ent,)


def fused_linear_jsd(student_input: Tensor, student_weight: Tensor, teacher_input: Tensor,
                     teacher_weight: Tensor, shift_labels: Optional[Tensor] = None,
                     jsd_beta: float = 0.5, ignore_index: int = -100, temperature: float = 1.0,
                     *, chunk_rows: int = 0, divergence: str = "jsd", alpha: float = 0.1,
                     normaliser=None, temperature_squared: bool = False,
                     student_logit_scale: float = 1.0, student_softcap: float = 0.0,
                     teacher_logit_scale: float = 1.0, teacher_softcap: float = 0.0,
                     teacher_temperature: Optional[float] = None, return_lse: bool = False,
                     teacher_head_precision: Optional[str] = None,
                     teacher_weight_e4m3: Optional[Tensor] = None, return_entropy: bool = False,
                     _record=None):
    """JSD of the two heads' tempered distributions (Liger's LigerFusedLinearJSD), fp32.

    student_input [..., Hs], student_weight [V, Hs], teacher_input [..., Ht], teacher_weight
    [V, Ht], shift_labels [...] or None (then every row counts). No hard loss, no biases.
    Head options (docs/SPEC.md §6, keywords) as in fused_linear_jsd_loss; with return_lse the
    result is (loss, student_lse, teacher_lse); return_entropy appends the student's entropy
    (as in fused_linear_jsd_loss).
    """
    heads, want_lse, want_ent = _head_options(
        student_logit_scale, student_softcap, teacher_logit_scale, teacher_softcap,
        teacher_temperature, return_lse, teacher_head_precision, teacher_weight_e4m3,
        return_entropy)
    loss, _, ls, lt, ent = _fused("fused_linear_jsd", student_input, student_weight,
                                  teacher_input, teacher_weight, shift_labels, None, None, 0.0,
                                  1.0, jsd_beta, ignore_index, temperature, chunk_rows,
                                  (divergence, alpha, normaliser, temperature_squared), heads,
                                  want_lse, False, _record, want_ent)
    out = (loss,) + ((ls, lt) if want_lse else ()) + ((ent,) if want_ent else ())
    return out if len(out) > 1 else loss


def fused_linear_jsd_loss(student_input: Tensor, student_weight: Tensor, teacher_input: Tensor,
                          teacher_weight: Tensor, true_labels: Optional[Tensor],
                          student_bias: Optional[Tensor] = None,
                          teacher_bias: Optional[Tensor] = None, weight_hard_loss: float = 0.5,
                          weight_soft_loss: float = 0.5, beta: float = 0.5,
                          ignore_index: int = -100, temperature: float = 1.0,
                          compiled: bool = True, chunk_size: int = 1024,
                          return_soft_hard_loss: bool = False, *, chunk_rows: int = 0,
                          divergence: str = "jsd", alpha: float = 0.1, normaliser=None,
                          temperature_squared: bool = False,
                          student_logit_scale: float = 1.0, student_softcap: float = 0.0,
                          teacher_logit_scale: float = 1.0, teacher_softcap: float = 0.0,
                          teacher_temperature: Optional[float] = None, return_lse: bool = False,
                          teacher_head_precision: Optional[str] = None,
                          teacher_weight_e4m3: Optional[Tensor] = None,
                          return_entropy: bool = False):
    """Hard CE + soft JSD through both heads (Liger's LigerFusedLinearJSDLoss).

    loss = weight_hard_loss * CE / N + weight_soft_loss * JSD(beta, temperature) / N with
    N = rows whose label != ignore_index. Returns the fp32 loss, or (loss, soft_loss, hard_loss)
    with return_soft_hard_loss (Liger's order; the parts are detached: only the loss is
    differentiable). true_labels may be None when weight_hard_loss == 0.

    Head options (docs/SPEC.md §6), keywords: the heads may have different vocabulary sizes
    (padded heads: the loss runs over the common prefix, labels must lie in it, the student's
    extra rows get gradient 0); student_logit_scale / teacher_logit_scale s (default 1) and
    student_softcap / teacher_softcap c (default 0: none) give logits c tanh(s z / c), before
    the CE, the soft part and the LSEs (Gemma 2's final_logit_softcapping, Cohere's
    logit_scale); teacher_temperature (default None: temperature) divides the teacher's logits
    in the soft part; return_lse=True appends (student_lse, teacher_lse), each row's logsumexp
    of the transformed logits at temperature 1 (detached; every row, ignored ones included).

    teacher_head_precision="fp8" (docs/SPEC.md §6, fp8 teacher head; default None: exact): the
    teacher's logits from its hidden states and head rounded to fp8 e4m3 with a scale per row
    (amax / 448), multiplied with fp32 accumulation, logits in fp32: faster on GPUs with fp8
    tensor cores (cuda sm_89+; slower emulation elsewhere on cuda / hip; cpu computes the same
    numbers; opencl refuses it). The teacher is frozen, so only its distribution changes (by
    e4m3's rounding); the student's head is exact. teacher_weight_e4m3 = e4m3_head(
    teacher_weight), made once for a frozen teacher, saves rounding Wt in every call (same
    numbers).

    return_entropy=True (docs/SPEC.md §6 "Student entropy") appends, last, each row's entropy
    in nats of the student's soft-part distribution softmax(z' / temperature) (z' the student's
    logits after its scale and softcap), computed in the loss's own pass over the row; ignored
    rows hold 0; detached, shaped like the leading dimensions (TRL logs its mean as `entropy`).
    Not with the vocabulary-parallel loss.
    """
    del compiled, chunk_size  # accepted for Liger compatibility, see the module docstring
    return _fused_loss(student_input, student_weight, teacher_input, teacher_weight, true_labels,
                       student_bias, teacher_bias, weight_hard_loss, weight_soft_loss, beta,
                       ignore_index, temperature, return_soft_hard_loss, chunk_rows,
                       (divergence, alpha, normaliser, temperature_squared),
                       (student_logit_scale, student_softcap, teacher_logit_scale,
                        teacher_softcap, teacher_temperature, return_lse,
                        teacher_head_precision, teacher_weight_e4m3, return_entropy))


def _fused_loss(student_input, student_weight, teacher_input, teacher_weight, true_labels,
                student_bias, teacher_bias, weight_hard_loss, weight_soft_loss, beta,
                ignore_index, temperature, return_soft_hard_loss, chunk_rows, div, head_options,
                record=None):
    """fused_linear_jsd_loss on positional arguments (FusedLinearJSDLoss calls it so: binding
    some thirty keywords costs more than the checks); div = (divergence, alpha, normaliser,
    temperature_squared), head_options = _head_options's arguments in its order; record as in
    _fused."""
    heads, want_lse, want_ent = _head_options(*head_options)
    loss, parts, ls, lt, ent = _fused("fused_linear_jsd_loss", student_input, student_weight,
                                      teacher_input, teacher_weight, true_labels, student_bias,
                                      teacher_bias, weight_hard_loss, weight_soft_loss, beta,
                                      ignore_index, temperature, chunk_rows, div, heads,
                                      want_lse, return_soft_hard_loss, record, want_ent)
    out = (loss, parts[2], parts[1]) if return_soft_hard_loss else (loss,)
    out += (ls, lt) if want_lse else ()
    out += (ent,) if want_ent else ()
    return out if len(out) > 1 else loss


# Liger's names, so that switching is an import change.
liger_jsd = jsd
liger_fused_linear_jsd = fused_linear_jsd
