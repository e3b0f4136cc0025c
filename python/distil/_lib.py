"""libdistil through ctypes: finding the library, its prototypes and descriptor structs.

ctypes rather than cffi or a C extension: it is in the standard library, needs no compiler at
install time and no libpython at link time, so one ``py3-none`` wheel serves every Python and
every torch. A call costs about a microsecond, well inside the per-call overhead the package
aims at. The library is found, in order, at ``$DISTIL_LIBRARY`` (a path to another build's
``libdistil.so``) or beside this file (where ``pip install .`` puts it).
"""

import ctypes
import os
from ctypes import POINTER, c_char_p, c_float, c_int, c_int64, c_size_t, c_uint, c_void_p

from . import _loader

# Status codes of distil.h (pinned there forever).
OK = 0
ERR_INVALID_ARG = 1
ERR_UNSUPPORTED = 2
ERR_OUT_OF_MEMORY = 3
ERR_BACKEND = 4
ERR_NOT_AVAILABLE = 5
ERR_INVALID_LABEL = 6
ERR_WORKSPACE = 7
ERR_VERSION = 8
ERR_BUSY = 9

# distil_dtype and distil_reduction.
F32, BF16, F16 = 0, 1, 2

REDUCTIONS = {"batchmean": 0, "sum": 1, "none": 2}

# DISTIL_STREAM_OWN: the context's own stream, (void *)(intptr_t)-1.
STREAM_OWN = c_void_p(-1 & ((1 << (8 * ctypes.sizeof(c_void_p))) - 1))


class JsdDesc(ctypes.Structure):
    """distil_jsd_desc, field for field."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("rows", c_int64),
        ("vocab", c_int64),
        ("student_stride", c_int64),
        ("teacher_stride", c_int64),
        ("grad_stride", c_int64),
        ("dtype", c_int),
        ("beta", c_float),
        ("ignore_index", c_int64),
        ("reduction", c_int),
        ("grad_scale", c_float),
        ("divergence", c_int),
        ("alpha", c_float),
        ("normaliser", c_float),
        ("normaliser_device", c_void_p),
    ]


class FusedDesc(ctypes.Structure):
    """distil_fused_linear_jsd_desc, field for field."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("rows", c_int64),
        ("vocab", c_int64),
        ("student_hidden", c_int64),
        ("teacher_hidden", c_int64),
        ("dtype", c_int),
        ("weight_hard", c_float),
        ("weight_soft", c_float),
        ("beta", c_float),
        ("temperature", c_float),
        ("ignore_index", c_int64),
        ("chunk_rows", c_int64),
        ("return_parts", c_int),
        ("teacher_vocab", c_int64),
        ("student_weight_hidden", c_int64),
        ("teacher_weight_hidden", c_int64),
        ("divergence", c_int),
        ("alpha", c_float),
        ("teacher_temperature", c_float),
        ("temperature_squared", c_int),
        ("normaliser", c_float),
        ("normaliser_device", c_void_p),
        ("student_logit_scale", c_float),
        ("student_softcap", c_float),
        ("teacher_logit_scale", c_float),
        ("teacher_softcap", c_float),
        ("student_lse", c_void_p),
        ("teacher_lse", c_void_p),
        ("teacher_head_precision", c_int),  # docs/SPEC.md §6 fp8 teacher head
        ("teacher_weight_e4m3", c_void_p),  # ... Wt's rows made once (distil_e4m3_head_make)
        ("teacher_weight_e4m3_bytes", c_size_t),
        ("student_entropy", c_void_p),  # docs/SPEC.md §6 student entropy
        ("grad_weight_fp32", c_int),  # grad_student_weight / _bias fp32 beside 16-bit inputs
    ]


