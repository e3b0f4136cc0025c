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

from . import _calls, _context, _dlpack, _errors, _lib
from ._errors import Error, InvalidArgument, InvalidLabel, NotAvailable, OutOfMemory

__all__ = ["jsd", "fused_linear_jsd", "FusedResult", "backends", "version", "library_path",
           "Error", "InvalidArgument", "InvalidLabel", "OutOfMemory", "NotAvailable"]
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
    "FusedResult", "loss hard_loss soft_loss grad_student_hidden grad_student_weight "
    "grad_student_bias")

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
    _fail(f"{type(a).__name__}: arrays need __array_namespace__ (the array API) or must be "
          "torch tensors, so that results can be made in the same framework")


class _Call:
    """Views of one call's arrays, the context, and outputs made with the inputs' namespace."""

    def __init__(self, fn, first):
        self.fn, self.views = fn, []
        self.xp = _namespace(first)
        self.first = self.view("input", first)
        backend = _BACKENDS.get(self.first.device[0])
        if backend is None:
            _fail(f"{fn}: arrays on DLPack device type {self.first.device[0]} are not supported")
        self.ctx = _context.get(backend, self.first.device[1] if backend != "cpu" else 0)
        self.ctx.bind_stream(0 if backend != "cpu" else None)

    def view(self, name, a, *, dims=None):
        v = _dlpack.View(name, a, _LEGACY_STREAM)
        self.views.append(v)
        if self.views[0] is not v and v.device != self.views[0].device:
            _fail(f"{self.fn}: {name} is on device {v.device}, the first input on "
                  f"{self.views[0].device}")
        if dims is not None and len(v.shape) != dims:
            _fail(f"{self.fn}: {name} must have {dims} dimensions, has shape {v.shape}")
        return v

    def dense_rows(self, v, dtype):
        if v.dtype != dtype or v.dtype not in (_lib.F32, _lib.BF16, _lib.F16):
            _fail(f"{self.fn}: {v.name} has another dtype than the first input (or one distil "
                  "does not take: float32, bfloat16, float16)")
        if v.shape and v.shape[-1] > 1 and v.strides[-1] != 1:
            _fail(f"{self.fn}: {v.name}: its last dimension must be contiguous")

    def empty(self, shape, code):
        names = {_lib.F32: "float32", _lib.BF16: "bfloat16", _lib.F16: "float16", "u8": "uint8"}
        dt = getattr(self.xp, names[code], None)
        if dt is None:
            _fail(f"{self.fn}: {self.xp.__name__} has no {names[code]} dtype")
        device = getattr(self.first_array(), "device", None)
        a = self.xp.empty(shape, dtype=dt, device=device)
        return a, (self.view("output", a).addr if _size(shape) else 0)

    def workspace(self, nbytes):
        """The address of nbytes of scratch in the inputs' framework, 256-byte aligned."""
        if not nbytes:
            return 0
        _, addr = self.empty((nbytes + 256,), "u8")
        return (addr + 255) // 256 * 256

    def first_array(self):
        return self.views[0].array

    def finish(self):
        self.ctx.synchronize()
        for v in self.views:
            v.release()


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _labels(call, labels, rows):
    if labels is None:
        return 0
    v = call.view("labels", labels, dims=1)
    if v.dtype != "int64" or v.shape != (rows,) or (rows > 1 and v.strides[0] != 1):
        _fail(f"{call.fn}: labels must be a dense int64 array of {rows} values, got shape "
              f"{v.shape}")
    return v.addr


