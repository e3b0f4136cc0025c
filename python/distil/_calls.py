"""The two loss calls on raw addresses, shared by the torch ops and the DLPack layer.

Callers pass shapes, dtypes and addresses (ints, 0 for absent); this module fills (and caches)
the descriptors, lends the caller's workspace for the duration of one call, and turns statuses
into exceptions. Validation of values is the library's (docs/SPEC.md §5): its messages name the
argument. Only what ctypes would silently truncate is checked here.
"""

import ctypes

from . import _errors, _lib

_INT64 = (-(1 << 63), (1 << 63) - 1)
_PLANS_KEPT = 512  # shapes vary from batch to batch: keep the cache bounded


def _remember(ctx, key, plan):
    if len(ctx.plans) >= _PLANS_KEPT:
        ctx.plans.clear()
    ctx.plans[key] = plan
    return plan


def _int64(name, v):
    v = int(v)
    if not _INT64[0] <= v <= _INT64[1]:
        raise _errors.make_error(_lib.ERR_INVALID_ARG, f"{name} {v} does not fit in int64")
    return v


def divergence_code(name):
    """The distil_divergence of a name of _lib.DIVERGENCES (docs/SPEC.md §6)."""
    code = _lib.DIVERGENCES.get(name) if isinstance(name, str) else None
    if code is None:
        raise _errors.make_error(_lib.ERR_INVALID_ARG,
                                 f"divergence {name!r} is not one of "
                                 f"{', '.join(_lib.DIVERGENCES)}")
    return code


# The docs/SPEC.md §6 defaults: (divergence, alpha, host normaliser): JSD, 0.1, counted.
DIV_DEFAULT = (0, 0.1, 0.0)


def jsd_plan(ctx, rows, vocab, strides, dtype, beta, ignore_index, reduction, div=DIV_DEFAULT):
    """(descriptor, workspace bytes) of distil_jsd; `strides` = (student, teacher, grad);
    div = (divergence code, alpha, host normaliser or 0.0)."""
    # Numbers that compare equal hash equal (1 == 1.0): the key takes the values as given, and
    # only a new plan converts them.
    key = ("jsd", rows, vocab, strides, dtype, beta, ignore_index, reduction, div)
    plan = ctx.plans.get(key)
    if plan is None:
        div = (int(div[0]), float(div[1]), float(div[2]))
        if reduction not in _lib.REDUCTIONS:
            raise _errors.make_error(_lib.ERR_INVALID_ARG,
                                     f"jsd: reduction '{reduction}' is not one of "
                                     "batchmean, sum, none")
        d = _lib.JsdDesc()
        _lib.lib.distil_jsd_desc_init(ctypes.byref(d))
        d.rows, d.vocab = rows, vocab
        d.student_stride, d.teacher_stride, d.grad_stride = strides
        d.dtype = dtype
        d.beta = beta
        d.ignore_index = _int64("ignore_index", ignore_index)
        d.reduction = _lib.REDUCTIONS[reduction]
        d.divergence, d.alpha, d.normaliser = div
        n = ctypes.c_size_t()
        _lend(ctx, 0, 0)  # the size query plans for a lent workspace: ask for the whole need
        ctx.check(_lib.lib.distil_jsd_workspace_size(ctx.handle, ctypes.byref(d), ctypes.byref(n)))
        d.ref = ctypes.byref(d)
        plan = _remember(ctx, key, (d, n.value))
    return plan


# docs/SPEC.md §6 head options: (student_logit_scale, student_softcap, teacher_logit_scale,
# teacher_softcap, teacher_temperature), the descriptor's defaults.
DEFAULT_HEADS = (1.0, 0.0, 1.0, 0.0, 0.0)
# teacher_head_precision names (docs/SPEC.md §6) -> distil_head_precision
HEAD_PRECISIONS = {"default": 0, "fp8": 1, "fp8_e4m3": 1}


