"""distil's losses as torch.library custom ops: real kernels, fake (meta) kernels, autograd.

Ops (namespace ``distil``), on 2-D row-major tensors prepared by the public wrappers:
  jsd(student_logp [T, V], teacher_logp [T, V], labels [T]?, beta, ignore_index, reduction,
      want_grad, divergence, alpha, normaliser, normaliser_device []?)
      -> (loss [] or [T] fp32, grad [T, V] or [0])
  fused_linear_jsd(xs [T, Hs], Ws [V, Hs], bs [V]?, xt [T, Ht], Wt [V, Ht], bt [V]?,
      labels [T]?, weight_hard, weight_soft, beta, temperature, ignore_index, chunk_rows,
      want_grad_hidden, want_grad_weight, want_grad_bias, divergence, alpha, normaliser,
      normaliser_device []?, temperature_squared)
      -> (loss_parts [3] fp32 = (loss, hard, soft), grad_xs, grad_Ws, grad_bs; [0] if unwanted)
  (docs/SPEC.md §6: divergence a distil_divergence code, alpha the skew KLs', normaliser N > 0
  given on the host or 0.0, normaliser_device N as a 0-dim fp32 tensor read on the device.)
  and the head options (docs/SPEC.md §6): student_logit_scale, student_softcap,
  teacher_logit_scale, teacher_softcap, teacher_temperature, want_lse, with two more outputs
  student_lse [T], teacher_lse [T] ([0] unless want_lse). Wt may have more or fewer rows than Ws
  (the loss over the common prefix); the LSEs are not differentiable. Last,
  teacher_head_precision: 0 the exact teacher head, 1 the fp8 (e4m3) one; teacher_weight_e4m3
  (uint8 [bytes])?: with 1, Wt's rows made once by e4m3_head (the library then skips rounding
  Wt in the call); want_entropy (docs/SPEC.md §6) with a seventh output student_entropy [T]
  ([0] unless want_entropy), not differentiable.
The gradients are computed in the forward call (as Liger does) and saved; backward scales them
by the upstream gradient on the device (distil_scale), so the usual `loss.backward()` reads
nothing back to the host and makes no extra pass over them. Every call runs on the caller's
current stream of that moment (graph capture replaces it), with its workspace taken from
torch's caching allocator, so memory accounting and CUDA-graph pools see it.
"""

import os
from typing import Optional

import torch
from torch import Tensor

from .. import _calls, _context, _errors, _lib

_DTYPES = {torch.float32: _lib.F32, torch.bfloat16: _lib.BF16, torch.float16: _lib.F16}
_eager = os.environ.get("DISTIL_EAGER_ERRORS", "") not in ("", "0")
# Tests: outputs start as NaN instead of uninitialised memory, so that an element the library
# failed to write shows.
POISON_OUTPUTS = False
_OutOfMemoryError = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def set_eager_errors(on: bool) -> None:
    """Opt-in: synchronise after every call on a GPU, so that a bad label raises at its call.

    Off by default (it costs a host synchronisation per call and is skipped during graph
    capture). Without it, call distil.torch.check() where a late error should surface.
    """
    global _eager
    _eager = bool(on)


_GPU = "hip" if torch.version.hip else "cuda"
# The raw handle of a device's current stream (0: the legacy default stream) without making a
# torch.cuda.Stream object per call (torch has had it since 2.0; the fallback makes the object),
# and whether that stream is being captured. Looked up once: a CPU-only torch has neither.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or (
    lambda: torch.cuda.is_current_stream_capturing())


def context_for(t: Tensor) -> "_context.Context":
    """The calling thread's context for t's device, bound to the current stream."""
    if t.is_cpu:  # is_cpu / is_cuda / get_device: no torch.device object made per call
        return _context.get("cpu", 0)
    if not t.is_cuda:
        raise _errors.make_error(_lib.ERR_UNSUPPORTED, f"tensors on '{t.device.type}' are not "
                                 "supported (cpu or cuda)")
    index = t.get_device()
    ctx = _context.lookup(_GPU, index)
    if ctx is None:
        if _capturing():
            raise _errors.make_error(
                _lib.ERR_UNSUPPORTED,
                f"the first call on {_GPU}:{index} is being captured into a CUDA graph; creating "
                "its context allocates device memory, which capture forbids: call "
                "distil.torch.prepare(device) or run one eager step before capturing")
        ctx = _context.get(_GPU, index)
    ctx.bind_stream(_raw_stream(index))
    return ctx