def jsd(student_logp, teacher_logp, labels=None, *, beta=0.5, ignore_index=-100,
        reduction="batchmean", grad=True, divergence="jsd", alpha=0.1, normaliser=0.0):
    """Generalised JSD (docs/SPEC.md §1) of [T, V] log-probs: returns (loss, grad or None).

    divergence / alpha: a divergence of docs/SPEC.md §6 ("jsd", "forward_kl", "reverse_kl",
    "skew_kl", "skew_reverse_kl", "tvd"); normaliser: batchmean's N (> 0) instead of the count.

    loss is fp32: a scalar, or [T] for reduction "none"; grad has the inputs' dtype.
    """
    call = _Call("jsd", student_logp)
    try:
        x = call.first
        if len(x.shape) != 2:
            _fail(f"jsd: student_logp must be [T, V], has shape {x.shape}")
        y = call.view("teacher_logp", teacher_logp, dims=2)
        call.dense_rows(x, x.dtype)
        call.dense_rows(y, x.dtype)
        if y.shape != x.shape:
            _fail(f"jsd: student_logp {x.shape} and teacher_logp {y.shape} differ")
        rows, vocab = x.shape
        lab = _labels(call, labels, rows)
        loss, loss_addr = call.empty((rows,) if reduction == "none" else (), _lib.F32)
        g, g_addr = call.empty((rows, vocab), x.dtype) if grad else (None, 0)
        strides = (x.strides[0] if rows > 1 else vocab, y.strides[0] if rows > 1 else vocab,
                   vocab)
        desc, nbytes = _calls.jsd_plan(call.ctx, rows, vocab, strides, x.dtype, beta,
                                       ignore_index, reduction,
                                       (_calls.divergence_code(divergence), alpha, normaliser))
        ws = call.workspace(nbytes)
        _calls.run_jsd(call.ctx, desc, ws, nbytes, x.addr, y.addr, lab, loss_addr, g_addr)
        call.finish()
        return loss, g
    finally:
        for v in call.views:
            v.release()


def fused_linear_jsd(student_hidden, student_weight, teacher_hidden, teacher_weight,
                     labels=None, *, student_bias=None, teacher_bias=None, weight_hard=0.5,
                     weight_soft=0.5, beta=0.5, temperature=1.0, ignore_index=-100,
                     chunk_rows=0, grads=True, divergence="jsd", alpha=0.1, normaliser=0.0,
                     temperature_squared=False):
    """The fused linear distillation loss (docs/SPEC.md §2) on dense 2-D arrays.

    student_hidden [T, Hs], student_weight [V, Hs], teacher_hidden [T, Ht], teacher_weight
    [V, Ht], biases [V] or None, labels [T] int64 (None only with weight_hard == 0). Returns a
    FusedResult: fp32 scalar losses (loss, hard_loss, soft_loss) and, with grads, the
    gradients of the student's hidden states, head weight and bias (None where absent).
    divergence, alpha, normaliser (N > 0 instead of the count) and temperature_squared as
    docs/SPEC.md §6 defines them.
    """
    call = _Call("fused_linear_jsd", student_hidden)
    try:
        xs = call.first
        named = [("student_weight", student_weight), ("teacher_hidden", teacher_hidden),
                 ("teacher_weight", teacher_weight)]
        ws, xt, wt = (call.view(n, a, dims=2) for n, a in named)
        bs = call.view("student_bias", student_bias, dims=1) if student_bias is not None else None
        bt = call.view("teacher_bias", teacher_bias, dims=1) if teacher_bias is not None else None
        if len(xs.shape) != 2:
            _fail(f"fused_linear_jsd: student_hidden must be [T, Hs], has shape {xs.shape}")
        for v in (xs, ws, xt, wt, bs, bt):
            if v is not None:
                call.dense_rows(v, xs.dtype)
                if _size(v.shape) > 1 and v.strides != _dense(v.shape):
                    _fail(f"fused_linear_jsd: {v.name} must be dense (C-contiguous)")
        rows, hs = xs.shape
        if labels is None and weight_hard != 0:
            _fail("fused_linear_jsd: labels are None but weight_hard is not 0")
        lab = _labels(call, labels, rows)
        parts, p_addr = call.empty((3,), _lib.F32)
        gx, gx_addr = call.empty(xs.shape, xs.dtype) if grads else (None, 0)
        gw, gw_addr = call.empty(ws.shape, xs.dtype) if grads else (None, 0)
        gb, gb_addr = call.empty(bs.shape, xs.dtype) if grads and bs else (None, 0)
        head = (wt.shape[0], ws.shape[1], wt.shape[1])
        desc, nbytes = _calls.fused_plan(call.ctx, rows, ws.shape[0], hs, xt.shape[1], xs.dtype,
                                         (weight_hard, weight_soft), beta, temperature,
                                         ignore_index, chunk_rows, bool(grads), head,
                                         (_calls.divergence_code(divergence), alpha, normaliser),
                                         temperature_squared)
        work = call.workspace(nbytes)
        _calls.run_fused(call.ctx, desc, work, nbytes,
                         [xs.addr, ws.addr, bs.addr if bs else 0, xt.addr, wt.addr,
                          bt.addr if bt else 0, lab, p_addr, gx_addr, gw_addr, gb_addr])
        call.finish()
        return FusedResult(parts[0], parts[1], parts[2], gx, gw, gb)
    finally:
        for v in call.views:
            v.release()


def _dense(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))
