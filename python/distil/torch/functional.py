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

Where distil deliberately differs from Liger (docs/SPEC.md §1-§2): distil's own names return an
fp32 loss (the Liger names, liger_jsd and liger_fused_linear_jsd, return it in the input dtype
as Liger does); logits stay fp32 through the softmax; the head's weight gradient is accumulated
in fp32 and written once (Liger's `accum_dtype` is accepted and changes nothing: distil always
accumulates in fp32); the token count stays on the device (Liger reads it back with .item()).
Mixed precision (docs/PYTHON.md): under torch.autocast the fused losses run in the autocast
dtype (as Liger's custom_fwd); outside it, fp32 heads, biases and teacher states beside bf16 or
fp16 student hidden states are rounded to the student's dtype for the GEMMs (their gradients
flow back to the fp32 tensors). `compiled` and `chunk_size` are accepted and ignored:
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

from typing import NamedTuple

import torch
from torch import Tensor

from .. import _calls, _errors, _options
from . import _ops, _prepared


def _fail(message):
    raise _errors.invalid(message)


def _rows(name: str, t: Tensor) -> Tensor:
    """t as a 2-D [rows, last] tensor whose rows are dense (a view when possible). A tensor the
    library cannot take (no dimension, a vocabulary of 0) is passed on as it is: the call's
    checks (_check.py) refuse it with distil's message, also while torch.compile traces."""
    dim = t.dim()
    if dim == 2 and t.is_contiguous():  # the usual case, in one call
        return t
    if dim < 1 or t.shape[-1] == 0 or (t.numel() == 0 and dim > 2):
        return t
    t = t.reshape(-1, t.shape[-1]) if dim != 2 else t
    rows, cols = t.shape
    dense_rows = (cols <= 1 or t.stride(1) == 1) and (rows <= 1 or t.stride(0) >= cols)
    return t if dense_rows else t.contiguous()


def _labels(name: str, labels: Tensor | None, rows: int) -> Tensor | None:
    """Integer labels of `rows` values as the library takes them (int64 [rows],
    dense); anything else is passed on for the call's checks to refuse by name."""
    if labels is None:
        return None
    if labels.dtype is torch.int64 and labels.dim() == 1 and labels.is_contiguous():
        return labels  # the usual case: as the library takes them
    if (
        labels.dtype in (torch.int32, torch.int16, torch.uint8, torch.int8, torch.int64)
        and labels.numel() == rows
    ):
        return labels.reshape(rows).to(torch.int64).contiguous()
    return labels


