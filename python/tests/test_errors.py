"""Statuses become Python exceptions carrying distil's message; deferred label errors surface at
distil.torch.check() (or at the call with eager errors); out of memory is torch's error."""

import pytest
import torch
from conftest import DEVICES, gen, labels_for, log_probs

import distil
import distil.torch as dt
from distil import _lib, _testing


def test_exception_classes():
    assert issubclass(distil.InvalidArgument, ValueError)
    assert issubclass(distil.InvalidLabel, distil.InvalidArgument)
    assert issubclass(distil.Error, RuntimeError)
    assert issubclass(distil.OutOfMemory, MemoryError)


@pytest.mark.parametrize("device", DEVICES)
def test_invalid_label_surfaces(device):
    x = torch.randn(6, 8, generator=gen(50)).to(device)
    w = torch.randn(20, 8, generator=gen(51)).to(device)
    lab = labels_for(gen(52), 6, 20).to(device)
    lab[4] = 20
    loss_fn = dt.FusedLinearJSDLoss()
    if device == "cpu":
        # A synchronous backend reports it from the call itself.
        with pytest.raises(distil.InvalidLabel, match="4"):
            loss_fn(x, w, x, w, lab)
        return
    loss = loss_fn(x, w, x, w, lab)  # queued; the row is treated as ignored
    with pytest.raises(distil.InvalidLabel, match="4"):
        dt.check(device)
    dt.check(device)  # reported once
    dt.set_eager_errors(True)
    try:
        with pytest.raises(distil.InvalidLabel, match="4"):
            loss_fn(x, w, x, w, lab)
    finally:
        dt.set_eager_errors(False)
    assert torch.isfinite(loss)


def test_out_of_memory_is_torch_error():
    x = log_probs(gen(52), (4, 10), torch.float32)
    dt.jsd(x, x)  # the context exists
    # The cpu context allocates its own scratch for a lent-workspace-free call only when the
    # plan needs it: force a failing allocation through the library's fault hook.
    _testing.fail_allocations(0)
    try:
        ctx = distil._context.get("cpu", 0)
        ptr = _lib.ctypes.c_void_p()
        status = _lib.lib.distil_malloc(ctx.handle, 1 << 20, _lib.ctypes.byref(ptr))
        assert status == _lib.ERR_OUT_OF_MEMORY
        with pytest.raises(distil.OutOfMemory, match="memory"):
            ctx.check(status)
        from distil.torch import _ops

        with pytest.raises(_ops._OutOfMemoryError):
            _ops._torch_errors(ctx.check, status)
    finally:
        _testing.fail_allocations(-1)
