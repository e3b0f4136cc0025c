"""Careless and hostile inputs on every path (distil.torch eager, torch.compile, the DLPack
layer): each is refused with distil.InvalidArgument naming the argument, or computed right,
before any address reaches the library (python/distil/_check.py)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import check, gen, labels_for, log_probs, normal, ref_fused, ref_jsd

import distil
import distil.torch as dt

HERE = os.path.dirname(os.path.abspath(__file__))


def fused_np(rows=6, vocab=40, hs=8, ht=12, seed=1):
    g = gen(seed)
    return {
        "xs": normal(g, (rows, hs), torch.float32).numpy(),
        "ws": normal(g, (vocab, hs), torch.float32).numpy(),
        "xt": normal(g, (rows, ht), torch.float32).numpy(),
        "wt": normal(g, (vocab, ht), torch.float32).numpy(),
        "labels": labels_for(g, rows, vocab).numpy(),
    }


def fused_np_call(a, **kw):
    return distil.fused_linear_jsd(a["xs"], a["ws"], a["xt"], a["wt"], a["labels"], **kw)


# ------------------------------------------------------------------------ the DLPack layer


@pytest.mark.parametrize("which", ["student_bias", "teacher_bias"])
def test_dlpack_bias_of_the_wrong_length(which):
    """A 1-element bias against V = 4096 would have the library write V gradient values into
    one (heap corruption) or read past it (NaN)."""
    a = fused_np(vocab=4096)
    with pytest.raises(distil.InvalidArgument, match=f"{which} has shape \\(1,\\)"):
        fused_np_call(a, **{which: np.zeros(1, np.float32)})


def test_dlpack_teacher_rows():
    a = fused_np(rows=64)
    a["xt"] = a["xt"][:1].copy()
    with pytest.raises(
        distil.InvalidArgument, match="student_hidden has 64 rows, teacher_hidden 1"
    ):
        fused_np_call(a)


def test_dlpack_hidden_size():
    a = fused_np()
    a["wt"] = a["wt"][:, :5].copy()
    with pytest.raises(distil.InvalidArgument, match="teacher_weight .* hidden size 12"):
        fused_np_call(a)


def test_dlpack_labels_length():
    a = fused_np()
    a["labels"] = a["labels"][:3].copy()
    with pytest.raises(distil.InvalidArgument, match="labels has shape \\(3,\\)"):
        fused_np_call(a)


def test_dlpack_broadcast_rows():
    """A broadcast NumPy array has a row stride of 0: refused, never read as dense."""
    g = gen(3)
    row = log_probs(g, (1, 64), torch.float32).numpy()
    y = log_probs(g, (256, 64), torch.float32).numpy()
    with pytest.raises(distil.InvalidArgument, match="student_logp: row stride 0"):
        distil.jsd(np.lib.stride_tricks.as_strided(row, (256, 64), (0, 4)), y)
    with pytest.raises(distil.InvalidArgument, match="row stride -64"):
        distil.jsd(y[::-1], y)


def test_dlpack_transposed_single_row():
    """A (1, V) view of a (V, 1) array has strides (1, 1): one row, dense, accepted."""
    g = gen(4)
    x = log_probs(g, (1, 50), torch.float32)
    y = log_probs(g, (1, 50), torch.float32)
    xt = np.lib.stride_tricks.as_strided(x.numpy().copy(), (1, 50), (4, 4))  # as x.T.T
    loss, grad = distil.jsd(xt, y.numpy())
    check("loss", torch.from_numpy(np.asarray(loss)), ref_jsd(x, y), 1e-5)
    a = fused_np(rows=1)
    a["xs"] = np.lib.stride_tricks.as_strided(a["xs"].copy(), (1, 8), (4, 4))
    ref = ref_fused(*(torch.from_numpy(a[k]) for k in ("xs", "ws", "xt", "wt", "labels")))
    check("fused loss", torch.from_numpy(np.asarray(fused_np_call(a).loss)), ref[0], 1e-5)


@pytest.mark.parametrize("dtype", [np.complex64, np.int32, np.float64])
def test_dlpack_dtypes_by_name(dtype):
    x = np.zeros((2, 8), dtype)
    with pytest.raises(
        distil.InvalidArgument, match=np.dtype(dtype).name.replace("complex64", "complex64")
    ):
        distil.jsd(x, x)


def test_dlpack_zero_vocab():
    x = np.zeros((3, 0), np.float32)
    with pytest.raises(distil.InvalidArgument, match="vocab 0 < 1"):
        distil.jsd(x, x)


def test_dlpack_export_errors_are_invalid_argument():
    """A framework's refusal to export (torch: requires grad; NumPy: read-only) is
    InvalidArgument, with nothing printed by a half-made view's destructor."""
    code = (
        "import numpy as np, torch, distil\n"
        "x = torch.zeros(2, 8, requires_grad=True)\n"
        "try:\n"
        "    distil.jsd(x, x.detach())\n"
        "except distil.InvalidArgument as e:\n"
        "    print('refused:', 'student_logp' in str(e))\n"
        "a = np.zeros((2, 8), np.float32); a.setflags(write=False)\n"
        "try:\n"
        "    distil.jsd(a, a)\n"
        "    print('read-only: accepted')\n"
        "except distil.InvalidArgument as e:\n"
        "    print('read-only: refused')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=True,
    )
    assert "refused: True" in out.stdout
    assert "Exception ignored" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_distil_library_not_libdistil():
    libm = "/lib/x86_64-linux-gnu/libm.so.6"
    if not os.path.exists(libm):
        pytest.skip(f"{libm} absent")
    code = "try:\n    import distil\nexcept ImportError as e:\n    print('ImportError', e)\n"
    env = dict(os.environ, DISTIL_LIBRARY=libm)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.startswith("ImportError") and "not libdistil" in out.stdout, (
        out.stdout + out.stderr
    )