def head_precision_code(name):
    """The distil_head_precision of a name of HEAD_PRECISIONS (None: default)."""
    code = HEAD_PRECISIONS.get("default" if name is None else name) if (
        name is None or isinstance(name, str)) else None
    if code is None:
        raise _errors.make_error(_lib.ERR_INVALID_ARG,
                                 f"teacher_head_precision {name!r} is not one of "
                                 f"{', '.join(HEAD_PRECISIONS)}")
    return code


# What the workspace query of a call with Wt's rows made once sees in teacher_weight_e4m3: a
# present pointer (distil_fused_linear_jsd_workspace_size checks the head's size, not its memory).
_QUERY_HEAD = 16


def fused_plan(ctx, rows, vocab, hs, ht, dtype, weights, beta, temperature, ignore_index,
               chunk_rows, want_grads, head_shapes, div=DIV_DEFAULT, temperature_squared=False,
               heads=DEFAULT_HEADS, parts=True):
    """(descriptor, workspace bytes) of distil_fused_linear_jsd, with the loss parts (loss [3])
    unless parts=False (loss [1]).

    weights = (weight_hard, weight_soft); head_shapes = (teacher vocab, Ws columns, Wt columns)
    as the caller holds them, so that the library refuses a mismatch; div as in jsd_plan;
    temperature_squared: the soft part times tau^2 (docs/SPEC.md §6); heads as DEFAULT_HEADS
    (the head options of docs/SPEC.md §6, checked by the library; the teacher's vocabulary in
    head_shapes may differ), then the teacher head precision code and the bytes of Wt's rows
    made once (docs/SPEC.md §6; 0: none; each call passes the head itself to run_fused).
    """
    key = ("fused", rows, vocab, hs, ht, dtype, weights, beta, temperature, ignore_index,
           chunk_rows, want_grads, head_shapes, div, temperature_squared, heads, parts)
    plan = ctx.plans.get(key)  # as in jsd_plan: values as given, converted for a new plan
    if plan is None:
        div = (int(div[0]), float(div[1]), float(div[2]))
        d = _lib.FusedDesc()
        _lib.lib.distil_fused_linear_jsd_desc_init(ctypes.byref(d))
        d.rows, d.vocab, d.student_hidden, d.teacher_hidden = rows, vocab, hs, ht
        d.dtype = dtype
        d.weight_hard, d.weight_soft = weights
        d.beta = beta
        d.temperature = temperature
        d.ignore_index = _int64("ignore_index", ignore_index)
        d.chunk_rows = _int64("chunk_rows", chunk_rows)
        d.return_parts = 1 if parts else 0
        d.teacher_vocab, d.student_weight_hidden, d.teacher_weight_hidden = head_shapes
        d.divergence, d.alpha, d.normaliser = div
        d.temperature_squared = 1 if temperature_squared else 0
        (d.student_logit_scale, d.student_softcap, d.teacher_logit_scale, d.teacher_softcap,
         d.teacher_temperature) = heads[:5]
        # docs/SPEC.md §6 fp8 teacher head: heads[5], a distil_head_precision (0 = exact)
        d.teacher_head_precision = int(heads[5]) if len(heads) > 5 else 0
        head_bytes = int(heads[6]) if len(heads) > 6 else 0
        n = ctypes.c_size_t()
        _lend(ctx, 0, 0)  # the size query plans for a lent workspace: ask for the whole need
        if head_bytes:  # the query reads the head's presence and size, never its memory
            d.teacher_weight_e4m3, d.teacher_weight_e4m3_bytes = _QUERY_HEAD, head_bytes
        try:
            ctx.check(_lib.lib.distil_fused_linear_jsd_workspace_size(
                ctx.handle, ctypes.byref(d), 1 if want_grads else 0, ctypes.byref(n)))
        finally:
            d.teacher_weight_e4m3 = None  # a per-call field (run_fused)
        d.ref = ctypes.byref(d)  # made once: the descriptor is passed by reference every call
        plan = _remember(ctx, key, (d, n.value))
    return plan


