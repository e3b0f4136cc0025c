"""The preparations of fused calls whose tensors the library takes as they are, by signature.

A fused call's host time before the library call is mostly preparation: the compute dtype
(autocast, fp32 heads beside 16-bit hidden states), casts, 2-D views, contiguity, the labels'
dtype, the checks of nine tensors (_check.py) and what the call returns. For a call that changes
none of its tensors (the usual training step: bf16 or fp32 throughout, 2-D dense hidden states,
int64 labels) all of it depends only on the options, what the caller wants back, grad mode and
each tensor's type, shape, strides, dtype, device and requires_grad. Such a call's outcome (the
checked shape and the outputs wanted) is kept under that signature after it succeeded once, so
that the next call with the same signature goes straight to the library call.

Why: with every call prepared, the fused loss's host time beyond the library call was 60-63 µs
on the H100 machine (bench/python/host_overhead.py), above the 40 µs budget docs/PYTHON.md
gives it; kept, 49-50 µs (bench/tables/h100-host-overhead.md). Not kept: a
traced call (torch.compile, dispatch modes, functorch: symbolic shapes), a tensor subclass, a
normaliser tensor or a teacher head made once (both checked per call), autocast (its casts
change the tensors), and any call that failed or changed a tensor.
"""

import torch
from torch import Tensor

from . import _ops

_KEPT: dict = {}
_KEPT_MAX = 256  # shapes vary from batch to batch: bounded, full, the table starts over
_PLAIN = _ops._PLAIN


def key(opts, returns, inputs):
    """The signature of a fused call (inputs: functional.FusedInputs), or None where a call
    cannot be kept. A key implies the call is _ops._untraced."""
    if (
        isinstance(inputs.normaliser, Tensor)
        or inputs.head is not None
        or torch.is_autocast_enabled("cuda")
        or torch.is_autocast_enabled("cpu")
        or _ops.tracing()
    ):
        return None
    tensors = (inputs.xs, inputs.ws, inputs.bs, inputs.xt, inputs.wt, inputs.bt, inputs.labels)
    sig = [opts, returns, torch.is_grad_enabled()]
    for t in tensors:  # a loop, not a comprehension: a third of the time
        if t is None:
            sig.append(None)
        elif type(t) in _PLAIN:
            sig.append((t.shape, t.stride(), t.dtype, t.device, t.requires_grad))
        else:
            return None
    return tuple(sig)


def get(key):
    """(checked shape, outputs wanted) of a call kept under key, or None."""
    return None if key is None else _KEPT.get(key)


def keep(key, fn: str, inputs, t: "_ops.FusedTensors", want) -> None:
    """Keep a call that succeeded with tensors t (the library's view of inputs), if t is inputs
    themselves (nothing was cast, reshaped, copied or rounded)."""
    if key is None or t.normaliser is not None or t.head is not None:
        return
    same = (
        t.xs is inputs.xs
        and t.ws is inputs.ws
        and t.bs is inputs.bs
        and t.xt is inputs.xt
        and t.wt is inputs.wt
        and t.bt is inputs.bt
        and t.labels is inputs.labels
    )
    if not same or t.ws.dtype is not t.xs.dtype:  # an fp32 head is rounded per call
        return
    if len(_KEPT) >= _KEPT_MAX:
        _KEPT.clear()
    _KEPT[key] = (_ops.fused_shape(fn, t), want)


def clear() -> None:
    _KEPT.clear()
