"""Call sites: what a loss module's earlier calls checked and planned, reused for the next one.

A module's forward takes the checked path (distil.torch.functional: checks, plan lookup,
autograd.Function) the first time it sees a kind of call, and records the result here as a
site: the call's key (each tensor's type, shape, dtype, device and layout, which gradients are
wanted, the thread) and what the checked path derived from it (context, descriptor, workspace
bytes, output shapes). A later call with the same key skips straight to the outputs and the
library call: every check the checked path made depends only on what the key holds, and the
library checks the values and pointers again itself (docs/SPEC.md §5). Host time per call is
what this buys (bench/host_overhead.py; the checked path costs about twice the library call's
host time on a GPU).

A module keeps up to _SITES_KEPT sites (batches of varying length give each length its own) and
drops them all when one of its attributes is set (the options are part of every site). Only
plain eager calls take a site: traced calls (torch.compile, dispatch modes, functorch) and
calls on tensor subclasses always take the checked path, which routes them to the registered
ops. Options a site does not cover (a normaliser given per call or on the device, the LSEs,
reduction="none") take the checked path every time.
"""

from threading import get_ident
from typing import Optional

import torch
from torch import Tensor

from .. import _calls, _errors
from . import _ops

_SITES_KEPT = 64
_PLAIN = _ops._PLAIN


def _untraced() -> bool:
    """No compiler, dispatch mode or functorch transform is active (the tensors' types are in
    the key)."""
    return not (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack()
                or torch._C._are_functorch_transforms_active())


def _tensor_key(t: Optional[Tensor]) -> tuple:
    """What the checked path reads of one tensor: None for an absent one."""
    if t is None:
        return None
    return (type(t), t.shape, t.dtype, t.get_device(), t.is_contiguous(), t.requires_grad)


class Sites:
    """A module's sites by key, bounded."""

    __slots__ = ("table",)

    def __init__(self):
        self.table = {}

    def get(self, key):
        return self.table.get(key)

    def put(self, key, site):
        if len(self.table) >= _SITES_KEPT:
            self.table.clear()
        self.table[key] = site


def _bound(site) -> "object":
    """The site's context, bound to the current stream of this call (docs/SPEC.md §5)."""
    ctx = site.ctx
    if site.index >= 0:
        ctx.bind_stream(_ops._raw_stream(site.index))
    return ctx


def _like(t: Tensor) -> Tensor:
    """A new output with t's shape, dtype and device: empty_like of a dense tensor is the
    cheapest factory call there is (about half of torch.empty with a size, a dtype and a
    device on the H200 machine, bench/RESULTS.md); the tests' poisoned outputs as in _ops."""
    if _ops.POISON_OUTPUTS:
        return torch.full_like(t, float("nan"))
    return torch.empty_like(t)


def _run(call, ctx, *args):
    try:
        call(ctx, *args)
    except _errors.OutOfMemory as e:
        raise _ops._OutOfMemoryError(str(e)) from e


# ---------------------------------------------------------------------------- fused loss


class FusedSite:
    """One kind of fused call (FusedLinearJSDLoss, FusedLinearJSD): the plan the checked path
    made for it and the shapes of its outputs."""

    # call: (xt, Wt, bt, labels) of the call in flight, out: its parts, for the Function
    # (its arguments beyond the student's tensors travel here: autograd.Function.apply walks
    # nested arguments, about a third of its host time, bench/host_overhead.py). A site serves
    # one thread (the key holds it), so one call at a time.
    __slots__ = ("ctx", "index", "desc", "nbytes", "loss", "parts", "want", "call", "out")

    def __init__(self, ctx, index, plan, loss, want):
        self.ctx, self.index = ctx, index
        self.desc, self.nbytes = plan
        self.loss = loss  # an fp32 [3] (the parts) or [] on the device: the loss's template
        self.parts = loss.dim() == 1
        self.want = want  # (grad_xs, grad_Ws, grad_bs) wanted
        self.call = self.out = None


def fused_key(xs, ws, bs, xt, wt, bt, labels) -> Optional[tuple]:
    """The key of a fused call, or None when it may not take a site (traced). The student's
    and the teacher's tensors as _tensor_key would give them, written out (the call's host
    time); the biases and labels, often absent, through it."""
    if not _untraced():
        return None
    return (type(xs), xs.shape, xs.dtype, xs.get_device(), xs.is_contiguous(), xs.requires_grad,
            type(ws), ws.shape, ws.dtype, ws.get_device(), ws.is_contiguous(), ws.requires_grad,
            type(xt), xt.shape, xt.dtype, xt.get_device(), xt.is_contiguous(),
            type(wt), wt.shape, wt.dtype, wt.get_device(), wt.is_contiguous(),
            _tensor_key(labels), _tensor_key(bs), _tensor_key(bt), torch.is_grad_enabled(),
            get_ident())


