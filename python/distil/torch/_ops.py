"""distil's losses as torch.library custom ops, and the eager route beside them.

Two routes share one call body per loss (`jsd_call`, `fused_call`: checks, plan, outputs,
workspace, the library call):
  - the custom ops (namespace ``distil``), which torch.compile, dispatch modes and functorch
    see: tensors positionally, then every field of the loss's options object (_options.py) and
    of what the call wants back, by name (their schemas are made from those objects);
      jsd(input [T, V], target [T, V], labels [T]?, normaliser_device []?, *, JsdOptions...,
          want_grad) -> (loss [] or [T] fp32, grad [T, V] or [0])
      fused_linear_jsd(xs [T, Hs], Ws [V, Hs], bs [V]?, xt [T, Ht], Wt [Vt, Ht], bt [Vt]?,
          labels [T]?, normaliser_device []?, teacher_weight_e4m3 (uint8)?, *, FusedOptions...,
          want_grad_hidden, want_grad_weight, want_grad_bias, want_parts, want_lse)
          -> (loss parts [3] fp32 = (loss, hard, soft) or the loss [], grad_xs, grad_Ws,
              grad_bs, student_lse [T], teacher_lse [T]; [0] where unwanted)
    Their fake kernels never refuse: a bad call is refused by the real kernel when it runs, so
    that a compiled call raises the same distil.InvalidArgument as an eager one.
  - an autograd.Function for plain eager calls (a few µs of host time where the dispatcher
    path of a Python custom op costs tens, bench/host_overhead.py), whose unwanted outputs are
    None (the library takes NULL) instead of [0] tensors.
The gradients are computed in the forward call (as Liger does) and kept; backward scales them
by the upstream gradient on the device (distil_scale), so the usual `loss.backward()` reads
nothing back to the host and makes no extra pass over them. They are not differentiable: a
second differentiation (create_graph=True) is refused when it runs. Every call runs on the
caller's current stream of that moment (graph capture replaces it), with its workspace taken
from torch's caching allocator, so memory accounting and CUDA-graph pools see it.
"""

import dataclasses
import os
from typing import NamedTuple

import torch
from torch import Tensor

from .. import _calls, _check, _context, _errors, _lib, _options

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
    lambda index: torch.cuda.current_stream(index).cuda_stream
)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or (
    lambda: torch.cuda.is_current_stream_capturing()
)


def context_for(t: Tensor) -> "_context.Context":
    """The calling thread's context for t's device, bound to the current stream."""
    if t.is_cpu:  # is_cpu / is_cuda / get_device: no torch.device object made per call
        return _context.get("cpu", 0)
    if not t.is_cuda:
        raise _errors.make_error(
            _lib.ERR_UNSUPPORTED, f"tensors on '{t.device.type}' are not supported (cpu or cuda)"
        )
    index = t.get_device()
    ctx = _context.lookup(_GPU, index)
    if ctx is None:
        if _capturing():
            raise _errors.make_error(
                _lib.ERR_UNSUPPORTED,
                f"the first call on {_GPU}:{index} is being captured into a CUDA graph; creating "
                "its context allocates device memory, which capture forbids: call "
                "distil.torch.prepare(device) or run one eager step before capturing",
            )
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


def _addr(t: Tensor | None) -> int:
    return t.data_ptr() if t is not None and t.numel() else 0


def _oom(e: BaseException) -> bool:
    """Whether e is an allocation's failure (torch's CPU allocator raises a RuntimeError)."""
    text = str(e)
    return isinstance(e, _errors.OutOfMemory) or (
        isinstance(e, RuntimeError)
        and ("can't allocate memory" in text or "out of memory" in text.lower())
    )


def _torch_errors(call, *args):
    """call(*args), an allocation's failure raised as torch's OutOfMemoryError."""
    try:
        return call(*args)
    except _OutOfMemoryError:
        raise
    except (_errors.OutOfMemory, RuntimeError) as e:
        if not _oom(e):
            raise
        raise _OutOfMemoryError(str(e)) from e


