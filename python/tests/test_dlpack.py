"""The array-agnostic layer (distil.jsd, distil.fused_linear_jsd) with NumPy arrays, against
the float64 reference (docs/SPEC.md §1-§3)."""

import numpy as np
import pytest
import torch
from conftest import check, gen, labels_for, log_probs, normal, ref_fused, ref_jsd

import distil


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_jsd_numpy(dtype):
    tdt = torch.float32 if dtype == np.float32 else torch.float16
    g = gen(30)
    x, y = log_probs(g, (21, 333), tdt), log_probs(g, (21, 333), tdt)
    lab = labels_for(g, 21, 333)
    loss, grad = distil.jsd(x.numpy(), y.numpy(), lab.numpy(), beta=0.7)
    assert isinstance(loss, np.ndarray) and loss.dtype == np.float32 and loss.shape == ()
    assert isinstance(grad, np.ndarray) and grad.dtype == dtype and grad.shape == (21, 333)
    xr = x.double().requires_grad_(True)
    ref = ref_jsd(xr, y.double(), lab, 0.7)
    ref.backward()
    tol = 1e-5 if dtype == np.float32 else 2e-3
    check("loss", torch.from_numpy(np.asarray(loss)), ref, tol)
    check("grad", torch.from_numpy(grad), xr.grad, 1e-5 if dtype == np.float32 else 1e-2)


def test_jsd_numpy_strided_rows_and_none():
    g = gen(31)
    wide = log_probs(g, (8, 200), torch.float32).numpy()
    x = wide[:, :100]  # row stride 200 > V
    y = log_probs(g, (8, 100), torch.float32).numpy()
    loss, grad = distil.jsd(x, y, reduction="none", grad=False)
    assert grad is None and loss.shape == (8,)
    ref = ref_jsd(
        torch.from_numpy(np.ascontiguousarray(x)).double(),
        torch.from_numpy(y).double(),
        reduction="none",
    )
    check("per-row loss", torch.from_numpy(loss), ref, 1e-5)


def test_fused_numpy():
    g = gen(32)
    t, v, hs, ht = 17, 301, 24, 40
    xs, ws = normal(g, (t, hs), torch.float32), normal(g, (v, hs), torch.float32, 0.3)
    xt, wt = normal(g, (t, ht), torch.float32), normal(g, (v, ht), torch.float32, 0.3)
    bs = normal(g, (v,), torch.float32, 0.5)
    lab = labels_for(g, t, v)
    r = distil.fused_linear_jsd(
        xs.numpy(),
        ws.numpy(),
        xt.numpy(),
        wt.numpy(),
        lab.numpy(),
        student_bias=bs.numpy(),
        temperature=1.5,
        beta=0.2,
    )
    rxs, rws, rbs = (a.double().requires_grad_(True) for a in (xs, ws, bs))
    ref, hard, soft = ref_fused(
        rxs, rws, xt.double(), wt.double(), lab, rbs, None, beta=0.2, temperature=1.5
    )
    ref.backward()
    check("loss", torch.tensor(float(r.loss)), ref, 1e-5)
    check("hard", torch.tensor(float(r.hard_loss)), hard, 1e-5)
    check("soft", torch.tensor(float(r.soft_loss)), soft, 1e-5)
    check("grad_student_hidden", torch.from_numpy(r.grad_student_hidden), rxs.grad, 1e-4)
    check("grad_student_weight", torch.from_numpy(r.grad_student_weight), rws.grad, 1e-4)
    check("grad_student_bias", torch.from_numpy(r.grad_student_bias), rbs.grad, 1e-4)


def test_fused_numpy_without_labels_or_grads():
    g = gen(33)
    xs, ws = normal(g, (5, 8), torch.float32), normal(g, (50, 8), torch.float32)
    xt, wt = normal(g, (5, 12), torch.float32), normal(g, (50, 12), torch.float32)
    r = distil.fused_linear_jsd(
        xs.numpy(),
        ws.numpy(),
        xt.numpy(),
        wt.numpy(),
        None,
        weight_hard=0.0,
        weight_soft=1.0,
        grads=False,
    )
    assert r.grad_student_hidden is None and float(r.hard_loss) == 0.0
    ref, _, _ = ref_fused(
        xs.double(), ws.double(), xt.double(), wt.double(), None, weight_hard=0, weight_soft=1
    )
    check("loss", torch.tensor(float(r.loss)), ref, 1e-5)


def test_bad_arrays_raise_with_message():
    x = np.log(np.full((3, 4), 0.25, dtype=np.float32))
    with pytest.raises(ValueError, match="teacher_logp"):
        distil.jsd(x, x[:, :3])
    with pytest.raises(ValueError, match="beta"):
        distil.jsd(x, x, beta=2.0)
    with pytest.raises(ValueError, match="labels"):
        distil.jsd(x, x, np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError, match="__dlpack__|array API"):
        distil.jsd([[0.0]], x)
    with pytest.raises(ValueError, match="dtype"):
        distil.jsd(x.astype(np.float64), x.astype(np.float64))
    w = np.ones((4, 2), dtype=np.float32)
    with pytest.raises(distil.InvalidLabel, match="1"):
        distil.fused_linear_jsd(w[:3], w, w[:3], w, np.array([0, 9, 1], dtype=np.int64))


def test_info():
    assert distil.version().count(".") == 2
    b = distil.backends()
    assert b["cpu"] >= 1 and b["ref"] >= 1
    assert distil.library_path().endswith(".so")


def test_divergence_numpy():
    """docs/SPEC.md §6 through the array layer: a skew KL with a given N, and tau^2."""
    from test_divergences import ref_div, ref_fused_div

    g = gen(35)
    x, y = log_probs(g, (13, 211), torch.float32), log_probs(g, (13, 211), torch.float32)
    lab = labels_for(g, 13, 211)
    loss, grad = distil.jsd(
        x.numpy(), y.numpy(), lab.numpy(), divergence="skew_kl", alpha=0.3, normaliser=20.0
    )
    xr = x.double().requires_grad_(True)
    ref = ref_div(xr, y.double(), lab, "skew_kl", 0.3, n=20.0)
    ref.backward()
    check("loss", torch.from_numpy(np.asarray(loss)), ref, 1e-5)
    check("grad", torch.from_numpy(grad), xr.grad, 1e-5)
    t, v, hs, ht = 9, 101, 8, 12
    xs, ws = normal(g, (t, hs), torch.float32), normal(g, (v, hs), torch.float32, 0.3)
    xt, wt = normal(g, (t, ht), torch.float32), normal(g, (v, ht), torch.float32, 0.3)
    lab = labels_for(g, t, v)
    r = distil.fused_linear_jsd(
        xs.numpy(),
        ws.numpy(),
        xt.numpy(),
        wt.numpy(),
        lab.numpy(),
        temperature=2.0,
        divergence="tvd",
        temperature_squared=True,
    )
    rxs = xs.double().requires_grad_(True)
    want, _, _ = ref_fused_div(
        rxs,
        ws.double(),
        xt.double(),
        wt.double(),
        lab,
        torch.zeros(v, dtype=torch.float64),
        0.5,
        0.5,
        2.0,
        "tvd",
        0.1,
        tau_sq=True,
    )
    want.backward()
    check("fused loss", torch.from_numpy(np.asarray(r.loss)), want, 1e-5)
    check("fused grad", torch.from_numpy(r.grad_student_hidden), rxs.grad, 1e-4)
