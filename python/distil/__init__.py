"""distil: LLM distillation losses (generalised JSD, fused linear distillation) in C, for Python.

Two layers:
  distil.torch      Liger-Kernel-compatible modules and functions as torch.library ops
                    (autograd, torch.compile, CUDA graphs); the one to train with.
  distil.jsd, distil.fused_linear_jsd
                    an array-agnostic functional layer over DLPack: any array with
                    __dlpack__ (NumPy on the CPU, CuPy or torch on CUDA) in, the loss and the
                    gradients out as arrays of the same framework. Synchronous: each call
                    waits for its result (and raises a bad label at once).
The math is docs/SPEC.md; `backends()` lists what this build of libdistil holds.
"""

import collections

from . import _calls, _check, _context, _dlpack, _errors, _lib, _options
from ._errors import Error, InvalidArgument, InvalidLabel, NotAvailable, OutOfMemory

__all__ = [
    "jsd",
    "fused_linear_jsd",
    "FusedResult",
    "backends",
    "version",
    "library_path",
    "Error",
    "InvalidArgument",
    "InvalidLabel",
    "OutOfMemory",
    "NotAvailable",
]
__version__ = _lib.lib.distil_version_string().decode()


def version() -> str:
    """The version of the loaded libdistil."""
    return _lib.lib.distil_version_string().decode()


def library_path() -> str:
    """The path of the loaded libdistil (see DISTIL_LIBRARY)."""
    return _lib.lib.path


def backends() -> dict:
    """{backend name: device count} of the backends compiled into libdistil."""
    out = {}
    for i in range(_lib.lib.distil_backend_count()):
        name = _lib.lib.distil_backend_name(i).decode()
        n = _lib.ctypes.c_int(0)
        _lib.lib.distil_backend_device_count(name.encode(), _lib.ctypes.byref(n))
        out[name] = n.value
    return out


FusedResult = collections.namedtuple(
    "FusedResult",
    "loss hard_loss soft_loss grad_student_hidden grad_student_weight grad_student_bias",
)

_BACKENDS = {_dlpack.KDL_CPU: "cpu", _dlpack.KDL_CUDA: "cuda", _dlpack.KDL_ROCM: "hip"}
_LEGACY_STREAM = 1  # DLPack's name for CUDA's legacy default stream


def _fail(message):
    raise _errors.make_error(_lib.ERR_INVALID_ARG, message)


def _namespace(a):
    if hasattr(a, "__array_namespace__"):
        return a.__array_namespace__()
    if type(a).__module__.split(".")[0] == "torch":
        import torch

        return torch
    _fail(
        f"{type(a).__name__}: arrays need __array_namespace__ (the array API) or must be "
        "torch tensors, so that results can be made in the same framework"
    )


class _Call:
    """Views of one call's arrays, the context, and outputs made with the inputs' namespace."""

    def __init__(self, fn, first):
        self.fn, self.views = fn, []
        self.xp = _namespace(first)

    def start(self, first: _check.Operand):
        """The context of the checked first operand's device, bound to the legacy stream."""
        backend = _BACKENDS.get(first.device[0])
        if backend is None:
            _fail(f"{self.fn}: {first.name}: arrays on {first.kind} are not supported")
        self.ctx = _context.get(backend, first.device[1] if backend != "cpu" else 0)
        self.ctx.bind_stream(0 if backend != "cpu" else None)

    def view(self, name, a):
        """The operand of a (None: None), held until the call ends."""
        if a is None:
            return None
        v = _dlpack.View(name, a, _LEGACY_STREAM)
        self.views.append(v)
        return v.operand()

    def addr(self, op):
        """The address of a viewed operand (None: 0)."""
        if op is None:
            return 0
        return next(v.addr for v in self.views if v.name == op.name)

    def empty(self, shape, code):
        names = {_lib.F32: "float32", _lib.BF16: "bfloat16", _lib.F16: "float16", "u8": "uint8"}
        dt = getattr(self.xp, names[code], None)
        if dt is None:
            _fail(f"{self.fn}: {self.xp.__name__} has no {names[code]} dtype")
        device = getattr(self.views[0].array, "device", None)
        try:
            a = self.xp.empty(shape, dtype=dt, device=device)
        except MemoryError as e:  # numpy's; torch's OutOfMemoryError is a RuntimeError
            raise _errors.make_error(_lib.ERR_OUT_OF_MEMORY, f"{self.fn}: {e}") from None
        except RuntimeError as e:
            if "out of memory" not in str(e).lower() and "allocate" not in str(e).lower():
                raise
            raise _errors.make_error(_lib.ERR_OUT_OF_MEMORY, f"{self.fn}: {e}") from None
        v = _dlpack.View("output", a, _LEGACY_STREAM)
        self.views.append(v)
        return a, (v.addr if _size(shape) else 0)

    def workspace(self, nbytes):
        """The address of nbytes of scratch in the inputs' framework, 256-byte aligned."""
        if not nbytes:
            return 0
        _, addr = self.empty((nbytes + 256,), "u8")
        return (addr + 255) // 256 * 256

    def finish(self):
        self.ctx.synchronize()

    def release(self):
        for v in self.views:
            v.release()


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def jsd(
    student_logp,
    teacher_logp,
    labels=None,
    *,
    beta=0.5,
    ignore_index=-100,
    reduction="batchmean",
    grad=True,
    divergence="jsd",
    alpha=0.1,
    normaliser=None,
):
    """Generalised JSD (docs/SPEC.md §1) of [T, V] log-probs: returns (loss, grad or None).

    divergence / alpha: a divergence of docs/SPEC.md §6 ("jsd", "forward_kl", "reverse_kl",
    "skew_kl", "skew_reverse_kl", "tvd"); normaliser: batchmean's N (> 0) instead of the count.

    loss is fp32: a scalar, or [T] for reduction "none"; grad has the inputs' dtype.
    """
    fn = "jsd"
    opts = _options.jsd_options(
        fn,
        divergence=divergence,
        beta=beta,
        alpha=alpha,
        ignore_index=ignore_index,
        reduction=reduction,
        normaliser=normaliser or None,
    )
    call = _Call(fn, student_logp)
    try:
        x = call.view("student_logp", student_logp)
        y = call.view("teacher_logp", teacher_logp)
        lab = call.view("labels", labels)
        shape = _check.jsd(fn, x, y, lab)
        call.start(x)
        rows, vocab = shape.rows, shape.vocab
        loss, loss_addr = call.empty((rows,) if reduction == "none" else (), _lib.F32)
        g, g_addr = call.empty((rows, vocab), shape.dtype) if grad else (None, 0)
        plan = _calls.jsd_plan(call.ctx, shape, opts)
        ws = call.workspace(plan[1])
        _calls.run_jsd(
            call.ctx,
            plan,
            ws,
            _calls.JsdAddrs(call.addr(x), call.addr(y), call.addr(lab), loss_addr, g_addr),
        )
        call.finish()
        return loss, g
    finally:
        call.release()