def fused_site(key, xs, ws, bs, xt, wt, labels, args, parts) -> Optional[FusedSite]:
    """A site for a call that the checked path just ran with the op arguments args (its 2-D
    views, fused_op's order), or None when the call is one a site does not reproduce: a
    normaliser on the device or the LSEs (per-call fields of the descriptor), or a tensor that is
    not plain, not dense or not as the library takes it (the checked path converts those)."""
    if key is None or args[19] is not None or args[26]:
        return None
    for t in (xs, ws, bs, xt, wt, labels):
        if t is not None and (type(t) not in _PLAIN or not t.is_contiguous()):
            return None
    if labels is not None and labels.dtype is not torch.int64:
        return None
    ctx = _ops.context_for(xs)
    index = -1 if xs.is_cpu else xs.get_device()
    plan = _ops.fused_plan_of(ctx, args, parts)  # the checked path's own plan (cached)
    loss = torch.empty((3,) if parts else (), dtype=torch.float32, device=xs.device)
    return FusedSite(ctx, index, plan, loss, args[13:16])


def fused_run(site: FusedSite, xs, ws, bs, xt, wt, bt, labels):
    """The site's call: (loss or parts, grad_xs, grad_Ws, grad_bs), unwanted ones None."""
    ctx = _bound(site)
    out = _like(site.loss)
    wx, ww, wb = site.want
    gx = _like(xs) if wx else None  # xs, Ws, bs are dense (the key), so are these
    gw = _like(ws) if ww else None
    gb = _like(bs) if wb else None
    nbytes = site.nbytes
    work = _ops._workspace(xs, nbytes, ctx)
    _run(_calls.run_fused, ctx, site.desc, work.data_ptr() if work is not None else 0, nbytes,
         (xs.data_ptr(), ws.data_ptr(), bs.data_ptr() if bs is not None else 0, xt.data_ptr(),
          wt.data_ptr(), bt.data_ptr() if bt is not None else 0,
          labels.data_ptr() if labels is not None else 0, out.data_ptr(),
          gx.data_ptr() if wx else 0, gw.data_ptr() if ww else 0, gb.data_ptr() if wb else 0))
    _ops._after_call(ctx, xs)
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
    if site.want != (False, False, False):
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


class JsdSite:
    """One kind of JSD call (distil.torch.JSD with a batchmean or sum reduction)."""

    __slots__ = ("ctx", "index", "desc", "nbytes", "loss", "want", "call")  # call: as FusedSite

    def __init__(self, ctx, index, plan, loss, want):
        self.ctx, self.index = ctx, index
        self.desc, self.nbytes = plan
        self.loss, self.want = loss, want  # loss: an fp32 [] on the device, the template
        self.call = None


def jsd_key(x, y, labels) -> Optional[tuple]:
    """The key of a JSD call, or None when it may not take a site (traced)."""
    if not _untraced():
        return None
    return (_tensor_key(x), _tensor_key(y), _tensor_key(labels), torch.is_grad_enabled(),
            get_ident())


def jsd_site(key, x, y, labels, args) -> Optional[JsdSite]:
    """A site for a JSD call the checked path just ran with the op arguments args (jsd_op's
    order), as fused_site: not for reduction "none" (a per-row backward) or a normaliser on
    the device."""
    if key is None or args[5] == "none" or args[10] is not None:
        return None
    for t in (x, y, labels):
        if t is not None and (type(t) not in _PLAIN or not t.is_contiguous()):
            return None
    if labels is not None and labels.dtype is not torch.int64:
        return None
    ctx = _ops.context_for(x)
    index = -1 if x.is_cpu else x.get_device()
    return JsdSite(ctx, index, _ops.jsd_plan_of(ctx, args),
                   torch.empty((), dtype=torch.float32, device=x.device), args[6])


def jsd_run(site: JsdSite, x, y, labels):
    """The site's call: (loss [], grad or None)."""
    ctx = _bound(site)
    loss = _like(site.loss)
    grad = _like(x) if site.want else None
    nbytes = site.nbytes
    work = _ops._workspace(x, nbytes, ctx)
    _run(_calls.run_jsd, ctx, site.desc, work.data_ptr() if work is not None else 0, nbytes,
         x.data_ptr(), y.data_ptr(), labels.data_ptr() if labels is not None else 0,
         loss.data_ptr(), grad.data_ptr() if grad is not None else 0)
    _ops._after_call(ctx, x)
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
    if site.want:
        site.call = (y, labels)
        try:
            return _JsdSiteFunction.apply(x, site)
        finally:
            site.call = None
    return jsd_run(site, x, y, labels)[0]