# ------------------------------------------------------------------------- distil.torch


def test_meta_labels_after_a_cpu_call():
    """Labels (or a bias) on meta are refused on every call, not dropped."""
    g = gen(5)
    x = log_probs(g, (4, 16), torch.float32)
    y = log_probs(g, (4, 16), torch.float32)
    lab = labels_for(g, 4, 16)
    mod = dt.JSD()
    mod(x, y, lab)
    with pytest.raises(distil.InvalidArgument, match="labels is on meta"):
        mod(x, y, lab.to("meta"))
    xs, ws, xt, wt = (normal(g, s, torch.float32) for s in ((4, 8), (16, 8), (4, 8), (16, 8)))
    loss = dt.FusedLinearJSDLoss()
    loss(xs, ws, xt, wt, lab)
    with pytest.raises(distil.InvalidArgument, match="student_bias is on meta"):
        loss(xs, ws, xt, wt, lab, torch.zeros(16, device="meta"))


def test_checks_are_kept_by_the_whole_signature():
    """distil.torch keeps the checks a call passed by its tensors' shapes, strides, dtypes and
    devices (_ops.checked): a tensor that differs from a passed call's in any one of them is
    checked again and refused."""
    from distil import _check
    from distil.torch import _ops

    x = torch.zeros(4, 16)

    def call(target):
        return _ops.checked(_check.jsd, "jsd", _ops._JSD_NAMES, (x, target, None))

    assert call(torch.zeros(4, 16)) == call(torch.ones(4, 16))
    for target, match in (
        (torch.zeros(1, 16).expand(4, 16), "row stride 0"),
        (torch.zeros(4, 16, dtype=torch.float16), "target is float16"),
        (torch.zeros(4, 16, device="meta"), "target is on meta"),
        (torch.zeros(4, 17), "differ"),
    ):
        with pytest.raises(distil.InvalidArgument, match=match):
            call(target)