def _after_call(ctx, t: Tensor):
    if _eager and t.is_cuda and not _capturing():
        ctx.synchronize()


def _dtype_code(t: Tensor) -> int:
    return _DTYPES[t.dtype]


_DTYPE_NAMES = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.int64: "int64",
}


def operand(name: str, t: Tensor | None) -> _check.Operand | None:
    """A tensor as _check sees it (None: None)."""
    if t is None:
        return None
    dtype = _DTYPE_NAMES.get(t.dtype) or str(t.dtype).replace("torch.", "")
    device = t.device
    return _check.Operand(name, t.shape, t.stride(), dtype, device, device.type)


# Checked shapes by the tensors' signatures. _check's functions depend on nothing but each
# operand's shape, strides, dtype and device, so a call whose tensors have those of an earlier
# call that passed is looked up, not checked again: the checks were a fifth of a fused call's
# host time on the GPU machine (bench/python/host_overhead.py). Only plain tensors (a traced
# call's may have symbolic sizes) and only passes are kept; full, the table starts over.
_CHECKED: dict = {}
_CHECKED_MAX = 256


def checked(check, fn: str, names: tuple, tensors: tuple):
    """check(fn, *operands) of tensors (None: absent), named by names; raises as check does."""
    key = None
    if all(t is None or type(t) in _PLAIN for t in tensors):
        key = (
            check,
            *[None if t is None else (t.shape, t.stride(), t.dtype, t.device) for t in tensors],
        )
        shape = _CHECKED.get(key)
        if shape is not None:
            return shape
    shape = check(fn, *[operand(n, t) for n, t in zip(names, tensors, strict=True)])
    if key is not None:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key] = shape
    return shape


def _out(like: Tensor, shape, dtype) -> Tensor:
    """A new output on `like`'s device; shape None: an unwanted output, [0]."""
    if shape is None:
        shape = (0,)
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=like.device)
    # size= as a keyword: torch parses it faster than a positional tuple, () included
    # (bench/host_overhead.py).
    return torch.empty(size=shape, dtype=dtype, device=like.device)


def _fake(like: Tensor, shape, dtype) -> Tensor:
    return like.new_empty((0,) if shape is None else shape, dtype=dtype)


def _wanted(like: Tensor, shape, dtype) -> Tensor | None:
    """_out, but None for an unwanted output (the eager route: nothing to hand back)."""
    return None if shape is None else _out(like, shape, dtype)


def _rows_of(t: Tensor) -> int:
    """The rows a fake kernel gives its outputs (a tensor the real kernel will refuse may have
    any shape: it must not fail while tracing)."""
    return t.shape[0] if t.dim() >= 1 else 0


def _schema_of(*classes, prefix: str = "") -> str:
    """The keyword-only part of an op's schema: every field of the options classes, by name."""
    kinds = {float: "float", int: "int", bool: "bool", str: "str"}
    fields = []
    for cls in classes:
        for f in dataclasses.fields(cls):
            kind = kinds[type(f.default)]
            fields.append(f"{kind} {prefix if cls is _options.FusedOutputs else ''}{f.name}")
    return ", ".join(fields)


def _refuse_twice(grads, grad_enabled: bool):
    """The gradients backward returns; under create_graph (grad_enabled) each behind a node
    that refuses a second differentiation (they are results of the forward call: no graph
    leads from them to the inputs, and a second backward would silently give zeros)."""
    if not grad_enabled:
        return grads
    return tuple(
        _NotTwice.apply(g.detach().requires_grad_()) if isinstance(g, Tensor) else g for g in grads
    )


_DOUBLE = (
    "distil's gradients are computed in the forward call and are not differentiable: "
    "a second differentiation (create_graph=True, gradient penalties, Hessians) is not "
    "supported"
)


