"""libdistil's cached top-k teacher losses (docs/SPEC.md §7) through ctypes: the two descriptor
structs, their prototypes (declared on the shared library handle), and the calls on raw
addresses that distil.torch.topk builds on. Kept apart from _lib.py / _calls.py so that the
dense losses' files do not change.
"""

import ctypes
from ctypes import POINTER, c_float, c_int, c_int64, c_size_t, c_void_p

from . import _calls, _errors, _lib

# distil_topk_tail, distil_id_dtype, distil_divergence (every one of docs/SPEC.md §6).
TAILS = {"tail": 0, "renormalise": 1, "renormalize": 1, "zero": 2}
IDS_I64, IDS_I32 = 0, 1
DIVERGENCES = _lib.DIVERGENCES


class TopkDesc(ctypes.Structure):
    """distil_topk_desc, field for field."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("rows", c_int64),
        ("vocab", c_int64),
        ("k", c_int64),
        ("student_stride", c_int64),
        ("grad_stride", c_int64),
        ("dtype", c_int),
        ("teacher_dtype", c_int),
        ("id_dtype", c_int),
        ("pad_id", c_int64),
        ("tail", c_int),
        ("divergence", c_int),
        ("beta", c_float),
        ("ignore_index", c_int64),
        ("reduction", c_int),
        ("grad_scale", c_float),
        ("normaliser", c_float),
        ("normaliser_device", c_void_p),
        ("alpha", c_float),
    ]


class FusedTopkDesc(ctypes.Structure):
    """distil_fused_linear_topk_desc, field for field."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("rows", c_int64),
        ("vocab", c_int64),
        ("student_hidden", c_int64),
        ("k", c_int64),
        ("dtype", c_int),
        ("teacher_dtype", c_int),
        ("id_dtype", c_int),
        ("pad_id", c_int64),
        ("tail", c_int),
        ("divergence", c_int),
        ("beta", c_float),
        ("weight_hard", c_float),
        ("weight_soft", c_float),
        ("temperature", c_float),
        ("ignore_index", c_int64),
        ("reduction", c_int),
        ("chunk_rows", c_int64),
        ("return_parts", c_int),
        ("normaliser", c_float),
        ("normaliser_device", c_void_p),
        ("student_weight_hidden", c_int64),
        ("alpha", c_float),
    ]


_prototypes = {
    "distil_topk_desc_init": (None, [POINTER(TopkDesc)]),
    "distil_topk": (c_int, [c_void_p, POINTER(TopkDesc)] + [c_void_p] * 6),
    "distil_topk_workspace_size": (c_int, [c_void_p, POINTER(TopkDesc), POINTER(c_size_t)]),
    "distil_fused_linear_topk_desc_init": (None, [POINTER(FusedTopkDesc)]),
    "distil_fused_linear_topk": (c_int, [c_void_p, POINTER(FusedTopkDesc)] + [c_void_p] * 10),
    "distil_fused_linear_topk_workspace_size": (
        c_int,
        [c_void_p, POINTER(FusedTopkDesc), c_int, POINTER(c_size_t)],
    ),
}


def _declare():
    lib = _lib.lib
    for name, (res, args) in _prototypes.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(
                f"distil: {lib.path} has no {name}: it was built from another "
                "distil.h than this package; rebuild it"
            ) from None
        fn.restype, fn.argtypes = res, args
    d, f = TopkDesc(), FusedTopkDesc()
    lib.distil_topk_desc_init(ctypes.byref(d))
    lib.distil_fused_linear_topk_desc_init(ctypes.byref(f))
    if d.struct_size != ctypes.sizeof(TopkDesc) or f.struct_size != ctypes.sizeof(FusedTopkDesc):
        raise ImportError(
            f"distil: {lib.path} was built from another distil.h than this package "
            "(top-k descriptor sizes differ); rebuild it"
        )


_declare()


def _choice(fn, name, value, table):
    if value not in table:
        raise _errors.make_error(
            _lib.ERR_INVALID_ARG, f"{fn}: {name} '{value}' is not one of {', '.join(table)}"
        )
    return table[value]


