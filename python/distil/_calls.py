"""The two loss calls on raw addresses, shared by the torch ops and the DLPack layer.

Callers pass a checked shape (_check.py), an options object (_options.py) and addresses (ints,
0 for absent); this module fills (and caches) the descriptors, lends the caller's workspace for
the duration of one call, and turns statuses into exceptions. Validation of values is the
library's (docs/SPEC.md §5): its messages name the argument.
"""

import ctypes
from typing import NamedTuple

from . import _check, _errors, _lib, _options

_PLANS_KEPT = 512  # shapes vary from batch to batch: keep the cache bounded


class JsdAddrs(NamedTuple):
    """distil_jsd's addresses (0: absent); normaliser: N as one fp32 read on the device."""

    student: int
    teacher: int
    labels: int
    loss: int
    grad: int
    normaliser: int = 0


class FusedAddrs(NamedTuple):
    """distil_fused_linear_jsd's addresses (0: absent): the eleven arguments in the C order,
    then the descriptor's per-call fields (docs/SPEC.md §6): N on the device, the rows' LSE
    outputs [T] fp32, the teacher's head made once."""

    xs: int
    ws: int
    bs: int
    xt: int
    wt: int
    bt: int
    labels: int
    loss: int
    grad_xs: int
    grad_ws: int
    grad_bs: int
    normaliser: int = 0
    student_lse: int = 0
    teacher_lse: int = 0
    head: int = 0
    student_entropy: int = 0

    def call_args(self) -> tuple:
        return self[:11]


def _int64(name, v):
    """v as an int that ctypes would not truncate (the top-k descriptors' integers)."""
    v = int(v)
    if not -(1 << 63) <= v < (1 << 63):
        raise _errors.invalid(f"{name} {v} does not fit in int64")
    return v


def _remember(ctx, key, plan):
    if len(ctx.plans) >= _PLANS_KEPT:
        ctx.plans.clear()
    ctx.plans[key] = plan
    return plan


def jsd_plan(ctx, shape: _check.JsdShape, opts: _options.JsdOptions):
    """(descriptor, workspace bytes) of distil_jsd for a checked shape and its options."""
    key = ("jsd", shape, opts)
    plan = ctx.plans.get(key)
    if plan is None:
        d = _lib.JsdDesc()
        _lib.lib.distil_jsd_desc_init(ctypes.byref(d))
        d.rows, d.vocab = shape.rows, shape.vocab
        d.student_stride, d.teacher_stride = shape.student_stride, shape.teacher_stride
        d.grad_stride = shape.vocab
        d.dtype = shape.dtype
        d.beta = opts.beta
        d.ignore_index = opts.ignore_index
        d.reduction = _lib.REDUCTIONS[opts.reduction]
        d.divergence, d.alpha, d.normaliser = opts.divergence, opts.alpha, opts.normaliser
        n = ctypes.c_size_t()
        _lend(ctx, 0, 0)  # the size query plans for a lent workspace: ask for the whole need
        ctx.check(_lib.lib.distil_jsd_workspace_size(ctx.handle, ctypes.byref(d), ctypes.byref(n)))
        d.ref = ctypes.byref(d)
        plan = _remember(ctx, key, (d, n.value))
    return plan


# What the workspace query of a call with Wt's rows made once sees in teacher_weight_e4m3: a
# present pointer (distil_fused_linear_jsd_workspace_size checks the head's size, not its memory).
_QUERY_HEAD = 16


def fused_plan(
    ctx, shape: _check.FusedShape, opts: _options.FusedOptions, outputs: _options.FusedOutputs
):
    """(descriptor, workspace bytes) of distil_fused_linear_jsd for a checked shape, its
    options and what it writes (the loss parts [3] or the loss alone, gradients or none)."""
    key = ("fused", shape, opts, outputs.grads, outputs.parts)
    plan = ctx.plans.get(key)
    if plan is None:
        d = _lib.FusedDesc()
        _lib.lib.distil_fused_linear_jsd_desc_init(ctypes.byref(d))
        d.rows, d.vocab = shape.rows, shape.vocab
        d.student_hidden, d.teacher_hidden = shape.student_hidden, shape.teacher_hidden
        d.dtype = shape.dtype
        d.teacher_vocab = shape.teacher_vocab
        d.grad_weight_fp32 = 1 if shape.grad_weight_fp32 else 0
        d.student_weight_hidden, d.teacher_weight_hidden = (
            shape.student_hidden,
            shape.teacher_hidden,
        )
        _fill_fused(d, opts)
        d.return_parts = 1 if outputs.parts else 0
        n = ctypes.c_size_t()
        _lend(ctx, 0, 0)  # the size query plans for a lent workspace: ask for the whole need
        if shape.head_bytes:  # the query reads the head's presence and size, never its memory
            d.teacher_weight_e4m3, d.teacher_weight_e4m3_bytes = _QUERY_HEAD, shape.head_bytes
        try:
            ctx.check(
                _lib.lib.distil_fused_linear_jsd_workspace_size(
                    ctx.handle, ctypes.byref(d), 1 if outputs.grads else 0, ctypes.byref(n)
                )
            )
        finally:
            d.teacher_weight_e4m3 = None  # a per-call field (run_fused)
        d.ref = ctypes.byref(d)  # made once: the descriptor is passed by reference every call
        plan = _remember(ctx, key, (d, n.value))
    return plan