# A workspace up to this size is small. On the cpu it is the context's own (grown once, kept):
# torch's CPU allocator has no pools or graphs to see it, and a per-call tensor costs host time.
# On a GPU the eager path keeps one block per context (_kept_workspace). Larger workspaces, and
# every one under CUDA-graph capture or from the ops, come from torch's allocator per call.
_SMALL_WORKSPACE = 1 << 20
_KEPT_MIN = 64 << 10  # the kept block's least size, so that growing shapes rarely replace it


def _workspace(t: Tensor, nbytes: int, ctx=None):
    """A uint8 workspace of at least nbytes on t's device, or None for none (0 bytes, or a
    small cpu workspace that the context provides itself); ctx given (the eager path, bound to
    the call's stream): a small GPU one is the context's kept block."""
    if not nbytes:
        return None
    if nbytes <= _SMALL_WORKSPACE:
        if t.is_cpu:
            return None
        if ctx is not None and not _capturing():
            return _kept_workspace(ctx, t, nbytes)
    return torch.empty(nbytes, dtype=torch.uint8, device=t.device)


def _kept_workspace(ctx, t: Tensor, nbytes: int) -> Tensor:
    """ctx's kept GPU workspace for the stream it is bound to, of at least nbytes.

    torch's allocator gave the block to that stream, so the calls queued there use it one after
    the other, as they would use per-call blocks handed out again; a call on another stream gets
    a block of its own, and the old one goes back to torch, which reuses it on its stream only.
    Never used under capture (_workspace): a graph's workspace must live in its own pool.
    """
    kept = ctx.kept
    if kept is None or kept[0] != ctx.stream or kept[1].numel() < nbytes:
        block = torch.empty(max(nbytes, _KEPT_MIN), dtype=torch.uint8, device=t.device)
        kept = ctx.kept = (ctx.stream, block)
    return kept[1]


def _addr(t: Optional[Tensor]) -> int:
    return t.data_ptr() if t is not None and t.numel() else 0


def _torch_errors(call, *args):
    """call(*args), an out-of-memory status raised as torch's OutOfMemoryError."""
    try:
        call(*args)
    except _errors.OutOfMemory as e:
        raise _OutOfMemoryError(str(e)) from e


def _after_call(ctx, t: Tensor):
    if _eager and t.is_cuda and not _capturing():
        ctx.synchronize()


def _dtype_code(t: Tensor) -> int:
    return _DTYPES[t.dtype]


# ------------------------------------------------------------------------------------- jsd


