"""The probability-to-log transforms of kl_div and tvd as opaque custom ops.

KL with a probability target and TVD reach distil's log-prob kernel through elementwise torch
math (a log, an absolute difference). Inlined, torch.compile's generated code rounds that math
differently from eager torch in the last bit, so a compiled loss would differ from the eager one
(Liger-Kernel's tests ask for equality). As ops, inductor calls them as they are: the compiled
and the eager call run the same eager kernels and give the same bits, forward and backward.
"""

import torch
from torch import Tensor

# The stand-in of a probability of exactly 0: small enough to move no loss (1/2 of it per element),
# large enough that exp(log(it)) keeps fp32's accuracy (the smallest normal fp32 would not).
TINY = 2.0**-100


@torch.library.custom_op("distil::probability_log", mutates_args=())
def probability_log(target: Tensor) -> Tensor:
    """log of a probability tensor in fp32 [...], entries below 0 (a probability's rounding,
    e.g. 1 - the sum of the others) taken as 0: a log of a negative number would be NaN."""
    t = target.float()
    return torch.log(torch.where(t < 0, torch.zeros((), dtype=t.dtype, device=t.device), t))


@probability_log.register_fake
def _probability_log_fake(target: Tensor) -> Tensor:
    return torch.empty_like(target, dtype=torch.float32)


@torch.library.custom_op("distil::tvd_logs", mutates_args=())
def tvd_logs(input: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """(x, y) fp32 [...] with 1/2 |e^x - e^y| = 1/2 |p - q| element by element for any real p, q
    (as Liger's TVD takes them): a = |p - q|, m = a + tiny, x = log(a + m), y = log(m); equal
    entries stay finite, with term and gradient 0."""
    a = (input.float() - target.float()).abs()
    m = a + TINY
    return torch.log(a + m), torch.log(m)


@tvd_logs.register_fake
def _tvd_logs_fake(input: Tensor, target: Tensor):
    return (
        torch.empty_like(input, dtype=torch.float32),
        torch.empty_like(input, dtype=torch.float32),
    )


@torch.library.custom_op("distil::tvd_logs_backward", mutates_args=())
def tvd_logs_backward(grad_x: Tensor, input: Tensor, target: Tensor) -> Tensor:
    """d/dp of the loss through x alone (m carries no gradient): grad_x sign(p - q) / (a + m),
    in input's dtype [...]."""
    d = input.float() - target.float()
    a = d.abs()
    return (grad_x * torch.sign(d) / (a + (a + TINY))).to(input.dtype)


@tvd_logs_backward.register_fake
def _tvd_logs_backward_fake(grad_x: Tensor, input: Tensor, target: Tensor) -> Tensor:
    return torch.empty_like(input)


def _tvd_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _tvd_backward(ctx, grad_x, grad_y):
    input, target = ctx.saved_tensors
    return tvd_logs_backward(grad_x, input, target), None


tvd_logs.register_autograd(_tvd_backward, setup_context=_tvd_setup)