# name: (restype, argtypes)
_prototypes = {
    "distil_version_string": (c_char_p, []),
    "distil_status_string": (c_char_p, [c_int]),
    "distil_divergence_name": (c_char_p, [c_int]),
    "distil_backend_count": (c_int, []),
    "distil_backend_name": (c_char_p, [c_int]),
    "distil_backend_device_count": (c_int, [c_char_p, POINTER(c_int)]),
    "distil_ctx_create": (c_int, [POINTER(c_void_p), c_char_p, c_int]),
    "distil_ctx_destroy": (None, [c_void_p]),
    "distil_ctx_backend_name": (c_char_p, [c_void_p]),
    "distil_ctx_device_name": (c_char_p, [c_void_p]),
    "distil_ctx_last_error": (c_char_p, [c_void_p]),
    "distil_ctx_set_stream": (c_int, [c_void_p, c_void_p]),
    "distil_ctx_synchronize": (c_int, [c_void_p]),
    "distil_ctx_set_workspace": (c_int, [c_void_p, c_void_p, c_size_t]),
    "distil_malloc": (c_int, [c_void_p, c_size_t, POINTER(c_void_p)]),
    "distil_free": (None, [c_void_p, c_void_p]),
    "distil_jsd_desc_init": (None, [POINTER(JsdDesc)]),
    "distil_jsd": (
        c_int,
        [c_void_p, POINTER(JsdDesc), c_void_p, c_void_p, c_void_p, c_void_p, c_void_p],
    ),
    "distil_jsd_workspace_size": (c_int, [c_void_p, POINTER(JsdDesc), POINTER(c_size_t)]),
    "distil_fused_linear_jsd_desc_init": (None, [POINTER(FusedDesc)]),
    "distil_fused_linear_jsd": (c_int, [c_void_p, POINTER(FusedDesc)] + [c_void_p] * 11),
    "distil_fused_linear_jsd_workspace_size": (
        c_int,
        [c_void_p, POINTER(FusedDesc), c_int, POINTER(c_size_t)],
    ),
    "distil_scale": (c_int, [c_void_p, c_void_p, c_int, c_int64, c_void_p]),
    "distil_e4m3_head_size": (c_int, [c_void_p, c_int64, c_int64, POINTER(c_size_t)]),
    "distil_e4m3_head_make": (
        c_int,
        [c_void_p, c_int, c_void_p, c_int64, c_int64, c_void_p, c_size_t],
    ),
    "distil_version_number": (c_uint, []),
}


def _candidates():
    return _loader.candidates()  # which of the package's libraries (torch's CUDA major), and why


def _open(path):
    try:
        return ctypes.CDLL(path)
    except OSError as first:
        # A cuda build needs libcudart / libcublas; torch's CUDA wheels carry them, and
        # `import torch` loads them under the same sonames.
        try:
            import torch  # noqa: F401
        except ImportError:
            raise first from None
        return ctypes.CDLL(path)


def _declare(lib):
    for name, (res, args) in _prototypes.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def load():
    """Open libdistil and declare its prototypes; ImportError with the reason if it cannot."""
    errors = []
    for path in _candidates():
        if not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            lib = _open(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            _loader.failed(path, e)
            continue
        try:
            _declare(lib)
        except AttributeError as e:  # another shared library: it lacks distil's entry points
            errors.append(f"{path}: not libdistil ({e})")
            continue
        lib.path = path
        return lib
    hint = (
        "set DISTIL_LIBRARY to a libdistil.so, or reinstall with `pip install .`"
        if "DISTIL_LIBRARY" not in os.environ
        else "check DISTIL_LIBRARY"
    )
    raise ImportError("distil: cannot load libdistil (" + "; ".join(errors) + "); " + hint)


lib = load()


def _check_structs():
    """The descriptors' sizes must match the library's, or every call would be refused."""
    d = JsdDesc()
    lib.distil_jsd_desc_init(ctypes.byref(d))
    f = FusedDesc()
    lib.distil_fused_linear_jsd_desc_init(ctypes.byref(f))
    if d.struct_size != ctypes.sizeof(JsdDesc) or f.struct_size != ctypes.sizeof(FusedDesc):
        raise ImportError(
            f"distil: {lib.path} was built from another distil.h than this "
            "package (descriptor sizes differ); rebuild it"
        )


_check_structs()


def _divergences():
    """{name: distil_divergence} of every divergence the library has (distil_divergence_name of
    0, 1, ... up to the first NULL), in the order of their values."""
    names = {}
    while True:
        name = lib.distil_divergence_name(len(names))
        if name is None:
            return names
        names[name.decode()] = len(names)


# distil_divergence (docs/SPEC.md §6) by the names the Python layers take: the library's own.
DIVERGENCES = _divergences()
