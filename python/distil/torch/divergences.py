"""Liger-Kernel's KL-divergence and total-variation losses on distil's C JSD entry point.

  kl_div(input, target, size_average=True, reduce=True, reduction="mean", log_target=False,
         eps=1e-10)                    = liger_kernel.transformers.functional.liger_kl_div
  tvd(input, target, shift_labels=None, reduction="mean", ignore_index=-100)
                                       = liger_kernel.transformers.functional.liger_tvd
  KLDivLoss(eps=1e-10, *args, **kwargs) = liger_kernel.transformers.LigerKLDIVLoss
                                          (an nn.KLDivLoss: reduction "mean" by default)
  TVDLoss(reduction="batchmean", ignore_index=-100) = liger_kernel.transformers.LigerTVDLoss

Both run distil_jsd with a named divergence (docs/SPEC.md §6): forward KL(p || q) of the
student log-probs `input` from the target p, and the total variation 1/2 sum |p - q|; the means
through the library's normaliser (no host synchronisation, no .item()). Reductions as Liger's:
  "batchmean"  KL: sum / input.size(0) (torch.nn.KLDivLoss); TVD: sum / rows whose shift_label
               is not ignore_index (all rows without labels)
  "mean"       KL: sum / input.numel() (torch.nn.KLDivLoss); TVD: sum / (those rows x V)
  "sum"        the sum;  "none": the element-wise terms, shaped like input (fp32; each element
               is a one-entry row of distil_jsd, ignored rows 0)
The loss is fp32 (as Liger's); the gradient flows to `input` only (the target gets none).
Where distil differs: KL with probabilities as target (log_target=False) takes log(target) in
fp32, so a target of 0 gives a term of exactly 0 (torch's xlogy convention) and eps, accepted
for compatibility, is not needed (Liger clamps the target's log at log(eps)); TVD takes
probabilities and runs on their fp32 logs, an exact 0 standing in as 2^-100 (so its gradient is
Liger's +-1/2, and 0 where both are 0; the gradient is 1/2 e^x / p, exact to about |log p| fp32
ulps); a batch whose rows are all ignored
gives 0 (Liger divides by zero).
"""

from typing import Optional

import torch
from torch import Tensor

from .. import _lib
from . import _ops
from . import functional as F

_REDUCTIONS = ("none", "sum", "mean", "batchmean")
# The stand-in of a probability of exactly 0: small enough to move no loss (1/2 of it per element),
# large enough that exp(log(it)) keeps fp32's accuracy (the smallest normal fp32 would not).
_TINY = 2.0 ** -100


def _check(fn: str, input: Tensor, target: Tensor, reduction: str):
    if reduction not in _REDUCTIONS:
        F._fail(f"{fn}: reduction '{reduction}' is not one of {', '.join(_REDUCTIONS)}")
    if input.shape != target.shape:
        F._fail(f"{fn}: input {tuple(input.shape)} and target {tuple(target.shape)} differ")
    if input.dim() < 1:
        F._fail(f"{fn}: input must have at least 1 dimension (the vocabulary)")


def _run(x: Tensor, y: Tensor, labels: Optional[Tensor], ignore_index: int, divergence: int,
         reduction: str, want_grad: bool, normaliser: float = 0.0,
         normaliser_device: Optional[Tensor] = None) -> Tensor:
    """distil_jsd of the divergence on [rows, V] (or element-wise for "none"): the fp32 loss."""
    if reduction == "none":  # one element per row: the row losses are the element terms
        rows = x.reshape(-1, 1), y.reshape(-1, 1)
        if labels is not None:
            labels = labels.repeat_interleave(x.shape[-1])
        loss = _ops.jsd(rows[0].contiguous(), rows[1].contiguous(), labels, 0.5, ignore_index,
                        "none", want_grad, divergence, 0.1, 0.0, None)
        return loss.reshape(x.shape)
    red = "sum" if reduction == "sum" else "batchmean"
    return _ops.jsd(F._rows("input", x), F._rows("target", y), labels, 0.5, ignore_index, red,
                    want_grad, divergence, 0.1, normaliser, normaliser_device)