def _lend(ctx, workspace, nbytes):
    """Lend ctx this call's workspace (an address of at least nbytes, or 0 for none).

    The lend is left in place after the call: when the next call's workspace is the same block
    (torch's caching allocator usually hands it out again) no library call is needed at all.
    Only what the context holds matters: a lent block the library would check outputs against
    is replaced before every call that needs one, and withdrawn before a call that needs none,
    so a freed block is never used or compared against.
    """
    want = (workspace, nbytes) if nbytes and workspace else None
    if want != ctx.lent:
        status = (_lib.lib.distil_ctx_set_workspace(ctx.handle, workspace, nbytes) if want
                  else _lib.lib.distil_ctx_set_workspace(ctx.handle, None, 0))
        ctx.lent = None
        if status:
            ctx.check(status)
        ctx.lent = want


def _normaliser_on(desc, normaliser_device):
    """N as one fp32 at normaliser_device (docs/SPEC.md §6), 0 for none, on the (cached)
    descriptor for this call only; the field is written only when it changes."""
    if normaliser_device or desc.normaliser_device:
        desc.normaliser_device = normaliser_device or None


def run_jsd(ctx, desc, workspace, nbytes, x, y, labels, loss, grad, normaliser_device=0):
    """distil_jsd on addresses (0 = absent); raises the status's exception. normaliser_device:
    see _normaliser_on."""
    _lend(ctx, workspace, nbytes)
    _normaliser_on(desc, normaliser_device)
    # Addresses as ints: a c_void_p argument takes 0 as NULL.
    status = _lib.lib.distil_jsd(ctx.handle, desc.ref, x, y, labels, loss, grad)
    if status:
        ctx.check(status)


def run_fused(ctx, desc, workspace, nbytes, ptrs, normaliser_device=0, lse=(0, 0), head=0,
              entropy=0):
    """distil_fused_linear_jsd; ptrs = the 11 addresses in the C argument order (0 = absent);
    normaliser_device as in run_jsd; lse = the addresses of the (rows) fp32 LSE outputs
    (docs/SPEC.md §6), 0 = not wanted, head the address of Wt's rows made once (the plan
    has its size; 0 = none) and entropy the (rows) fp32 student entropy's (docs/SPEC.md §6;
    0 = not wanted): they sit in the plan's descriptor for this call only."""
    _lend(ctx, workspace, nbytes)
    _normaliser_on(desc, normaliser_device)
    if lse[0] or lse[1] or head or entropy:
        desc.student_lse, desc.teacher_lse = lse[0] or None, lse[1] or None
        desc.teacher_weight_e4m3 = head or None
        desc.student_entropy = entropy or None
        try:
            status = _lib.lib.distil_fused_linear_jsd(ctx.handle, desc.ref, *ptrs)
        finally:
            desc.student_lse = desc.teacher_lse = desc.teacher_weight_e4m3 = None
            desc.student_entropy = None
    else:  # addresses as ints: a c_void_p argument takes 0 as NULL
        status = _lib.lib.distil_fused_linear_jsd(ctx.handle, desc.ref, *ptrs)
    if status:
        ctx.check(status)


def e4m3_head_size(ctx, rows, cols):
    """Bytes of distil_e4m3_head_make's head of a (rows, cols) weight on ctx's backend."""
    n = ctypes.c_size_t()
    ctx.check(_lib.lib.distil_e4m3_head_size(ctx.handle, _int64("rows", rows),
                                              _int64("cols", cols), ctypes.byref(n)))
    return n.value


def run_e4m3_head(ctx, dtype, weight, rows, cols, head, nbytes):
    """distil_e4m3_head_make on addresses; raises the status's exception."""
    status = _lib.lib.distil_e4m3_head_make(ctx.handle, dtype, weight, rows, cols, head, nbytes)
    if status:
        ctx.check(status)


def run_scale(ctx, x, dtype, count, scale):
    status = _lib.lib.distil_scale(ctx.handle, x, dtype, count, scale)
    if status:
        ctx.check(status)
