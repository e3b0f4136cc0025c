"""distil for PyTorch: Liger-Kernel-compatible losses as torch.library ops.

    from distil.torch import FusedLinearJSDLoss      # was: from liger_kernel.chunked_loss import
                                                     #      LigerFusedLinearJSDLoss
Tensors decide the backend: CPU tensors run on distil's cpu backend, CUDA tensors on its cuda
backend (hip under a ROCm build of torch) on the tensor's device, on the current stream of each
call. One distil context per (backend, device, thread) is created on first use and cached.
The ops compile with torch.compile(fullgraph=True) and can be captured into CUDA graphs (call
prepare(device) or run one eager step first). Deferred errors (an invalid label found on the
GPU) surface at check(), or at every call after set_eager_errors(True).
"""

import torch

from .. import _context
from ._ops import context_for, set_eager_errors
from .divergences import (
    KLDivLoss,
    LigerKLDIVLoss,
    LigerTVDLoss,
    TVDLoss,
    kl_div,
    liger_kl_div,
    liger_tvd,
    tvd,
)
from .functional import (
    e4m3_head,
    fused_linear_jsd,
    fused_linear_jsd_loss,
    jsd,
    liger_fused_linear_jsd,
    liger_jsd,
)
from .modules import (
    JSD,
    FusedLinearJSD,
    FusedLinearJSDLoss,
    LigerFusedLinearJSD,
    LigerFusedLinearJSDLoss,
    LigerJSD,
)

# Offline distillation from a cached top-k teacher (docs/SPEC.md §7).
from .topk import FusedLinearTopKLoss, TopKLoss, fused_linear_topk_loss, topk_cache, topk_loss

__all__ = [
    "JSD",
    "FusedLinearJSD",
    "FusedLinearJSDLoss",
    "LigerJSD",
    "LigerFusedLinearJSD",
    "LigerFusedLinearJSDLoss",
    "jsd",
    "fused_linear_jsd",
    "fused_linear_jsd_loss",
    "liger_jsd",
    "liger_fused_linear_jsd",
    "check",
    "prepare",
    "set_eager_errors",
    "e4m3_head",  # docs/SPEC.md §6: a frozen teacher's fp8 head, rounded once
    # docs/SPEC.md §6: Liger's KL and TVD losses on distil's named divergences
    "KLDivLoss",
    "TVDLoss",
    "LigerKLDIVLoss",
    "LigerTVDLoss",
    "kl_div",
    "tvd",
    "liger_kl_div",
    "liger_tvd",
    "topk_cache",
    "topk_loss",
    "fused_linear_topk_loss",
    "TopKLoss",
    "FusedLinearTopKLoss",
]


def prepare(device=None) -> None:
    """Create this thread's distil context for a device now (before CUDA-graph capture)."""
    device = torch.device(device if device is not None else "cuda")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    context_for(torch.empty(0, device=device))


def check(device=None) -> None:
    """Wait for this thread's distil work (on one device, or all) and raise a deferred error.

    The cuda backend finds an invalid label on the device and reports it here, once, as
    distil.InvalidLabel (a ValueError) naming the first bad row; the cpu backend raises at the
    call itself. Call it where a late error should surface, e.g. after each optimizer step.
    """
    want = None if device is None else torch.device(device)
    for ctx in _context.existing():
        if want is None or _serves(ctx, want):
            ctx.synchronize()


def _serves(ctx, device: torch.device) -> bool:
    if device.type == "cpu":
        return ctx.backend == "cpu"
    return ctx.backend != "cpu" and device.index in (None, ctx.device)