def test_torch_bias_and_teacher_rows():
    g = gen(6)
    xs, ws, xt, wt = (normal(g, s, torch.float32) for s in ((8, 8), (64, 8), (8, 8), (64, 8)))
    lab = labels_for(g, 8, 64)
    with pytest.raises(distil.InvalidArgument, match="student_bias has shape \\(1,\\)"):
        dt.fused_linear_jsd_loss(xs, ws, xt, wt, lab, torch.zeros(1))
    with pytest.raises(distil.InvalidArgument, match="teacher_bias has shape \\(3,\\)"):
        dt.fused_linear_jsd_loss(xs, ws, xt, wt, lab, None, torch.zeros(3))
    with pytest.raises(distil.InvalidArgument, match="has 8 rows, teacher_input 1"):
        dt.fused_linear_jsd_loss(xs, ws, xt[:1], wt, lab)


def test_expanded_input_is_right():
    """An expanded student (row stride 0) gives the loss of the rows it shows."""
    g = gen(7)
    row = log_probs(g, (1, 33), torch.float32)
    y = log_probs(g, (16, 33), torch.float32)
    x = row.expand(16, 33)
    check("loss", dt.jsd(x, y), ref_jsd(x.contiguous(), y), 1e-5)


def test_transposed_single_row_torch():
    g = gen(8)
    x = log_probs(g, (40, 1), torch.float32).t()  # (1, 40), strides (1, 1)
    y = log_probs(g, (1, 40), torch.float32)
    check("loss", dt.jsd(x, y), ref_jsd(x.contiguous(), y), 1e-5)
    check("liger loss", dt.LigerJSD()(x, y).float(), ref_jsd(x.contiguous(), y), 1e-5)


def test_zero_vocab_and_k():
    x = torch.zeros(3, 0)
    with pytest.raises(distil.InvalidArgument, match="vocab 0 < 1"):
        dt.jsd(x, x)
    with pytest.raises(distil.InvalidArgument, match="vocab 0 < 1"):
        dt.JSD()(x.reshape(1, 3, 0), x.reshape(1, 3, 0))
    xs = torch.zeros(3, 4)
    with pytest.raises(distil.InvalidArgument, match="vocab 0"):
        dt.fused_linear_jsd(xs, torch.zeros(0, 4), xs, torch.zeros(0, 4))
    with pytest.raises(distil.InvalidArgument, match="k 0 is not in"):
        dt.topk_cache(torch.zeros(3, 5), 0)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int64])
def test_complex_and_integer_refused_by_name(dtype):
    x = torch.zeros(2, 8, dtype=dtype)
    name = str(dtype).replace("torch.", "")
    for call in (
        lambda: dt.jsd(x, x),
        lambda: dt.kl_div(x, x),
        lambda: dt.tvd(x, x),
        lambda: dt.kl_div(torch.zeros(2, 8), x),
        lambda: dt.fused_linear_jsd(x, x.t(), x, x.t()),
    ):
        with pytest.raises(distil.InvalidArgument, match=name):
            call()


def test_probabilities_slightly_negative():
    """TVD and KL on probabilities a rounding made slightly negative give finite losses (the
    negative entries taken as 0), never NaN."""
    g = gen(9)
    p = torch.softmax(normal(g, (4, 16), torch.float32), -1)
    q = torch.softmax(normal(g, (4, 16), torch.float32), -1)
    p[0, 0], q[1, 3] = -1e-7, -2e-7
    p.requires_grad_(True)
    loss = dt.tvd(p, q, reduction="sum")
    want = 0.5 * (p.detach().clamp(min=0) - q.clamp(min=0)).abs().sum()
    check("tvd", loss, want, 1e-5)
    loss.backward()
    assert torch.isfinite(p.grad).all()
    kl = dt.kl_div(torch.log_softmax(normal(g, (4, 16), torch.float32), -1), q)
    assert torch.isfinite(kl)


