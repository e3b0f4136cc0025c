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
any real tensors (Liger's definition, 1/2 sum |p - q|; probabilities or not) and runs on fp32
logs whose exponentials differ by |p - q| (_prob_ops.tvd_logs: its gradient is
1/2 sign(p - q)); a batch whose rows are all ignored gives 0 (Liger divides by zero). Both
transforms are custom ops, so a compiled call gives the eager call's bits.
"""

import torch
from torch import Tensor

from .. import _options
from . import _ops, _prob_ops
from . import functional as F

_REDUCTIONS = ("none", "sum", "mean", "batchmean")


def _check(fn: str, input: Tensor, target: Tensor, reduction: str):
    """What must hold before the probabilities are converted: a known reduction, one shape,
    float tensors (complex and integer ones refused by name: .float() would drop the imaginary
    part or accept counts)."""
    if reduction not in _REDUCTIONS:
        F._fail(f"{fn}: reduction '{reduction}' is not one of {', '.join(_REDUCTIONS)}")
    F._same(fn, ("input", "target"), (input, target))
    if input.shape != target.shape:
        F._fail(f"{fn}: input {tuple(input.shape)} and target {tuple(target.shape)} differ")
    if input.dim() < 1 or input.shape[-1] < 1:
        F._fail(
            f"{fn}: input {tuple(input.shape)} needs a last dimension (the vocabulary) of "
            "at least 1"
        )


def _run(
    x: Tensor,
    y: Tensor,
    labels: Tensor | None,
    ignore_index: int,
    divergence: str,
    reduction: str,
    want_grad: bool,
    normaliser=None,
) -> Tensor:
    """distil_jsd of the divergence on [rows, V] (or element-wise for "none"): the fp32 loss.
    normaliser: None (summed), a number or a one-element fp32 tensor on the device."""
    n_dev = normaliser if isinstance(normaliser, Tensor) else None
    opts = _options.jsd_options(
        "jsd",
        divergence=divergence,
        ignore_index=ignore_index,
        reduction="none" if reduction == "none" else ("sum" if reduction == "sum" else "batchmean"),
        normaliser=None if n_dev is not None or not normaliser else normaliser,
    )
    if reduction == "none":  # one element per row: the row losses are the element terms
        if labels is not None:
            labels = labels.repeat_interleave(x.shape[-1])
        t = _ops.JsdTensors(x.reshape(-1, 1).contiguous(), y.reshape(-1, 1).contiguous(), labels)
        return _ops.jsd(t, opts, want_grad).reshape(x.shape)
    t = _ops.JsdTensors(F._rows("input", x), F._rows("target", y), labels, n_dev)
    return _ops.jsd(t, opts, want_grad)


def kl_div(
    input: Tensor,
    target: Tensor,
    size_average: bool = True,
    reduce: bool = True,
    reduction: str = "mean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> Tensor:
    """KL(target || softmax) of log-probs `input` [..., V]: sum target (log target - input).

    target: probabilities, or log-probabilities with log_target. size_average and reduce are
    ignored (as Liger does: only `reduction` counts).
    """
    del size_average, reduce, eps  # see the module docstring
    fn = "kl_div"
    _check(fn, input, target, reduction)
    if log_target:
        x, y = input, target.detach().to(input.dtype)
    else:  # the log of a probability in fp32 (a 16-bit log-prob would keep 3 digits)
        x, y = input.float(), _prob_ops.probability_log(target.detach())
    n = None
    if reduction in ("mean", "batchmean"):
        n = float(input.numel() if reduction == "mean" else input.shape[0]) or None
    return _run(x, y, None, -100, "forward_kl", reduction, F._wants_grad(input), n)


def tvd(
    input: Tensor,
    target: Tensor,
    shift_labels: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
) -> Tensor:
    """Total variation 1/2 sum |input - target| of two probability tensors [..., V]; the
    gradient goes to `input`. shift_labels [...] ignore rows (loss and gradient 0)."""
    fn = "tvd"
    _check(fn, input, target, reduction)
    x, y = _prob_ops.tvd_logs(input, target.detach())
    vocab = input.shape[-1]
    rows = input.numel() // vocab
    labels = F._labels("shift_labels", shift_labels, rows)
    n = None
    if reduction == "mean":  # (rows not ignored) x V, counted on the device
        if labels is None:
            n = float(rows * vocab) or None
        else:
            n = (labels != int(ignore_index)).sum().to(torch.float32) * float(vocab)
    return _run(x, y, labels, int(ignore_index), "tvd", reduction, F._wants_grad(input), n)


class KLDivLoss(torch.nn.KLDivLoss):
    """torch.nn.KLDivLoss on distil (Liger's LigerKLDIVLoss): forward(y_pred, y_true) with
    y_pred log-probs, y_true probabilities (or log-probs with log_target=True)."""

    def __init__(self, eps: float = 1e-10, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.eps = eps

    def forward(self, y_pred: Tensor, y_true: Tensor) -> Tensor:
        return kl_div(
            y_pred, y_true, reduction=self.reduction, log_target=self.log_target, eps=self.eps
        )


class TVDLoss(torch.nn.Module):
    """Total variation distance (Liger's LigerTVDLoss): forward(p, q, shift_labels=None) of two
    probability tensors, the gradient to p."""

    def __init__(self, reduction: str = "batchmean", ignore_index: int = -100):
        super().__init__()
        self.reduction = reduction
        self.ignore_index = ignore_index

    def forward(self, p: Tensor, q: Tensor, shift_labels: Tensor | None = None) -> Tensor:
        return tvd(p, q, shift_labels, self.reduction, self.ignore_index)


# Liger's names, so that switching is an import change.
liger_kl_div = kl_div
liger_tvd = tvd
LigerKLDIVLoss = KLDivLoss
LigerTVDLoss = TVDLoss