def _jsd_impl(student_logp: Tensor, teacher_logp: Tensor, labels: Optional[Tensor], beta: float,
              ignore_index: int, reduction: str, want_grad: bool, divergence: int = 0,
              alpha: float = 0.1, normaliser: float = 0.0,
              normaliser_device: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    return _jsd_run(False, student_logp, teacher_logp, labels, beta, ignore_index, reduction,
                    want_grad, divergence, alpha, normaliser, normaliser_device)


def _jsd_run(keep, student_logp, teacher_logp, labels, beta, ignore_index, reduction, want_grad,
             divergence, alpha, normaliser, normaliser_device):
    """The jsd kernel; keep: a small GPU workspace may be the context's kept block (the eager
    path; _workspace)."""
    rows, vocab = student_logp.shape
    ctx = context_for(student_logp)
    desc, nbytes = _jsd_plan(ctx, student_logp, teacher_logp, beta, ignore_index, reduction,
                             divergence, alpha, normaliser)
    loss = _out(student_logp, (rows,) if reduction == "none" else (), torch.float32)
    grad = _out(student_logp, (rows, vocab) if want_grad else (0,), student_logp.dtype)
    ws = _workspace(student_logp, nbytes, ctx if keep else None)
    try:
        _calls.run_jsd(ctx, desc, _addr(ws), nbytes, student_logp.data_ptr(),
                       teacher_logp.data_ptr(), _addr(labels), _addr(loss),
                       _addr(grad) if want_grad else 0, _addr(normaliser_device))
    except _errors.OutOfMemory as e:
        raise _OutOfMemoryError(str(e)) from e
    _after_call(ctx, student_logp)
    return loss, grad


def _jsd_plan(ctx, x, y, beta, ignore_index, reduction, divergence, alpha, normaliser):
    """_calls.jsd_plan of the op's 2-D tensors and options."""
    rows, vocab = x.shape
    return _calls.jsd_plan(ctx, rows, vocab, (x.stride(0), y.stride(0), vocab), _DTYPES[x.dtype],
                           beta, ignore_index, reduction, (divergence, alpha, normaliser))


# Positions in jsd_op's and fused_op's argument tuples that the call sites read (_site.py).
JSD_REDUCTION, JSD_WANT, JSD_N_DEVICE = 5, 6, 10
FUSED_WANTS, FUSED_N_DEVICE, FUSED_WANT_LSE, FUSED_E4M3_HEAD = slice(13, 16), 19, 26, 28
FUSED_WANT_ENTROPY = 29


def jsd_plan_of(ctx, args: tuple):
    """The plan of a call of jsd_op with these arguments (every one, in order)."""
    return _jsd_plan(ctx, args[0], args[1], args[3], args[4], args[5], args[7], args[8], args[9])


jsd_op = torch.library.custom_op("distil::jsd", _jsd_impl, mutates_args=())


@jsd_op.register_fake
def _jsd_fake(student_logp, teacher_logp, labels, beta, ignore_index, reduction, want_grad,
              divergence=0, alpha=0.1, normaliser=0.0, normaliser_device=None):
    rows, vocab = student_logp.shape
    loss = student_logp.new_empty((rows,) if reduction == "none" else (), dtype=torch.float32)
    grad = student_logp.new_empty((rows, vocab) if want_grad else (0,))
    return loss, grad


def _jsd_setup(ctx, inputs, output):
    ctx.reduction = inputs[5]
    ctx.want_grad = inputs[6]
    ctx.save_for_backward(output[1] if inputs[6] else None)


_JSD_ARGS = 11  # inputs of jsd_op: one gradient (student_logp), None for the others


def _jsd_backward(ctx, grad_loss, grad_grad):
    (grad,) = ctx.saved_tensors
    rest = (None,) * (_JSD_ARGS - 1)
    if not ctx.want_grad:
        return (None,) + rest
    if ctx.reduction == "none":
        return (grad * grad_loss.unsqueeze(-1).to(grad.dtype),) + rest
    return (_scaled(ctx, [grad], grad_loss)[0],) + rest


jsd_op.register_autograd(_jsd_backward, setup_context=_jsd_setup)


# ---------------------------------------------------------------------------- fused loss


def _fused_impl(student_hidden: Tensor, student_weight: Tensor, student_bias: Optional[Tensor],
             teacher_hidden: Tensor, teacher_weight: Tensor, teacher_bias: Optional[Tensor],
             labels: Optional[Tensor], weight_hard: float, weight_soft: float, beta: float,
             temperature: float, ignore_index: int, chunk_rows: int, want_grad_hidden: bool,
             want_grad_weight: bool, want_grad_bias: bool, divergence: int = 0, alpha: float = 0.1,
             normaliser: float = 0.0, normaliser_device: Optional[Tensor] = None,
             temperature_squared: bool = False, student_logit_scale: float = 1.0,
             student_softcap: float = 0.0, teacher_logit_scale: float = 1.0,
             teacher_softcap: float = 0.0, teacher_temperature: float = 0.0,
             want_lse: bool = False, teacher_head_precision: int = 0,
             teacher_weight_e4m3: Optional[Tensor] = None, want_entropy: bool = False
             ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _fused_run(_out, student_hidden, student_weight, student_bias, teacher_hidden,
                      teacher_weight, teacher_bias, labels, weight_hard, weight_soft, beta,
                      temperature, ignore_index, chunk_rows, want_grad_hidden, want_grad_weight,
                      want_grad_bias, divergence, alpha, normaliser, normaliser_device,
                      temperature_squared, student_logit_scale, student_softcap,
                      teacher_logit_scale, teacher_softcap, teacher_temperature, want_lse,
                      teacher_head_precision, teacher_weight_e4m3, want_entropy)


def _fused_run(make, xs, ws, bs, xt, wt, bt, labels, weight_hard, weight_soft, beta, temperature,
               ignore_index, chunk_rows, want_grad_hidden, want_grad_weight, want_grad_bias,
               divergence=0, alpha=0.1, normaliser=0.0, normaliser_device=None,
               temperature_squared=False, student_logit_scale=1.0, student_softcap=0.0,
               teacher_logit_scale=1.0, teacher_softcap=0.0, teacher_temperature=0.0,
               want_lse=False, teacher_head_precision=0, teacher_weight_e4m3=None,
               want_entropy=False, want_parts=True):
    """The fused op's kernel with its outputs made by make(like, shape or None, dtype): the op
    needs a [0] tensor for each unwanted output, the eager path passes None for it (the library
    takes NULL), saving an allocation each. want_parts=False: the loss alone, [] instead of the
    [3] parts (the eager path, when the caller does not hand out the parts). With make
    _wanted (the eager path) a small GPU workspace may be the context's kept block
    (_workspace). teacher_head_precision: a distil_head_precision (docs/SPEC.md §6; 1 = the fp8
    head); teacher_weight_e4m3: Wt's rows made once (e4m3_head) or None; want_entropy: the
    student's entropy [T] (docs/SPEC.md §6), last of the outputs."""
    parts, gx, gw, gb = _fused_outputs(xs, ws, want_grad_hidden, want_grad_weight, want_grad_bias,
                                       make, want_parts)
    ls, lt = _lse_outputs(xs, want_lse, make)
    ent = make(xs, (xs.shape[0],) if want_entropy else None, torch.float32)
    heads = (student_logit_scale, student_softcap, teacher_logit_scale, teacher_softcap,
             teacher_temperature, teacher_head_precision, _bytes(teacher_weight_e4m3))
    ctx = context_for(xs)
    desc, nbytes = _fused_plan(ctx, xs, ws, xt, wt, weight_hard, weight_soft, beta, temperature,
                               ignore_index, chunk_rows,
                               want_grad_hidden or want_grad_weight or want_grad_bias,
                               divergence, alpha, normaliser, temperature_squared, heads,
                               want_parts)
    work = _workspace(xs, nbytes, ctx if make is _wanted else None)
    try:
        _calls.run_fused(ctx, desc, _addr(work), nbytes,
                         (_addr(xs), _addr(ws), _addr(bs), _addr(xt), _addr(wt), _addr(bt),
                          _addr(labels), _addr(parts), _addr(gx), _addr(gw), _addr(gb)),
                         _addr(normaliser_device), (_addr(ls), _addr(lt)) if want_lse else _NO_LSE,
                         _addr(teacher_weight_e4m3), _addr(ent))
    except _errors.OutOfMemory as e:
        raise _OutOfMemoryError(str(e)) from e
    _after_call(ctx, xs)
    return parts, gx, gw, gb, ls, lt, ent


def _bytes(t: Optional[Tensor]) -> int:
    return t.numel() * t.element_size() if t is not None else 0


def _fused_plan(ctx, xs, ws, xt, wt, weight_hard, weight_soft, beta, temperature, ignore_index,
                chunk_rows, want, divergence, alpha, normaliser, temperature_squared, heads,
                want_parts):
    """_calls.fused_plan of the op's 2-D tensors and options; heads = the five head options, the
    teacher head precision code and the bytes of Wt's rows made once (0: none)."""
    rows, hs = xs.shape
    (vocab, ws_hidden), (t_vocab, wt_hidden) = ws.shape, wt.shape  # 2-D: the wrappers check
    return _calls.fused_plan(ctx, rows, vocab, hs, xt.shape[1], _DTYPES[xs.dtype],
                             (weight_hard, weight_soft), beta, temperature, ignore_index,
                             chunk_rows, want, (t_vocab, ws_hidden, wt_hidden),
                             (divergence, alpha, normaliser), temperature_squared, heads,
                             want_parts)


def fused_plan_of(ctx, args: tuple, want_parts: bool):
    """The plan of a call of the op with these arguments (every one of fused_op's, in order)."""
    return _fused_plan(ctx, args[0], args[1], args[3], args[4], args[7], args[8], args[9],
                       args[10], args[11], args[12], args[13] or args[14] or args[15], args[16],
                       args[17], args[18], args[20],
                       args[21:26] + (args[27], _bytes(args[28]) if len(args) > 28 else 0),
                       want_parts)


fused_op = torch.library.custom_op("distil::fused_linear_jsd", _fused_impl, mutates_args=())
_NO_LSE = (0, 0)


def _lse_outputs(xs, want_lse, make):
    """(student_lse, teacher_lse) [T] fp32 each (docs/SPEC.md §6), make's unwanted (shape None)
    otherwise."""
    lse = (xs.shape[0],) if want_lse else None
    return make(xs, lse, torch.float32), make(xs, lse, torch.float32)


def _fused_outputs(xs, ws, want_hidden, want_weight, want_bias, make, parts=True):
    """(loss parts [3] fp32, or the loss [] with parts=False, grad_xs, grad_Ws, grad_bs), make's
    unwanted (shape None) where a gradient is unwanted."""
    empty = None
    parts = make(xs, (3,) if parts else (), torch.float32)
    gx = make(xs, xs.shape if want_hidden else empty, xs.dtype)
    gw = make(ws, ws.shape if want_weight else empty, ws.dtype)
    gb = make(ws, (ws.shape[0],) if want_bias else empty, ws.dtype)
    return parts, gx, gw, gb


def _out(like: Tensor, shape, dtype) -> Tensor:
    """A new output like `like`'s device; shape None: an unwanted output, [0]."""
    if shape is None:
        shape = (0,)
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=like.device)
    # size= as a keyword: torch parses it faster than a positional tuple, () included
    # (bench/python/host_overhead.py).
    return torch.empty(size=shape, dtype=dtype, device=like.device)


def _fake(like: Tensor, shape, dtype) -> Tensor:
    return like.new_empty((0,) if shape is None else shape, dtype=dtype)


def _wanted(like: Tensor, shape, dtype) -> Optional[Tensor]:
    """_out, but None for an unwanted output (the eager path: nothing to hand back)."""
    return None if shape is None else _out(like, shape, dtype)


@fused_op.register_fake
def _fused_fake(student_hidden, student_weight, student_bias, teacher_hidden, teacher_weight,
                teacher_bias, labels, weight_hard, weight_soft, beta, temperature, ignore_index,
                chunk_rows, want_grad_hidden, want_grad_weight, want_grad_bias, divergence=0,
                alpha=0.1, normaliser=0.0, normaliser_device=None, temperature_squared=False,
                student_logit_scale=1.0, student_softcap=0.0, teacher_logit_scale=1.0,
                teacher_softcap=0.0, teacher_temperature=0.0, want_lse=False,
                teacher_head_precision=0, teacher_weight_e4m3=None, want_entropy=False):
    ent = _fake(student_hidden, (student_hidden.shape[0],) if want_entropy else None,
                torch.float32)
    return (_fused_outputs(student_hidden, student_weight, want_grad_hidden, want_grad_weight,
                           want_grad_bias, _fake)
            + _lse_outputs(student_hidden, want_lse, _fake) + (ent,))


_FUSED_ARGS = 30  # inputs of fused_op: three gradients (xs, Ws, bs), None for the others


def _fused_setup(ctx, inputs, output):
    ctx.wants = inputs[13:16]
    ctx.save_for_backward(*output[1:4])


def _fused_backward(ctx, grad_parts, grad_gx=None, grad_gw=None, grad_gb=None, grad_ls=None,
                    grad_lt=None, grad_ent=None):
    # Only the combined loss is differentiable: the wrappers hand out the parts (and the LSEs)
    # detached.
    grads = [g if want else None for g, want in zip(ctx.saved_tensors, ctx.wants)]
    return tuple(_scaled(ctx, grads, grad_parts[0])) + (None,) * (_FUSED_ARGS - 3)


fused_op.register_autograd(_fused_backward, setup_context=_fused_setup)


_TWICE = ("backward through a distil loss ran twice (retain_graph): its gradients are computed "
          "in the forward call and scaled in place; compute the loss again instead")


def _scaled(ctx, grads: list, s: Tensor) -> list:
    """Each grad (None passes) times s, the upstream gradient: a 0-dim device tensor, never
    read on the host.

    Eagerly, on plain tensors, in place with distil_scale, which writes nothing when s == 1:
    the usual `loss.backward()` costs no pass over the gradients. A second backward through
    the same graph (retain_graph) would then scale twice, so it is refused. Traced
    (torch.compile, AOT autograd: tensors are subclasses there), a plain multiplication that
    the compiler fuses into the consumer, since the saved gradient is an output of the op.
    """
    present = [g for g in grads if g is not None]
    if any(type(t) is not torch.Tensor for t in present + [s]):
        return [g * s.to(g.dtype) if g is not None else None for g in grads]
    if getattr(ctx, "distil_scaled", False):
        raise _errors.make_error(_lib.ERR_UNSUPPORTED, _TWICE)
    _scale_in_place(present, s)
    ctx.distil_scaled = True
    return grads


# ------------------------------------------------------------------- eager fast path
#
# Host time per call matters at small shapes (bench/python/host_overhead.py breaks it down). The
# dispatcher path of a Python custom op with autograd costs tens of µs per call; a plain
# autograd.Function around the same kernels costs a few. So a plain eager call (nothing
# compiling or tracing, no dispatch mode or functorch transform, plain tensors) takes the
# Function, everything else the registered ops: the same kernels, the same gradients computed
# in the forward call, the same in-place scale in backward. What the Function saves on top:
#   - autograd sees the student's tensors (those distil computes gradients for) and one tuple
#     of everything else (the teacher's tensors, labels, options), not each one by one;
#   - unwanted outputs are None (the library takes NULL), not [0] tensors;
#   - the fused loss comes out as the 0-dim loss itself, so backward has no select node;
#   - backward calls distil_scale through ctypes (as the ops' autograd does too).
# The gradients sit on ctx, not in save_for_backward: they are neither inputs nor outputs of
# the Function (autograd has no version counter to check), and backward takes them off ctx (a
# second backward through the same graph, which would scale them twice, is refused), so that
# nothing but the gradient autograd accumulates keeps them alive. Unlike saved tensors they
# are not offered to saved-tensor hooks (save_on_cpu, checkpointing): they are results, not
# activations to recompute.

_PLAIN = (Tensor, torch.nn.Parameter)


def _untraced(*tensors) -> bool:
    """Whether a call may take the autograd.Function: nothing traces and every tensor is plain."""
    if (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack()
            or torch._C._are_functorch_transforms_active()):
        return False
    for t in tensors:  # a loop, not all() over a generator: half the host time
        if t is not None and type(t) not in _PLAIN:
            return False
    return True


def _take_grads(ctx) -> tuple:
    """The gradients the forward call saved on ctx, once (see the comment above); backward then
    scales them as the ops' autograd does (_scaled)."""
    grads = ctx.grads
    if grads is None:
        raise _errors.make_error(_lib.ERR_UNSUPPORTED, _TWICE)
    ctx.grads = None
    return grads


def _scale_in_place(grads, s: Tensor) -> None:
    """Each present, non-empty grad *= s (a 0-dim device tensor, never read on the host) with
    distil_scale on the current stream; it writes nothing when s == 1."""
    if s.dtype is not torch.float32:
        s = s.float()
    ctx = None
    for g in grads:
        if g is None:
            continue
        count = g.numel()
        if count:
            if ctx is None:
                ctx = context_for(g)
            _calls.run_scale(ctx, g.data_ptr(), _DTYPES[g.dtype], count, s.data_ptr())


class _JsdFunction(torch.autograd.Function):
    """jsd_op's loss: apply(student_logp, options), options = (teacher_logp, labels,
    normaliser_device) and jsd_op's (beta, ignore_index, reduction, want_grad, divergence,
    alpha, normaliser)."""

    @staticmethod
    def forward(ctx, x, options):
        (y, labels, n_dev, beta, ignore_index, reduction, want_grad, divergence, alpha,
         normaliser) = options
        loss, grad = _jsd_run(True, x, y, labels, beta, ignore_index, reduction, want_grad,
                              divergence, alpha, normaliser, n_dev)
        ctx.grads = (grad,) if want_grad else ()
        ctx.per_row = reduction == "none"
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grads = _take_grads(ctx)
        if not grads:
            return None, None
        (grad,) = grads
        if ctx.per_row:  # loss [T]: row t's gradient times grad_loss[t]
            return grad * grad_loss.unsqueeze(-1).to(grad.dtype), None
        return _scaled(ctx, [grad], grad_loss)[0], None


class _FusedFunction(torch.autograd.Function):
    """fused_op's loss: apply(xs, Ws, bs, options, out), options = (xt, Wt, bt, labels,
    normaliser_device), fused_op's other arguments in its order and want_parts; out a list
    that receives the non-differentiable results (loss parts [3] or None, student_lse,
    teacher_lse) beside autograd, which would otherwise process each as an output of its
    own."""

    @staticmethod
    def forward(ctx, xs, ws, bs, options, out):
        (xt, wt, bt, labels, n_dev, weight_hard, weight_soft, beta, temperature, ignore_index,
         chunk_rows, want_x, want_w, want_b, divergence, alpha, normaliser, temperature_squared,
         *heads) = options
        parts, gx, gw, gb, ls, lt, ent = _fused_run(
            _wanted, xs, ws, bs, xt, wt, bt, labels, weight_hard, weight_soft, beta, temperature,
            ignore_index, chunk_rows, want_x, want_w, want_b, divergence, alpha, normaliser,
            n_dev, temperature_squared, *heads)
        ctx.grads = (gx, gw, gb)
        if parts.dim() == 0:  # the loss alone (want_parts False)
            out.extend((None, ls, lt, ent))
            return parts
        out.extend((parts, ls, lt, ent))
        # Not a view of parts as far as autograd knows, so the caller may modify it in place.
        return parts[0].detach()

    @staticmethod
    def backward(ctx, grad_loss):
        return tuple(_scaled(ctx, list(_take_grads(ctx)), grad_loss)) + (None, None)


def jsd(x, y, labels, beta, ignore_index, reduction, want_grad, divergence=0, alpha=0.1,
        normaliser=0.0, normaliser_device=None) -> Tensor:
    """The loss of jsd_op (arguments as there); autograd through the saved gradient."""
    if not _untraced(x, y, labels, normaliser_device):
        return jsd_op(x, y, labels, beta, ignore_index, reduction, want_grad, divergence, alpha,
                      normaliser, normaliser_device)[0]
    if not want_grad and not (x.requires_grad and torch.is_grad_enabled()):
        # Nothing for autograd to record (evaluation): the kernel alone, no Function.
        return _jsd_run(True, x, y, labels, beta, ignore_index, reduction, False, divergence,
                        alpha, normaliser, normaliser_device)[0]
    return _JsdFunction.apply(x, (y, labels, normaliser_device, beta, ignore_index, reduction,
                                  want_grad, divergence, alpha, normaliser))


def fused(*args, parts: bool = True) -> tuple[Tensor, Optional[Tensor], Optional[Tensor],
                                              Optional[Tensor]]:
    """(loss, loss parts [3] detached, student_lse, teacher_lse, student_entropy) of fused_op
    (arguments as there, every one given); only the loss is differentiable; the LSEs and the
    entropy are None (eager) or [0] (traced) unless asked for; parts=False: the parts may be
    None (eager: the library writes the loss alone)."""
    tensors = args[:7] + (args[19], args[28])
    if not _untraced(*tensors):
        out = fused_op(*args)
        return out[0][0], out[0].detach(), out[4], out[5], out[6]
    out = []
    loss = _FusedFunction.apply(args[0], args[1], args[2],
                                args[3:7] + (args[19],) + args[7:19] + args[20:] + (parts,), out)
    return (loss,) + tuple(out)
