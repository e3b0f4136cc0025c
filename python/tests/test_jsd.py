"""distil.torch.JSD / jsd against the float64 reference (docs/SPEC.md §1, bounds of §3)."""

import pytest
import torch
from conftest import (  # noqa: F401
    DEVICES,
    DTYPES,
    bounds,
    check,
    fused_op_call,
    gen,
    jsd_op_call,
    labels_for,
    leaf,
    log_probs,
    ref_jsd,
)

import distil
import distil.torch as dt


def run_case(
    device, dtype, shape, beta, with_labels, grad_out=1.0, seed=0, reduction=None, transform=None
):
    g = gen(seed)
    x0, y0 = log_probs(g, shape, dtype), log_probs(g, shape, dtype)
    rows = x0.numel() // shape[-1]
    lab = labels_for(g, rows, shape[-1]).reshape(shape[:-1]) if with_labels else None
    module = dt.JSD(beta=beta)
    for _ in range(2):  # a second call gives the same result
        _case_once(module, device, dtype, x0, y0, lab, beta, grad_out, reduction, transform)


def _case_once(module, device, dtype, x0, y0, lab, beta, grad_out, reduction, transform):
    x = leaf(x0, device)
    xin, yin = (transform(x), transform(y0.to(device))) if transform else (x, y0.to(device))
    if reduction is None:
        loss = module(xin, yin, lab.to(device) if lab is not None else None)
    else:
        loss = dt.jsd(
            xin, yin, lab.to(device) if lab is not None else None, beta, reduction=reduction
        )
    assert loss.dtype == torch.float32
    gw = torch.full_like(loss, grad_out)
    (loss * gw).sum().backward()
    xr = x0.double().requires_grad_(True)
    xrin, yrin = (transform(xr), transform(y0.double())) if transform else (xr, y0.double())
    ref = ref_jsd(xrin, yrin, lab, beta, reduction=reduction or "batchmean")
    (ref * gw.double().cpu()).sum().backward()
    lb, gb = bounds(dtype)
    check("loss", loss, ref, lb)
    assert x.grad.dtype == dtype
    check("grad", x.grad, xr.grad, gb)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_module_against_reference(device, dtype, beta):
    run_case(device, dtype, (37, 1271), beta, with_labels=True, seed=int(beta * 10))


@pytest.mark.parametrize("device", DEVICES)
def test_without_labels_and_grad_output(device):
    run_case(device, torch.float32, (16, 300), 0.5, with_labels=False, grad_out=-2.5, seed=3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_three_dimensional(device, dtype):
    run_case(device, dtype, (3, 7, 513), 0.3, with_labels=True, seed=4)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous(device):
    # Columns taken from a wider tensor (row stride > V) and a transposed view (stride(-1) != 1).
    run_case(
        device,
        torch.float32,
        (12, 400),
        0.5,
        True,
        seed=5,
        transform=lambda t: torch.cat([t, t], -1)[:, :400],
    )
    run_case(
        device, torch.float32, (12, 400), 0.5, True, seed=6, transform=lambda t: t.T.contiguous().T
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_reductions(device, reduction):
    run_case(device, torch.float32, (9, 257), 0.5, True, grad_out=0.7, seed=7, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
def test_all_rows_ignored(device):
    x = leaf(log_probs(gen(8), (6, 50), torch.float32), device)
    y = log_probs(gen(9), (6, 50), torch.float32).to(device)
    lab = torch.full((6,), -100, device=device)
    loss = dt.JSD()(x, y, lab)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(x.grad, torch.zeros_like(x.grad))


@pytest.mark.parametrize("device", DEVICES)
def test_liger_names_and_functional(device):
    x = log_probs(gen(10), (5, 40), torch.float32).to(device)
    y = log_probs(gen(11), (5, 40), torch.float32).to(device)
    a = dt.LigerJSD(beta=0.2)(x, y)
    b = dt.liger_jsd(x, y, None, 0.2, -100)
    assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    fn = torch.compile(lambda a, b, lab: dt.jsd(a, b, lab, 0.4), fullgraph=True)
    x = leaf(log_probs(gen(12), (8, 64), torch.float32), device)
    y = log_probs(gen(13), (8, 64), torch.float32).to(device)
    lab = labels_for(gen(14), 8, 64).to(device)
    loss = fn(x, y, lab)
    (loss * 3).backward()
    xr = x.detach().cpu().double().requires_grad_(True)
    ref = ref_jsd(xr, y.cpu().double(), lab.cpu(), 0.4)
    (ref * 3).backward()
    check("compiled loss", loss, ref, 1e-5)
    check("compiled grad", x.grad, xr.grad, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    from distil.torch import _ops

    x = log_probs(gen(15), (6, 33), torch.float32).to(device).requires_grad_(True)
    y = log_probs(gen(16), (6, 33), torch.float32).to(device)
    lab = labels_for(gen(17), 6, 33).to(device)
    for args, kwargs in [
        jsd_op_call(x, y, lab),
        jsd_op_call(x, y, None, beta=0.0, reduction="sum"),
        jsd_op_call(x.detach(), y, lab, want_grad=False, beta=1.0, reduction="none"),
    ]:
        torch.library.opcheck(_ops.jsd_op, args, kwargs)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise_with_message(device):
    x = log_probs(gen(18), (4, 10), torch.float32).to(device)
    y = log_probs(gen(19), (4, 10), torch.float32).to(device)
    with pytest.raises(ValueError, match="beta"):
        dt.JSD(beta=1.5)(x, y)
    with pytest.raises(ValueError, match="target"):
        dt.JSD()(x, y[:, :9])
    with pytest.raises(ValueError, match="labels"):
        dt.JSD()(x, y, torch.zeros(3, dtype=torch.long, device=device))
    with pytest.raises(ValueError, match="dtype|float64"):
        dt.JSD()(x.double(), y.double())
    with pytest.raises(ValueError, match="reduction"):
        dt.jsd(x, y, reduction="mean")
    with pytest.raises(distil.InvalidArgument):
        dt.JSD()(x, y.half())


def test_retain_graph_second_backward_refused():
    x = leaf(log_probs(gen(20), (4, 10), torch.float32), "cpu")
    y = log_probs(gen(21), (4, 10), torch.float32)
    loss = dt.JSD()(x, y) * 2.0
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="twice|modified"):
        loss.backward()