def fused_linear_jsd(
    student_hidden,
    student_weight,
    teacher_hidden,
    teacher_weight,
    labels=None,
    *,
    student_bias=None,
    teacher_bias=None,
    weight_hard=0.5,
    weight_soft=0.5,
    beta=0.5,
    temperature=1.0,
    ignore_index=-100,
    chunk_rows=0,
    grads=True,
    divergence="jsd",
    alpha=0.1,
    normaliser=None,
    temperature_squared=False,
):
    """The fused linear distillation loss (docs/SPEC.md §2) on dense 2-D arrays.

    student_hidden [T, Hs], student_weight [V, Hs], teacher_hidden [T, Ht], teacher_weight
    [V, Ht], biases [V] or None, labels [T] int64 (None only with weight_hard == 0). Returns a
    FusedResult: fp32 scalar losses (loss, hard_loss, soft_loss) and, with grads, the
    gradients of the student's hidden states, head weight and bias (None where absent).
    divergence, alpha, normaliser (N > 0 instead of the count) and temperature_squared as
    docs/SPEC.md §6 defines them.
    """
    fn = "fused_linear_jsd"
    opts = _options.fused_options(
        fn,
        weight_hard=weight_hard,
        weight_soft=weight_soft,
        beta=beta,
        temperature=temperature,
        ignore_index=ignore_index,
        chunk_rows=chunk_rows,
        divergence=divergence,
        alpha=alpha,
        normaliser=normaliser or None,
        temperature_squared=temperature_squared,
    )
    call = _Call(fn, student_hidden)
    try:
        named = (
            ("student_hidden", student_hidden),
            ("student_weight", student_weight),
            ("student_bias", student_bias),
            ("teacher_hidden", teacher_hidden),
            ("teacher_weight", teacher_weight),
            ("teacher_bias", teacher_bias),
            ("labels", labels),
        )
        ops = [call.view(n, a) for n, a in named]
        xs, ws, bs = ops[:3]
        shape = _check.fused(fn, *ops)
        if labels is None and opts.weight_hard != 0:
            _fail(f"{fn}: labels are None but weight_hard is {opts.weight_hard}")
        call.start(xs)
        outputs = _options.FusedOutputs(bool(grads), bool(grads), bool(grads) and bs is not None)
        parts, p_addr = call.empty((3,), _lib.F32)
        gx, gx_addr = call.empty(xs.shape, shape.dtype) if grads else (None, 0)
        gw, gw_addr = call.empty(ws.shape, shape.dtype) if grads else (None, 0)
        gb, gb_addr = call.empty(bs.shape, shape.dtype) if outputs.grad_bias else (None, 0)
        plan = _calls.fused_plan(call.ctx, shape, opts, outputs)
        work = call.workspace(plan[1])
        addrs = [call.addr(op) for op in ops]
        _calls.run_fused(
            call.ctx, plan, work, _calls.FusedAddrs(*addrs, p_addr, gx_addr, gw_addr, gb_addr)
        )
        call.finish()
        return FusedResult(parts[0], parts[1], parts[2], gx, gw, gb)
    finally:
        call.release()