def _fill_fused(d, opts: _options.FusedOptions):
    """The descriptor's fields of the options, by name (FusedOptions mirrors them)."""
    d.weight_hard, d.weight_soft = opts.weight_hard, opts.weight_soft
    d.beta, d.temperature = opts.beta, opts.temperature
    d.ignore_index, d.chunk_rows = opts.ignore_index, opts.chunk_rows
    d.divergence, d.alpha, d.normaliser = opts.divergence, opts.alpha, opts.normaliser
    d.temperature_squared = 1 if opts.temperature_squared else 0
    d.student_logit_scale, d.student_softcap = opts.student_logit_scale, opts.student_softcap
    d.teacher_logit_scale, d.teacher_softcap = opts.teacher_logit_scale, opts.teacher_softcap
    d.teacher_temperature = opts.teacher_temperature
    d.teacher_head_precision = opts.teacher_head_precision


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
        status = (
            _lib.lib.distil_ctx_set_workspace(ctx.handle, workspace, nbytes)
            if want
            else _lib.lib.distil_ctx_set_workspace(ctx.handle, None, 0)
        )
        ctx.lent = None
        if status:
            ctx.check(status)
        ctx.lent = want


def _normaliser_on(desc, normaliser_device):
    """N as one fp32 at normaliser_device (docs/SPEC.md §6), 0 for none, on the (cached)
    descriptor for this call only; the field is written only when it changes."""
    if normaliser_device or desc.normaliser_device:
        desc.normaliser_device = normaliser_device or None


def run_jsd(ctx, plan, workspace, addrs: JsdAddrs):
    """distil_jsd of a plan on a workspace (address, 0 for none); raises the status's
    exception."""
    desc, nbytes = plan
    _lend(ctx, workspace, nbytes)
    _normaliser_on(desc, addrs.normaliser)
    status = _lib.lib.distil_jsd(
        ctx.handle, desc.ref, addrs.student, addrs.teacher, addrs.labels, addrs.loss, addrs.grad
    )
    if status:
        ctx.check(status)


def run_fused(ctx, plan, workspace, addrs: FusedAddrs):
    """distil_fused_linear_jsd of a plan; the per-call fields of addrs sit in the plan's
    descriptor for this call only."""
    desc, nbytes = plan
    _lend(ctx, workspace, nbytes)
    _normaliser_on(desc, addrs.normaliser)
    if addrs.student_lse or addrs.teacher_lse or addrs.head or addrs.student_entropy:
        desc.student_lse, desc.teacher_lse = addrs.student_lse or None, addrs.teacher_lse or None
        desc.teacher_weight_e4m3 = addrs.head or None
        desc.student_entropy = addrs.student_entropy or None
        try:
            status = _lib.lib.distil_fused_linear_jsd(ctx.handle, desc.ref, *addrs.call_args())
        finally:
            desc.student_lse = desc.teacher_lse = desc.teacher_weight_e4m3 = None
            desc.student_entropy = None
    else:  # addresses as ints: a c_void_p argument takes 0 as NULL
        status = _lib.lib.distil_fused_linear_jsd(ctx.handle, desc.ref, *addrs.call_args())
    if status:
        ctx.check(status)


def e4m3_head_size(ctx, rows, cols):
    """Bytes of distil_e4m3_head_make's head of a (rows, cols) weight on ctx's backend."""
    n = ctypes.c_size_t()
    ctx.check(_lib.lib.distil_e4m3_head_size(ctx.handle, rows, cols, ctypes.byref(n)))
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
