"""Call sites: what a loss module's earlier calls checked and planned, reused for the next one.

A module's forward takes the checked path (distil.torch.functional: checks, plan lookup,
autograd.Function) the first time it sees a kind of call, and records the result here as a
site: the call's key (each tensor's type, shape, dtype, device and layout, which gradients are
wanted, the thread) and what the checked path derived from it (context, descriptor, workspace
bytes, output shapes). A later call with the same key skips straight to the outputs and the
library call: every check the checked path made depends only on what the key holds, and the
library checks the values and pointers again itself (docs/SPEC.md §5). Host time per call is
what this buys (bench/python/host_overhead.py; the checked path costs about twice the library call's
host time on a GPU).

A module keeps up to _SITES_KEPT sites (batches of varying length give each length its own) and
drops them all when one of its attributes is set (the options are part of every site). Only
plain eager calls take a site: traced calls (torch.compile, dispatch modes, functorch) and
calls on tensor subclasses always take the checked path, which routes them to the registered
ops. Options a site does not cover (a normaliser given per call or on the device, the LSEs,
reduction="none") take the checked path every time.
"""

import ctypes
from threading import get_ident
from typing import Optional

import torch
from torch import Tensor

from .. import _calls, _lib
from . import _ops

_SITES_KEPT = 64
_PLAIN = _ops._PLAIN


def _tensor_key(t: Optional[Tensor]) -> tuple:
    """What the checked path reads of one tensor: None for an absent one."""
    if t is None:
        return None
    return (type(t), t.shape, t.dtype, t.get_device(), t.is_contiguous(), t.requires_grad)


class Sites(dict):
    """A module's sites by key, bounded (a dict: the lookup is dict.get, no Python frame)."""

    __slots__ = ()

    def put(self, key, site):
        """Keep site under key; None (a call no site reproduces) keeps nothing."""
        if site is None:
            return
        if len(self) >= _SITES_KEPT:
            self.clear()
        self[key] = site


def _own_descriptor(desc):
    """A copy of a plan's descriptor that only the site uses, its per-call fields (a normaliser
    on the device, the LSE outputs) cleared: the plan's own is shared with the checked path,
    which sets those for one call, so a site on the plan's descriptor would have to clear them
    before every call."""
    mine = type(desc).from_buffer_copy(desc)
    for name in ("normaliser_device", "student_lse", "teacher_lse", "student_entropy"):
        if hasattr(mine, name):
            setattr(mine, name, None)
    mine.ref = ctypes.byref(mine)
    return mine


class _Site:
    """What both kinds of site hold: the context (device index, or -1 for the cpu), the site's
    own descriptor and its workspace bytes, the loss's template, the outputs wanted, and the
    call in flight (`call`: the arguments beyond the student's tensors; autograd.Function.apply
    walks nested arguments, about a third of its host time, bench/python/host_overhead.py). A site
    serves one thread (the key holds it), so one call at a time."""

    __slots__ = ("ctx", "index", "desc", "nbytes", "loss", "want", "grads", "call")

    def __init__(self, ctx, index, plan, loss, want):
        self.ctx, self.index = ctx, index
        self.desc = _own_descriptor(plan[0])
        self.nbytes = plan[1]
        self.loss = loss  # the loss's template: its shape, dtype and device
        self.want = want
        self.grads = any(want) if isinstance(want, tuple) else bool(want)
        self.call = None


def _bind(site: _Site):
    """The site's context, bound to the current stream of this call (docs/SPEC.md §5)."""
    ctx = site.ctx
    if site.index >= 0:  # Context.bind_stream's own compare, without its frame (host time)
        stream = _ops._raw_stream(site.index)
        if stream != ctx._stream:  # (the property costs a frame)
            ctx.bind_stream(stream)
    return ctx


def _lend_workspace(site: _Site, ctx, lead: Tensor):
    """Lend ctx the call's workspace (docs/SPEC.md §5); returns the workspace tensor (None for
    none), which must live until the call is queued."""
    nbytes = site.nbytes
    work = _ops._workspace(lead, nbytes, ctx) if nbytes else None
    _calls._lend(ctx, 0 if work is None else work.data_ptr(), nbytes)
    return work


def _finish(ctx, status: int, lead: Tensor) -> None:
    """After a site's call that failed or runs in the opt-in eager mode (its callers test
    `status or _ops._eager` first: the usual call takes no frame here): the status raised as
    the checked path raises it, the eager mode's wait."""
    if status:
        _ops._torch_errors(ctx.check, status)
    _ops._after_call(ctx, lead)


def _poisoned(t: Tensor) -> Tensor:
    return torch.full_like(t, float("nan"))