def kl_div(input: Tensor, target: Tensor, size_average: bool = True, reduce: bool = True,
           reduction: str = "mean", log_target: bool = False, eps: float = 1e-10) -> Tensor:
    """KL(target || softmax) of log-probs `input` [..., V]: sum target (log target - input).

    target: probabilities, or log-probabilities with log_target. size_average and reduce are
    ignored (as Liger does: only `reduction` counts).
    """
    del size_average, reduce, eps  # see the module docstring
    fn = "kl_div"
    _check(fn, input, target, reduction)
    if log_target:
        x, y = input, target.detach().to(input.dtype)
        F._same(fn, ("input",), (input,))
    else:  # the log of a probability in fp32 (a 16-bit log-prob would keep 3 digits)
        x, y = input.float(), torch.log(target.detach().float())
    n = 0.0
    if reduction in ("mean", "batchmean"):
        n = float(input.numel() if reduction == "mean" else input.shape[0])
    return _run(x, y, None, -100, _lib.DIVERGENCES["forward_kl"], reduction,
                F._wants_grad(input), n if n > 0 else 0.0)


def tvd(input: Tensor, target: Tensor, shift_labels: Optional[Tensor] = None,
        reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Total variation 1/2 sum |input - target| of two probability tensors [..., V]; the
    gradient goes to `input`. shift_labels [...] ignore rows (loss and gradient 0)."""
    fn = "tvd"
    _check(fn, input, target, reduction)
    p, q = input.float(), target.detach().float()
    both_zero = (p == 0) & (q == 0)
    x = torch.log(p + (p == 0).to(p.dtype) * _TINY)  # d/dp = 1 / (p + tiny): +-1/2 at p = 0
    y = torch.log(q + both_zero.to(q.dtype) * _TINY)
    vocab = input.shape[-1]
    rows = input.numel() // vocab if vocab else 0
    labels = F._labels(fn, shift_labels, rows, input.device)
    n_host, n_dev = 0.0, None
    if reduction == "mean":  # (rows not ignored) x V, counted on the device
        if labels is None:
            n_host = float(rows * vocab)
        else:
            n_dev = (labels != int(ignore_index)).sum().to(torch.float32) * float(vocab)
    return _run(x, y, labels, int(ignore_index), _lib.DIVERGENCES["tvd"], reduction,
                F._wants_grad(input), n_host if n_host > 0 else 0.0, n_dev)


class KLDivLoss(torch.nn.KLDivLoss):
    """torch.nn.KLDivLoss on distil (Liger's LigerKLDIVLoss): forward(y_pred, y_true) with
    y_pred log-probs, y_true probabilities (or log-probs with log_target=True)."""

    def __init__(self, eps: float = 1e-10, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.eps = eps

    def forward(self, y_pred: Tensor, y_true: Tensor) -> Tensor:
        return kl_div(y_pred, y_true, reduction=self.reduction, log_target=self.log_target,
                      eps=self.eps)


class TVDLoss(torch.nn.Module):
    """Total variation distance (Liger's LigerTVDLoss): forward(p, q, shift_labels=None) of two
    probability tensors, the gradient to p."""

    def __init__(self, reduction: str = "batchmean", ignore_index: int = -100):
        super().__init__()
        self.reduction = reduction
        self.ignore_index = ignore_index

    def forward(self, p: Tensor, q: Tensor, shift_labels: Optional[Tensor] = None) -> Tensor:
        return tvd(p, q, shift_labels, self.reduction, self.ignore_index)


# Liger's names, so that switching is an import change.
liger_kl_div = kl_div
liger_tvd = tvd
LigerKLDIVLoss = KLDivLoss
LigerTVDLoss = TVDLoss