def _float_name(t: Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _same(fn: str, names: tuple, tensors: tuple):
    """Every present tensor has a dtype distil computes in (complex and integer tensors are
    refused by name, never converted)."""
    for name, t in zip(names, tensors, strict=False):
        if t is not None and t.dtype not in _ops._DTYPES:
            _fail(f"{fn}: {name}: dtype {_float_name(t)} is not float32, bfloat16 or float16")


def _wants_grad(t: Tensor | None) -> bool:
    return t is not None and t.requires_grad and torch.is_grad_enabled()


def _wants_grads(x: Tensor, w: Tensor, b: Tensor | None) -> tuple:
    """_wants_grad of each, grad mode read once."""
    if not torch.is_grad_enabled():
        return False, False, False
    return x.requires_grad, w.requires_grad, b is not None and b.requires_grad


def _check_temperature(fn: str, temperature: float):
    _options.check_temperature(fn, temperature)


def _device_normaliser(normaliser) -> Tensor | None:
    """A normaliser tensor as the call takes it: one fp32 value, 0-dim (a tensor of another
    size is passed on for the call to refuse by name)."""
    if not isinstance(normaliser, Tensor):
        return None
    n = normaliser.detach()
    return n.reshape(()).to(torch.float32) if n.numel() == 1 else n


def _host_normaliser(normaliser):
    return None if isinstance(normaliser, Tensor) else normaliser


# ------------------------------------------------------------------------------------ JSD


def jsd(
    input: Tensor,
    target: Tensor,
    shift_labels: Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
    *,
    reduction: str = "batchmean",
    divergence: str = "jsd",
    alpha: float = 0.1,
    normaliser=None,
) -> Tensor:
    """Generalised JSD between student log-probs `input` and teacher log-probs `target`.

    input, target: [..., V] log-probabilities (not re-normalised); shift_labels: [...] or None.
    beta weights the teacher: 0 gives KL(p||q), 1 gives KL(q||p). reduction "batchmean"
    (Liger's, the default: sum over rows / rows whose label != ignore_index), "sum" or "none"
    (per row, shaped like the leading dimensions). Returns an fp32 loss. divergence, alpha,
    normaliser (batchmean only): see the module docstring.
    """
    opts = _options.jsd_options(
        "jsd",
        divergence=divergence,
        beta=beta,
        alpha=alpha,
        ignore_index=ignore_index,
        reduction=reduction,
        normaliser=_host_normaliser(normaliser),
    )
    return jsd_with(opts, input, target, shift_labels, _device_normaliser(normaliser))


def jsd_with(
    opts: _options.JsdOptions,
    input: Tensor,
    target: Tensor,
    shift_labels: Tensor | None = None,
    normaliser: Tensor | None = None,
) -> Tensor:
    """jsd with its options made once (the JSD module's); normaliser: N on the device."""
    x, y = _rows("input", input), _rows("target", target)
    labels = _labels("shift_labels", shift_labels, x.shape[0] if x.dim() else 0)
    loss = _ops.jsd(_ops.JsdTensors(x, y, labels, normaliser), opts, _wants_grad(input))
    if opts.reduction == "none" and input.dim() >= 1 and loss.numel() == input[..., 0].numel():
        return loss.reshape(input.shape[:-1])
    return loss


def liger_jsd(
    input: Tensor,
    target: Tensor,
    shift_labels: Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> Tensor:
    """Liger's liger_jsd: jsd with the loss in the input's dtype (as Liger returns it)."""
    return jsd(input, target, shift_labels, beta, ignore_index).to(input.dtype)


# ------------------------------------------------------------------------ fused linear JSD


def e4m3_head(teacher_weight: Tensor) -> Tensor:
    """The teacher's head [V, Ht] rounded to fp8 e4m3 once (docs/SPEC.md §6): a uint8 tensor on
    its device holding each row's codes and scale in the backend's own form.

    Pass it as teacher_weight_e4m3= with teacher_head_precision="fp8" to the fused losses: the
    call then skips rounding Wt itself (the same numbers, bit for bit; less time and working
    memory per call). The head is a copy: make it again after the teacher's weight changes.
    Made eagerly (call it outside torch.compile and CUDA-graph capture, once)."""
    fn = "e4m3_head"
    _same(fn, ("teacher_weight",), (teacher_weight,))
    w = teacher_weight.detach().contiguous()
    op = _ops.operand("teacher_weight", w)
    if w.dim() != 2:
        _fail(f"{fn}: teacher_weight must be 2-D [V, Ht] (nn.Linear layout)")
    _ops._check.same_device(fn, op, ())
    ctx = _ops.context_for(w)  # bound to the current stream
    rows, cols = w.shape
    nbytes = _calls.e4m3_head_size(ctx, rows, cols)
    head = torch.empty(nbytes, dtype=torch.uint8, device=w.device)
    _calls.run_e4m3_head(
        ctx, _ops._DTYPES[w.dtype], w.data_ptr(), rows, cols, head.data_ptr(), nbytes
    )
    return head


def _compute_dtype(tensors: tuple) -> torch.dtype | None:
    """The dtype the fused GEMMs run in: under torch.autocast, its dtype (as Liger's
    custom_fwd); else a 16-bit student_input's dtype when other inputs are fp32 (fp32 master
    weights beside bf16 activations); None: the inputs as they are."""
    xs = tensors[0]
    kind = "cuda" if xs.is_cuda else ("cpu" if xs.is_cpu else None)
    if kind is not None and torch.is_autocast_enabled(kind):
        dtype = torch.get_autocast_dtype(kind)
        return dtype if dtype in _ops._DTYPES else None
    if xs.dtype is torch.float32 or xs.dtype not in _ops._DTYPES:
        return None
    for t in tensors[1:]:
        if t is not None and t.dtype is torch.float32:
            return xs.dtype
    return None


def _student_head(fn: str, ws: Tensor, dtype) -> Tensor:
    """The student's head as the call takes it: an fp32 head stays fp32 beside 16-bit hidden
    states (the call rounds it for the GEMMs and writes its gradient in fp32 straight from the
    library's fp32 accumulator, _ops._rounded_head); another is cast to dtype."""
    return ws if ws.dtype is torch.float32 else _cast(fn, "student_weight", ws, dtype)


def _cast(fn: str, name: str, t: Tensor | None, dtype) -> Tensor | None:
    """t in dtype (differentiable: a gradient flows back in t's own dtype); a complex or
    integer t is refused by name, never converted (uncast, the call's checks refuse it)."""
    if t is None or dtype is None or t.dtype is dtype:
        return t
    _same(fn, (name,), (t,))
    return t.to(dtype)


class FusedInputs:
    """The public tensors of a fused call, as given (before any rounding or reshaping)."""

    __slots__ = ("xs", "ws", "xt", "wt", "labels", "bs", "bt", "normaliser", "head")

    def __init__(
        self,
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        labels=None,
        student_bias=None,
        teacher_bias=None,
    ):
        self.xs, self.ws, self.xt, self.wt = (
            student_input,
            student_weight,
            teacher_input,
            teacher_weight,
        )
        self.labels, self.bs, self.bt = labels, student_bias, teacher_bias
        self.normaliser, self.head = None, None


class Returns(NamedTuple):
    """What a public fused call returns after the loss, in this order: (soft, hard) with
    soft_hard (Liger's order), (student_lse, teacher_lse) with lse, student_entropy with
    entropy (docs/SPEC.md §6); each row output detached and shaped like the leading
    dimensions. A tuple: it is part of a kept call's key (_prepared.py), hashed per call."""

    soft_hard: bool = False
    lse: bool = False
    entropy: bool = False


def fused_with(fn: str, opts: _options.FusedOptions, inputs: FusedInputs, returns: Returns):
    """The fused loss with its options made once: (loss, parts [3] detached or None,
    student_lse, teacher_lse, student_entropy shaped like the leading dimensions or None)."""
    key = _prepared.key(opts, returns, inputs)
    kept = _prepared.get(key)
    if kept is None:
        t, want = _fused_tensors(fn, inputs, returns)
        out = _ops.fused(t, opts, want)
        _prepared.keep(key, fn, inputs, t, want)
    else:  # a call like one that succeeded: its tensors as they are, its shape checked
        shape, want = kept
        i = inputs
        t = _ops.FusedTensors(i.xs, i.ws, i.bs, i.xt, i.wt, i.bt, i.labels)
        out = _ops.fused_eager(t, opts, want, shape)
    loss, out_parts, ls, lt, ent = out
    if not (returns.lse or returns.entropy):
        return loss, out_parts, None, None, None
    lead = inputs.xs.shape[:-1]
    lse_out = (ls.reshape(lead), lt.reshape(lead)) if returns.lse else (None, None)
    return (loss, out_parts) + lse_out + (ent.reshape(lead) if returns.entropy else None,)


def _fused_tensors(fn: str, inputs: FusedInputs, returns: Returns):
    """(FusedTensors, FusedOutputs) of a call: its tensors in the compute dtype (_compute_dtype),
    2-D and dense, the labels int64, and what the call writes."""
    dtype = _compute_dtype((inputs.xs, inputs.ws, inputs.xt, inputs.wt, inputs.bs, inputs.bt))
    xs0 = _cast(fn, "student_input", inputs.xs, dtype)
    ws = _student_head(fn, inputs.ws, dtype)
    bs_dtype = torch.float32 if ws.dtype is torch.float32 else dtype
    bs = _cast(fn, "student_bias", inputs.bs, bs_dtype)
    xs, xt = (
        _rows("student_input", xs0).contiguous(),
        _rows("teacher_input", _cast(fn, "teacher_input", inputs.xt, dtype)),
    )
    rows = xs.shape[0] if xs.dim() else 0
    t = _ops.FusedTensors(
        xs,
        ws.contiguous(),
        None if bs is None else bs.contiguous(),
        xt.contiguous(),
        _cast(fn, "teacher_weight", inputs.wt, dtype).contiguous(),
        None if inputs.bt is None else _cast(fn, "teacher_bias", inputs.bt, dtype).contiguous(),
        _labels("labels", inputs.labels, rows),
        _device_normaliser(inputs.normaliser),
        inputs.head,
    )
    want = _options.fused_outputs(
        *_wants_grads(xs0, ws, bs), returns.soft_hard, returns.lse, returns.entropy
    )
    return t, want


def _head_kwargs(
    student_logit_scale=1.0,
    student_softcap=0.0,
    teacher_logit_scale=1.0,
    teacher_softcap=0.0,
    teacher_temperature=None,
    teacher_head_precision=None,
):
    return dict(
        student_logit_scale=student_logit_scale,
        student_softcap=student_softcap,
        teacher_logit_scale=teacher_logit_scale,
        teacher_softcap=teacher_softcap,
        teacher_temperature=teacher_temperature,
        teacher_head_precision=teacher_head_precision,
    )


def fused_linear_jsd(
    student_input: Tensor,
    student_weight: Tensor,
    teacher_input: Tensor,
    teacher_weight: Tensor,
    shift_labels: Tensor | None = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
    *,
    chunk_rows: int = 0,
    divergence: str = "jsd",
    alpha: float = 0.1,
    normaliser=None,
    temperature_squared: bool = False,
    student_logit_scale: float = 1.0,
    student_softcap: float = 0.0,
    teacher_logit_scale: float = 1.0,
    teacher_softcap: float = 0.0,
    teacher_temperature: float | None = None,
    return_lse: bool = False,
    teacher_head_precision: str | None = None,
    teacher_weight_e4m3: Tensor | None = None,
    return_entropy: bool = False,
):
    """JSD of the two heads' tempered distributions (Liger's LigerFusedLinearJSD), fp32.

    student_input [..., Hs], student_weight [V, Hs], teacher_input [..., Ht], teacher_weight
    [V, Ht], shift_labels [...] or None (then every row counts). No hard loss, no biases.
    Head options (docs/SPEC.md §6, keywords) as in fused_linear_jsd_loss; with return_lse the
    result is (loss, student_lse, teacher_lse); return_entropy appends the student's entropy
    (as in fused_linear_jsd_loss).
    """
    fn = "fused_linear_jsd"
    opts = _options.fused_options(
        fn,
        weight_hard=0.0,
        weight_soft=1.0,
        beta=jsd_beta,
        temperature=temperature,
        ignore_index=ignore_index,
        chunk_rows=chunk_rows,
        divergence=divergence,
        alpha=alpha,
        normaliser=_host_normaliser(normaliser),
        temperature_squared=temperature_squared,
        **_head_kwargs(
            student_logit_scale,
            student_softcap,
            teacher_logit_scale,
            teacher_softcap,
            teacher_temperature,
            teacher_head_precision,
        ),
    )
    inputs = FusedInputs(student_input, student_weight, teacher_input, teacher_weight, shift_labels)
    inputs.normaliser, inputs.head = normaliser, teacher_weight_e4m3
    return fused_result(
        fn, opts, inputs, Returns(lse=bool(return_lse), entropy=bool(return_entropy))
    )


def liger_fused_linear_jsd(
    student_input: Tensor,
    student_weight: Tensor,
    teacher_input: Tensor,
    teacher_weight: Tensor,
    shift_labels: Tensor | None = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
    accum_dtype=None,
) -> Tensor:
    """Liger's liger_fused_linear_jsd: fused_linear_jsd with the loss in the student's dtype.
    accum_dtype is accepted: distil accumulates the weight gradient in fp32 always."""
    del accum_dtype
    loss = fused_linear_jsd(
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        shift_labels,
        jsd_beta,
        ignore_index,
        temperature,
    )
    return loss.to(_loss_dtype(student_input))


def _loss_dtype(student_input: Tensor) -> torch.dtype:
    """The dtype Liger returns a fused JSD loss in: the autocast dtype under autocast, else the
    student's."""
    kind = student_input.device.type
    if kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return student_input.dtype


def fused_linear_jsd_loss(
    student_input: Tensor,
    student_weight: Tensor,
    teacher_input: Tensor,
    teacher_weight: Tensor,
    true_labels: Tensor | None,
    student_bias: Tensor | None = None,
    teacher_bias: Tensor | None = None,
    weight_hard_loss: float = 0.5,
    weight_soft_loss: float = 0.5,
    beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
    compiled: bool = True,
    chunk_size: int = 1024,
    return_soft_hard_loss: bool = False,
    *,
    chunk_rows: int = 0,
    divergence: str = "jsd",
    alpha: float = 0.1,
    normaliser=None,
    temperature_squared: bool = False,
    student_logit_scale: float = 1.0,
    student_softcap: float = 0.0,
    teacher_logit_scale: float = 1.0,
    teacher_softcap: float = 0.0,
    teacher_temperature: float | None = None,
    return_lse: bool = False,
    teacher_head_precision: str | None = None,
    teacher_weight_e4m3: Tensor | None = None,
    return_entropy: bool = False,
):
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
    return_entropy=True (docs/SPEC.md §6 "Student entropy") appends, last, each row's entropy
    in nats of the student's soft-part distribution softmax(z' / temperature), computed in the
    loss's own pass over the row; ignored rows hold 0; detached (TRL logs its mean). Not with
    the vocabulary-parallel loss.

    teacher_head_precision="fp8" (docs/SPEC.md §6, fp8 teacher head; default None: exact): the
    teacher's logits from its hidden states and head rounded to fp8 e4m3 with a scale per row
    (amax / 448), multiplied with fp32 accumulation, logits in fp32: faster on GPUs with fp8
    tensor cores (cuda sm_89+; slower emulation elsewhere on cuda / hip; cpu computes the same
    numbers; opencl refuses it). The teacher is frozen, so only its distribution changes (by
    e4m3's rounding); the student's head is exact. teacher_weight_e4m3 = e4m3_head(
    teacher_weight), made once for a frozen teacher, saves rounding Wt in every call (same
    numbers).
    """
    del compiled, chunk_size  # accepted for Liger compatibility, see the module docstring
    fn = "fused_linear_jsd_loss"
    opts = _options.fused_options(
        fn,
        weight_hard=weight_hard_loss,
        weight_soft=weight_soft_loss,
        beta=beta,
        temperature=temperature,
        ignore_index=ignore_index,
        chunk_rows=chunk_rows,
        divergence=divergence,
        alpha=alpha,
        normaliser=_host_normaliser(normaliser),
        temperature_squared=temperature_squared,
        **_head_kwargs(
            student_logit_scale,
            student_softcap,
            teacher_logit_scale,
            teacher_softcap,
            teacher_temperature,
            teacher_head_precision,
        ),
    )
    inputs = FusedInputs(
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        true_labels,
        student_bias,
        teacher_bias,
    )
    inputs.normaliser, inputs.head = normaliser, teacher_weight_e4m3
    return fused_result(
        fn,
        opts,
        inputs,
        Returns(bool(return_soft_hard_loss), bool(return_lse), bool(return_entropy)),
    )


def fused_result(fn: str, opts: _options.FusedOptions, inputs: FusedInputs, returns: Returns):
    """A public fused call's result: the loss alone, or a tuple as Returns orders it."""
    loss, parts, ls, lt, ent = fused_with(fn, opts, inputs, returns)
    out = (loss, parts[2], parts[1]) if returns.soft_hard else (loss,)
    out += (ls, lt) if returns.lse else ()
    out += (ent,) if returns.entropy else ()
    return out if len(out) > 1 else loss