def test_module_temperature_zero_is_invalid_argument():
    for make in (
        lambda: dt.FusedLinearJSD(temperature=0.0),
        lambda: dt.FusedLinearJSDLoss(temperature=0.0),
        lambda: dt.LigerFusedLinearJSD(temperature=float("nan")),
    ):
        with pytest.raises(distil.InvalidArgument, match="temperature"):
            make()
    mod = dt.FusedLinearJSDLoss()
    with pytest.raises(distil.InvalidArgument, match="temperature 0.0 must be"):
        mod.temperature = 0.0
    assert mod.temperature == 1.0 and mod.options.temperature == 1.0


def test_double_backward_is_refused():
    """distil's gradients come from the forward call: differentiating them again is refused
    at the second differentiation (it would silently give zeros)."""
    g = gen(10)
    x = log_probs(g, (4, 16), torch.float32).requires_grad_(True)
    y = log_probs(g, (4, 16), torch.float32)
    (gx,) = torch.autograd.grad(dt.jsd(x, y), x, create_graph=True)
    with pytest.raises(distil.Error, match="not differentiable"):
        (gx * gx).sum().backward()
    xs = normal(g, (4, 8), torch.float32).requires_grad_(True)
    ws = normal(g, (16, 8), torch.float32).requires_grad_(True)
    loss = dt.fused_linear_jsd_loss(
        xs,
        ws,
        normal(g, (4, 8), torch.float32),
        normal(g, (16, 8), torch.float32),
        labels_for(g, 4, 16),
    )
    gxs, gws = torch.autograd.grad(loss, (xs, ws), create_graph=True)
    with pytest.raises(distil.Error, match="not differentiable"):
        (gws.square().sum() + gxs.sum()).backward()


def test_compiled_bad_shape_same_error():
    """Under torch.compile(fullgraph=True) a bad shape raises what the eager call raises."""
    g = gen(11)
    xs, ws, xt, wt = (normal(g, s, torch.float32) for s in ((8, 8), (32, 8), (4, 8), (32, 8)))
    lab = labels_for(g, 8, 32)
    with pytest.raises(distil.InvalidArgument) as eager:
        dt.fused_linear_jsd_loss(xs, ws, xt, wt, lab)
    torch._dynamo.reset()
    compiled = torch.compile(dt.fused_linear_jsd_loss, fullgraph=True)
    with pytest.raises(distil.InvalidArgument) as traced:
        compiled(xs, ws, xt, wt, lab)
    assert str(traced.value) == str(eager.value)
    x, y = log_probs(g, (4, 16), torch.float32), log_probs(g, (5, 16), torch.float32)
    with pytest.raises(distil.InvalidArgument) as eager:
        dt.jsd(x, y)
    torch._dynamo.reset()
    with pytest.raises(distil.InvalidArgument) as traced:
        torch.compile(dt.jsd, fullgraph=True)(x, y)
    assert str(traced.value) == str(eager.value)


def test_torch_out_of_memory():
    """Any allocation's failure in distil.torch is torch.OutOfMemoryError (the library's own,
    and torch's CPU allocator's RuntimeError alike)."""
    from distil.torch import _ops

    with pytest.raises(torch.OutOfMemoryError):
        _ops._torch_errors(lambda: torch.empty(1 << 62, dtype=torch.uint8))


def test_dlpack_out_of_memory(monkeypatch):
    """An output the array framework cannot allocate is distil.OutOfMemory (a MemoryError), as
    the library's own allocation failures are."""
    g = gen(12)
    x = log_probs(g, (4, 16), torch.float32).numpy()

    def refuse(*args, **kwargs):
        raise MemoryError("Unable to allocate")

    monkeypatch.setattr(np, "empty", refuse)
    with pytest.raises(distil.OutOfMemory, match="Unable to allocate"):
        distil.jsd(x, x)