class _NotTwice(torch.autograd.Function):
    """g itself, behind a node whose backward refuses (the input is a detached copy made to
    require grad, so that the node is in the graph whatever g was)."""

    @staticmethod
    def forward(ctx, g):
        return g.view_as(g)

    @staticmethod
    def backward(ctx, _):
        raise _errors.make_error(_lib.ERR_UNSUPPORTED, _DOUBLE)


# ------------------------------------------------------------------------------------- jsd


class JsdTensors(NamedTuple):
    """A jsd call's tensors: student and teacher log-probs [T, V], labels [T] int64 or None,
    N as a 0-dim fp32 tensor read on the device or None."""

    input: Tensor
    target: Tensor
    labels: Tensor | None = None
    normaliser: Tensor | None = None


_JSD_NAMES = ("input", "target", "labels")


def _check_normaliser(fn, n: Tensor | None, first: Tensor):
    if n is not None:
        op = operand("normaliser", n)
        if op.dtype != "float32" or n.numel() != 1:
            raise _errors.invalid(
                f"{fn}: normaliser must be one float32 value, got {op.dtype} {tuple(n.shape)}"
            )
        _check.same_device(fn, operand("input", first), (op,))


def jsd_call(t: JsdTensors, opts: _options.JsdOptions, want_grad: bool, make, keep=False):
    """The jsd kernel: (loss, grad or make's unwanted); keep: a small GPU workspace may be the
    context's kept block (the eager route, _workspace)."""
    fn = "jsd"
    shape = checked(_check.jsd, fn, _JSD_NAMES, t[:3])
    _check_normaliser(fn, t.normaliser, t.input)
    x = t.input
    ctx = context_for(x)

    def run():
        plan = _calls.jsd_plan(ctx, shape, opts)
        loss = _out(x, (shape.rows,) if opts.reduction == "none" else (), torch.float32)
        grad = make(x, (shape.rows, shape.vocab) if want_grad else None, x.dtype)
        ws = _workspace(x, plan[1], ctx if keep else None)
        _calls.run_jsd(
            ctx,
            plan,
            _addr(ws),
            _calls.JsdAddrs(
                x.data_ptr(),
                t.target.data_ptr(),
                _addr(t.labels),
                loss.data_ptr(),
                _addr(grad),
                _addr(t.normaliser),
            ),
        )
        return loss, grad

    out = _torch_errors(run)
    _after_call(ctx, x)
    return out


def _jsd_impl(input, target, labels, normaliser_device, **kw):
    opts = _options.fields_of(_options.JsdOptions, kw)
    return jsd_call(
        JsdTensors(input, target, labels, normaliser_device), opts, kw["want_grad"], _out
    )


jsd_op = torch.library.custom_op(
    "distil::jsd",
    _jsd_impl,
    mutates_args=(),
    schema="(Tensor input, Tensor target, Tensor? labels, Tensor? normaliser_device, *, "
    f"{_schema_of(_options.JsdOptions)}, bool want_grad) -> (Tensor, Tensor)",
)


@jsd_op.register_fake
def _jsd_fake(input, target, labels, normaliser_device, **kw):
    rows = _rows_of(input)
    loss = input.new_empty((rows,) if kw["reduction"] == "none" else (), dtype=torch.float32)
    grad = input.new_empty(
        (rows, input.shape[-1]) if kw["want_grad"] and input.dim() == 2 else (0,)
    )
    return loss, grad


def _jsd_setup(ctx, inputs, keyword_only_inputs, output):
    ctx.per_row = keyword_only_inputs["reduction"] == "none"
    ctx.want_grad = keyword_only_inputs["want_grad"]
    ctx.save_for_backward(output[1] if ctx.want_grad else None)


def _jsd_backward(ctx, grad_loss, grad_grad):
    (grad,) = ctx.saved_tensors
    g = _jsd_grad(ctx, grad, grad_loss) if ctx.want_grad else None
    return (g, None, None, None)