def _teacher(d, fn, k, teacher_dtype, id_dtype, pad_id, tail, divergence, beta, normaliser, alpha):
    d.k = _calls._int64("k", k)
    d.teacher_dtype, d.id_dtype = teacher_dtype, id_dtype
    d.pad_id = _calls._int64("pad_id", pad_id)
    d.tail = _choice(fn, "tail", tail, TAILS)
    d.divergence = _choice(fn, "divergence", divergence, DIVERGENCES)
    d.beta = beta
    d.normaliser = normaliser
    d.alpha = alpha


def topk_plan(ctx, rows, vocab, strides, dtype, teacher, ignore_index, reduction):
    """(descriptor, workspace bytes) of distil_topk; strides = (student, grad); teacher =
    (k, teacher dtype, id dtype, pad_id, tail, divergence, beta, normaliser, alpha)."""
    key = ("topk", rows, vocab, strides, dtype, teacher, ignore_index, reduction)
    plan = ctx.plans.get(key)
    if plan is None:
        d = TopkDesc()
        _lib.lib.distil_topk_desc_init(ctypes.byref(d))
        d.rows, d.vocab = rows, vocab
        d.student_stride, d.grad_stride = strides
        d.dtype = dtype
        _teacher(d, "topk", *teacher)
        d.ignore_index = _calls._int64("ignore_index", ignore_index)
        d.reduction = _choice("topk", "reduction", reduction, _lib.REDUCTIONS)
        n = ctypes.c_size_t()
        _calls._lend(ctx, 0, 0)  # the size query plans for a lent workspace: ask the whole need
        ctx.check(_lib.lib.distil_topk_workspace_size(ctx.handle, ctypes.byref(d), ctypes.byref(n)))
        d.ref = ctypes.byref(d)
        plan = _calls._remember(ctx, key, (d, n.value))
    return plan


def fused_topk_plan(
    ctx,
    rows,
    vocab,
    hs,
    dtype,
    teacher,
    weights,
    temperature,
    ignore_index,
    reduction,
    chunk_rows,
    want_grads,
    ws_hidden,
):
    """(descriptor, workspace bytes) of distil_fused_linear_topk (with the loss parts)."""
    key = (
        "fused_topk",
        rows,
        vocab,
        hs,
        dtype,
        teacher,
        weights,
        float(temperature),
        ignore_index,
        reduction,
        chunk_rows,
        want_grads,
        ws_hidden,
    )
    plan = ctx.plans.get(key)
    if plan is None:
        d = FusedTopkDesc()
        _lib.lib.distil_fused_linear_topk_desc_init(ctypes.byref(d))
        d.rows, d.vocab, d.student_hidden, d.dtype = rows, vocab, hs, dtype
        _teacher(d, "fused_linear_topk", *teacher)
        d.weight_hard, d.weight_soft = weights
        d.temperature = temperature
        d.ignore_index = _calls._int64("ignore_index", ignore_index)
        d.reduction = _choice("fused_linear_topk", "reduction", reduction, _lib.REDUCTIONS)
        d.chunk_rows = _calls._int64("chunk_rows", chunk_rows)
        d.return_parts = 1
        d.student_weight_hidden = ws_hidden
        n = ctypes.c_size_t()
        _calls._lend(ctx, 0, 0)
        ctx.check(
            _lib.lib.distil_fused_linear_topk_workspace_size(
                ctx.handle, ctypes.byref(d), 1 if want_grads else 0, ctypes.byref(n)
            )
        )
        d.ref = ctypes.byref(d)
        plan = _calls._remember(ctx, key, (d, n.value))
    return plan


def run_topk(ctx, desc, workspace, nbytes, ptrs, normaliser_device=0):
    """distil_topk; ptrs = (x, ids, logp, labels, loss, grad) addresses (0 = absent);
    normaliser_device: the address of a device fp32 N, or 0."""
    desc.normaliser_device = normaliser_device or None
    _calls._lend(ctx, workspace, nbytes)
    status = _lib.lib.distil_topk(ctx.handle, desc.ref, *[p or None for p in ptrs])
    if status:
        ctx.check(status)


def run_fused_topk(ctx, desc, workspace, nbytes, ptrs, normaliser_device=0):
    """distil_fused_linear_topk; ptrs = the 10 addresses in the C argument order."""
    desc.normaliser_device = normaliser_device or None
    _calls._lend(ctx, workspace, nbytes)
    status = _lib.lib.distil_fused_linear_topk(ctx.handle, desc.ref, *[p or None for p in ptrs])
    if status:
        ctx.check(status)