def _factory():
    """The outputs' factory: empty_like of a dense tensor is the cheapest there is (about half
    of torch.empty with a size, a dtype and a device on the H200 machine, docs/PERFORMANCE.md); the
    tests' poisoned outputs as in _ops."""
    return _poisoned if _ops.POISON_OUTPUTS else torch.empty_like


def _site_context(key, lead, tensors, labels):
    """(context, device index or -1 for the cpu) for a site of a call the checked path just
    ran on these tensors (lead the first), or None when a site would not reproduce it: traced
    (key None), a tensor that is not plain or not dense, labels other than int64 (the checked
    path converts those)."""
    if key is None:
        return None
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or not t.is_contiguous()):
            return None
    if labels is not None and labels.dtype is not torch.int64:
        return None
    return _ops.context_for(lead), (-1 if lead.is_cpu else lead.get_device())


def _labels_key(labels: Optional[Tensor]):
    """labels' part of a key (integers never require a gradient)."""
    if labels is None:
        return None
    return (type(labels), labels.shape, labels.dtype, labels.get_device(),
            labels.is_contiguous())


# ---------------------------------------------------------------------------- fused loss


class FusedSite(_Site):
    """One kind of fused call (FusedLinearJSDLoss, FusedLinearJSD): the plan the checked path
    made for it and the shapes of its outputs; want = (grad_xs, grad_Ws, grad_bs) wanted, the
    loss's template an fp32 [3] (the parts) or []; out: the parts of the call in flight."""

    __slots__ = ("parts", "out")

    def __init__(self, ctx, index, plan, loss, want):
        super().__init__(ctx, index, plan, loss, want)
        self.parts = loss.dim() == 1
        self.out = None


def fused_key(xs, ws, bs, xt, wt, bt, labels) -> Optional[tuple]:
    """The key of a fused call, or None when it may not take a site (traced). The student's
    and the teacher's tensors as _tensor_key would give them, written out (the call's host
    time); the biases and labels, often absent, through it."""
    if not _ops._untraced():  # tracing only: the tensors' types are in the key
        return None
    return (type(xs), xs.shape, xs.dtype, xs.get_device(), xs.is_contiguous(), xs.requires_grad,
            type(ws), ws.shape, ws.dtype, ws.get_device(), ws.is_contiguous(), ws.requires_grad,
            type(xt), xt.shape, xt.dtype, xt.get_device(), xt.is_contiguous(),
            type(wt), wt.shape, wt.dtype, wt.get_device(), wt.is_contiguous(),
            _labels_key(labels), None if bs is None else _tensor_key(bs),
            None if bt is None else _tensor_key(bt), torch.is_grad_enabled(), get_ident())


def fused_site(key, xs, ws, bs, xt, wt, labels, args, parts) -> Optional[FusedSite]:
    """A site for a call that the checked path just ran with the op arguments args (its 2-D
    views, fused_op's order), or None when the call is one a site does not reproduce: a
    normaliser on the device, the LSEs or a head made once (per-call fields of the descriptor),
    or a tensor that is not plain, not dense or not as the library takes it (the checked path
    converts those)."""
    if (args[_ops.FUSED_N_DEVICE] is not None or args[_ops.FUSED_WANT_LSE]
            or args[_ops.FUSED_E4M3_HEAD] is not None or args[_ops.FUSED_WANT_ENTROPY]):
        return None
    found = _site_context(key, xs, (xs, ws, bs, xt, wt, labels), labels)
    if found is None:
        return None
    ctx, index = found
    plan = _ops.fused_plan_of(ctx, args, parts)  # the checked path's own plan (cached)
    loss = torch.empty((3,) if parts else (), dtype=torch.float32, device=xs.device)
    return FusedSite(ctx, index, plan, loss, args[_ops.FUSED_WANTS])


def fused_run(site: FusedSite, xs, ws, bs, xt, wt, bt, labels):
    """The site's call: (loss or parts, grad_xs, grad_Ws, grad_bs), unwanted ones None.
    Few frames (the call's host time, measured on the H200 machine in this form,
    docs/PERFORMANCE.md): xs, Ws, Xt, Wt are dense and present (the key); the caller's optional
    tensors give 0 when absent or empty, _ops._addr written out; a new output's address is 0
    when it is empty (torch allocates nothing for 0 bytes)."""
    ctx = _bind(site)
    work = _lend_workspace(site, ctx, xs)
    like = _factory()
    out = like(site.loss)
    wx, ww, wb = site.want
    gx = like(xs) if wx else None  # xs, Ws, bs are dense (the key), so are these
    gw = like(ws) if ww else None
    gb = like(bs) if wb else None
    status = _lib.lib.distil_fused_linear_jsd(
        ctx.handle, site.desc.ref, xs.data_ptr(), ws.data_ptr(),
        bs.data_ptr() if bs is not None and bs.numel() else 0, xt.data_ptr(), wt.data_ptr(),
        bt.data_ptr() if bt is not None and bt.numel() else 0,
        labels.data_ptr() if labels is not None and labels.numel() else 0, out.data_ptr(),
        0 if gx is None else gx.data_ptr(), 0 if gw is None else gw.data_ptr(),
        0 if gb is None else gb.data_ptr())
    del work  # the call is queued
    if status or _ops._eager:
        _finish(ctx, status, xs)
    return out, gx, gw, gb