def _jsd_grad(ctx, grad: Tensor, grad_loss: Tensor) -> Tensor:
    """The input's gradient: grad times the upstream gradient (row by row for a per-row loss),
    refused for a second differentiation."""
    enabled = torch.is_grad_enabled()
    if ctx.per_row:
        g = grad * grad_loss.detach().unsqueeze(-1).to(grad.dtype)
    else:
        g = _scaled(ctx, [grad], grad_loss.detach())[0]
    return _refuse_twice((g,), enabled)[0]


jsd_op.register_autograd(_jsd_backward, setup_context=_jsd_setup)


class _JsdFunction(torch.autograd.Function):
    """The eager route's loss: apply(input, call) with call = (JsdTensors, options,
    want_grad), one object so that apply walks no nested arguments."""

    @staticmethod
    def forward(ctx, x, call):
        t, opts, want_grad = call
        loss, grad = jsd_call(t._replace(input=x), opts, want_grad, _wanted, keep=True)
        ctx.grads = (grad,) if want_grad else ()
        ctx.per_row = opts.reduction == "none"
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grads = _take_grads(ctx)
        if not grads:
            return None, None
        return _jsd_grad(ctx, grads[0], grad_loss), None


class _Opaque:
    """Arguments autograd.Function.apply passes through without looking inside."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __iter__(self):
        return iter(self.value)


def jsd(t: JsdTensors, opts: _options.JsdOptions, want_grad: bool) -> Tensor:
    """The loss of a jsd call through the route that fits it; autograd through the gradient
    the forward call computed."""
    if not _untraced(*t):
        return jsd_op(*t, **opts.op_kwargs(), want_grad=want_grad)[0]
    if not want_grad:  # nothing for autograd to record (evaluation): the kernel alone
        return jsd_call(t, opts, False, _wanted, keep=True)[0]
    return _JsdFunction.apply(t.input, _Opaque((t, opts, want_grad)))


# ---------------------------------------------------------------------------- fused loss


class FusedTensors(NamedTuple):
    """A fused call's tensors (2-D views; None: absent): the student's hidden states, head and
    bias, the teacher's, the labels, N on the device, the teacher's head made once."""

    xs: Tensor
    ws: Tensor
    bs: Tensor | None
    xt: Tensor
    wt: Tensor
    bt: Tensor | None = None
    labels: Tensor | None = None
    normaliser: Tensor | None = None
    head: Tensor | None = None


_FUSED_NAMES = (
    "student_input",
    "student_weight",
    "student_bias",
    "teacher_input",
    "teacher_weight",
    "teacher_bias",
    "labels",
)


def fused_shape(fn: str, t: FusedTensors) -> _check.FusedShape:
    """The checked shape of a fused call's tensors."""
    shape = checked(_check.fused, fn, _FUSED_NAMES, t[:7])
    _check_normaliser(fn, t.normaliser, t.xs)
    if t.head is not None:
        head = operand("teacher_weight_e4m3", t.head)
        nbytes = _check.e4m3_head(fn, head, operand(_FUSED_NAMES[0], t.xs))
        shape = shape._replace(head_bytes=nbytes)
    return shape