class _FusedSiteFunction(torch.autograd.Function):
    """The loss of a fused site's call: apply(xs, Ws, bs, site), the rest of the call on
    site.call; the parts [3] (or None) go to site.out beside autograd."""

    @staticmethod
    def forward(ctx, xs, ws, bs, site):
        xt, wt, bt, labels = site.call
        loss, gx, gw, gb = fused_run(site, xs, ws, bs, xt, wt, bt, labels)
        ctx.grads = (gx, gw, gb)
        if loss.dim() == 0:
            return loss
        site.out = loss
        return loss[0].detach()  # not a view of the parts as far as autograd knows

    @staticmethod
    def backward(ctx, grad_loss):
        grads = list(_ops._take_grads(ctx))
        return tuple(_ops._scaled(ctx, grads, grad_loss)) + (None,)


def fused_loss(site: FusedSite, xs, ws, bs, xt, wt, bt, labels):
    """(loss, parts [3] detached or None) of a site's call."""
    if site.grads:
        site.call = (xt, wt, bt, labels)
        try:
            loss = _FusedSiteFunction.apply(xs, ws, bs, site)
        finally:
            site.call = None  # the site keeps no tensor of a call
        parts, site.out = site.out, None
        return loss, parts
    loss = fused_run(site, xs, ws, bs, xt, wt, bt, labels)[0]
    return (loss[0], loss) if site.parts else (loss, None)


# ------------------------------------------------------------------------------------- jsd


class JsdSite(_Site):
    """One kind of JSD call (distil.torch.JSD with a batchmean or sum reduction); want: the
    gradient; the loss's template an fp32 [] on the device."""

    __slots__ = ()


def jsd_key(x, y, labels) -> Optional[tuple]:
    """The key of a JSD call, or None when it may not take a site (traced)."""
    if not _ops._untraced():
        return None
    return (type(x), x.shape, x.dtype, x.get_device(), x.is_contiguous(), x.requires_grad,
            type(y), y.shape, y.dtype, y.get_device(), y.is_contiguous(), y.requires_grad,
            _labels_key(labels), torch.is_grad_enabled(), get_ident())


def jsd_site(key, x, y, labels, args) -> Optional[JsdSite]:
    """A site for a JSD call the checked path just ran with the op arguments args (jsd_op's
    order), as fused_site: not for reduction "none" (a per-row backward) or a normaliser on
    the device."""
    if args[_ops.JSD_REDUCTION] == "none" or args[_ops.JSD_N_DEVICE] is not None:
        return None
    found = _site_context(key, x, (x, y, labels), labels)
    if found is None:
        return None
    ctx, index = found
    return JsdSite(ctx, index, _ops.jsd_plan_of(ctx, args),
                   torch.empty((), dtype=torch.float32, device=x.device), args[_ops.JSD_WANT])


def jsd_run(site: JsdSite, x, y, labels):
    """The site's call: (loss [], grad or None), as fused_run."""
    ctx = _bind(site)
    work = _lend_workspace(site, ctx, x)
    like = _factory()
    loss = like(site.loss)
    grad = like(x) if site.want else None
    status = _lib.lib.distil_jsd(
        ctx.handle, site.desc.ref, x.data_ptr(), y.data_ptr(),
        labels.data_ptr() if labels is not None and labels.numel() else 0, loss.data_ptr(),
        0 if grad is None else grad.data_ptr())
    del work  # the call is queued
    if status or _ops._eager:
        _finish(ctx, status, x)
    return loss, grad


class _JsdSiteFunction(torch.autograd.Function):
    """The loss of a JSD site's call: apply(x, site), (y, labels) on site.call."""

    @staticmethod
    def forward(ctx, x, site):
        loss, grad = jsd_run(site, x, *site.call)
        ctx.grads = (grad,)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        (grad,) = _ops._take_grads(ctx)
        return _ops._scaled(ctx, [grad], grad_loss)[0], None


def jsd_loss(site: JsdSite, x, y, labels) -> Tensor:
    if site.grads:
        site.call = (y, labels)
        try:
            return _JsdSiteFunction.apply(x, site)
        finally:
            site.call = None
    return jsd_run(site, x, y, labels)[0]