def fused_call(
    t: FusedTensors,
    opts: _options.FusedOptions,
    want: _options.FusedOutputs,
    make,
    keep=False,
    shape=None,
):
    """The fused kernel: (loss parts [3] or the loss [], grad_xs, grad_Ws, grad_bs,
    student_lse, teacher_lse, student_entropy), make's unwanted where not wanted; keep as in
    jsd_call; shape: the checked shape of a call like one that passed (torch/_prepared.py),
    None: check t."""
    if shape is None:
        t, shape = _checked_call("fused_linear_jsd", t, opts)
    xs, ws = t.xs, t.ws
    ctx = context_for(xs)
    g_dtype = torch.float32 if shape.grad_weight_fp32 else ws.dtype

    def run():
        plan = _calls.fused_plan(ctx, shape, opts, want)
        loss = _out(xs, (3,) if want.parts else (), torch.float32)
        gx = make(xs, xs.shape if want.grad_hidden else None, xs.dtype)
        gw = make(ws, ws.shape if want.grad_weight else None, g_dtype)
        gb = make(ws, (ws.shape[0],) if want.grad_bias else None, g_dtype)
        lse = (xs.shape[0],) if want.lse else None
        ls, lt = make(xs, lse, torch.float32), make(xs, lse, torch.float32)
        ent = make(xs, (xs.shape[0],) if want.entropy else None, torch.float32)
        work = _workspace(xs, plan[1], ctx if keep else None)
        _calls.run_fused(
            ctx,
            plan,
            _addr(work),
            _calls.FusedAddrs(
                xs.data_ptr(),
                ws.data_ptr(),
                _addr(t.bs),
                t.xt.data_ptr(),
                t.wt.data_ptr(),
                _addr(t.bt),
                _addr(t.labels),
                loss.data_ptr(),
                _addr(gx),
                _addr(gw),
                _addr(gb),
                _addr(t.normaliser),
                _addr(ls),
                _addr(lt),
                _addr(t.head),
                _addr(ent),
            ),
        )
        return loss, gx, gw, gb, ls, lt, ent

    out = _torch_errors(run)
    _after_call(ctx, xs)
    return out


def _checked_call(fn: str, t: FusedTensors, opts: _options.FusedOptions):
    """(tensors, checked shape) of a call (_rounded_head), the hard loss given its labels."""
    if t.labels is None and opts.weight_hard != 0:
        raise _errors.invalid(
            f"{fn}: labels are None but weight_hard_loss is "
            f"{opts.weight_hard}: the hard loss needs labels (give them, or "
            "set weight_hard_loss=0)"
        )
    return _rounded_head(fn, t)


def _rounded_head(fn: str, t: FusedTensors):
    """(tensors, checked shape) of a call, an fp32 student head (and bias) beside 16-bit hidden
    states rounded to their dtype for the GEMMs, its gradients then fp32 from the library's fp32
    accumulator (grad_weight_fp32)."""
    wide = t.ws.dtype is torch.float32 and t.xs.dtype in (torch.bfloat16, torch.float16)
    if wide and (t.bs is None or t.bs.dtype is torch.float32):
        t = t._replace(ws=t.ws.to(t.xs.dtype), bs=None if t.bs is None else t.bs.to(t.xs.dtype))
        return t, fused_shape(fn, t)._replace(grad_weight_fp32=True)
    return t, fused_shape(fn, t)


def _fused_impl(*tensors, **kw):
    """fused_op's kernel: its nine tensors in FusedTensors' order, the options by name."""
    return fused_call(
        FusedTensors(*tensors),
        _options.fields_of(_options.FusedOptions, kw),
        _options.outputs_of(kw),
        _out,
    )


fused_op = torch.library.custom_op(
    "distil::fused_linear_jsd",
    _fused_impl,
    mutates_args=(),
    schema="(Tensor xs, Tensor ws, Tensor? bs, Tensor xt, Tensor wt, Tensor? bt, "
    "Tensor? labels, Tensor? normaliser_device, Tensor? teacher_weight_e4m3, *, "
    f"{_schema_of(_options.FusedOptions, _options.FusedOutputs, prefix='want_')}) -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
)


@fused_op.register_fake
def _fused_fake(*tensors, **kw):
    t = FusedTensors(*tensors)
    xs, ws = t.xs, t.ws
    want = _options.outputs_of(kw)
    lse = (_rows_of(xs),) if want.lse else None
    return (
        _fake(xs, (3,) if want.parts else (), torch.float32),
        _fake(xs, xs.shape if want.grad_hidden else None, xs.dtype),
        _fake(ws, ws.shape if want.grad_weight else None, ws.dtype),
        _fake(ws, (_rows_of(ws),) if want.grad_bias else None, ws.dtype),
        _fake(xs, lse, torch.float32),
        _fake(xs, lse, torch.float32),
        _fake(xs, (_rows_of(xs),) if want.entropy else None, torch.float32),
    )


def _fused_setup(ctx, inputs, keyword_only_inputs, output):
    want = _options.outputs_of(keyword_only_inputs)
    ctx.wants = (want.grad_hidden, want.grad_weight, want.grad_bias)
    ctx.parts = want.parts
    ctx.save_for_backward(*output[1:4])


def _fused_backward(ctx, grad_loss, *unused):
    # Only the loss is differentiable: the wrappers hand out the parts and the LSEs detached.
    enabled = torch.is_grad_enabled()
    grads = [g if want else None for g, want in zip(ctx.saved_tensors, ctx.wants, strict=False)]
    s = (grad_loss[0] if ctx.parts else grad_loss).detach()
    return _refuse_twice(tuple(_scaled(ctx, grads, s)), enabled) + (None,) * 6


fused_op.register_autograd(_fused_backward, setup_context=_fused_setup)


class _FusedFunction(torch.autograd.Function):
    """The eager route's loss: apply(xs, Ws, bs, call), call = (FusedTensors, options,
    outputs, out, shape): out, a list, receives the non-differentiable results (the loss parts
    [3] or None, student_lse, teacher_lse, student_entropy) beside autograd; shape as in
    fused_call."""

    @staticmethod
    def forward(ctx, xs, ws, bs, call):
        t, opts, want, out, shape = call
        if xs is not t.xs or ws is not t.ws or bs is not t.bs:
            t = t._replace(xs=xs, ws=ws, bs=bs)
        loss, gx, gw, gb, *rows = fused_call(t, opts, want, _wanted, keep=True, shape=shape)
        ctx.grads = (gx, gw, gb)
        if not want.parts:
            out.extend([None] + rows)
            return loss
        out.extend([loss] + rows)
        # Not a view of the parts as far as autograd knows, so the caller may modify it.
        return loss[0].detach()

    @staticmethod
    def backward(ctx, grad_loss):
        enabled = torch.is_grad_enabled()
        grads = _scaled(ctx, list(_take_grads(ctx)), grad_loss.detach())
        return _refuse_twice(tuple(grads), enabled) + (None,)


def fused(t: FusedTensors, opts: _options.FusedOptions, want: _options.FusedOutputs):
    """(loss, loss parts [3] detached or None, student_lse, teacher_lse) of a fused call; only
    the loss is differentiable; the LSEs and the entropy are None (eager) or [0] (traced)
    unless wanted."""
    if not _untraced(*t):
        out = fused_op(*t, **opts.op_kwargs(), **want.op_kwargs())
        loss = out[0][0] if want.parts else out[0]
        return (loss, out[0].detach() if want.parts else None) + tuple(out[4:])
    return fused_eager(t, opts, want)


def fused_eager(
    t: FusedTensors, opts: _options.FusedOptions, want: _options.FusedOutputs, shape=None
):
    """fused's eager route, for a call known to be _untraced; shape as in fused_call (a kept
    call's, torch/_prepared.py)."""
    if not want.grads:
        loss, _, _, _, *rows = fused_call(t, opts, want, _wanted, keep=True, shape=shape)
        return (loss[0], loss, *rows) if want.parts else (loss, None, *rows)
    out = []
    loss = _FusedFunction.apply(t.xs, t.ws, t.bs, _Opaque((t, opts, want, out, shape)))
    return (loss,) + tuple(out)


_TWICE = (
    "backward through a distil loss ran twice (retain_graph): its gradients are computed "
    "in the forward call and scaled in place; compute the loss again instead"
)


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


_PLAIN = (Tensor, torch.nn.Parameter)


def tracing() -> bool:
    """Whether torch.compile, a dispatch mode or a functorch transform sees the call."""
    return bool(
        torch.compiler.is_compiling()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._are_functorch_transforms_active()
    )


def _untraced(*tensors) -> bool:
    """Whether a call may take the autograd.Function: nothing traces and every tensor is plain."""
    if tracing():
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
