"""CUDA-only behaviour of distil.torch: the caller's stream (default and others), CUDA-graph
capture and replay, the workspace from torch's allocator, one context per device. Without a
GPU every test here is skipped with a message."""

import pytest
import torch
from conftest import check, gen, labels_for, log_probs, normal, ref_fused, ref_jsd

import distil
import distil.torch as dt

HAVE_CUDA = torch.cuda.is_available() and distil.backends().get("cuda", 0) > 0
pytestmark = pytest.mark.skipif(
    not HAVE_CUDA,
    reason="no CUDA device (or libdistil without the cuda backend): CUDA tests skipped",
)


def _jsd_inputs(seed, t=64, v=32003):
    g = gen(seed)
    return log_probs(g, (t, v), torch.float32).cuda(), log_probs(g, (t, v), torch.float32).cuda()


def _delayed_copy(dst, src):
    """dst <- src on the current stream, behind ~50 ms of spinning on that stream."""
    torch.cuda._sleep(50_000_000)
    dst.copy_(src, non_blocking=True)


def _fused_inputs(seed, t, v, hs, ht, dtype):
    """(xs, ws) leaves and (xt, wt, labels) on the GPU, random and non-zero."""
    g = gen(seed)
    xs = normal(g, (t, hs), dtype).cuda().requires_grad_(True)
    ws = normal(g, (v, hs), dtype, 0.2).cuda().requires_grad_(True)
    xt, wt = normal(g, (t, ht), dtype).cuda(), normal(g, (v, ht), dtype).cuda()
    return xs, ws, xt, wt, labels_for(g, t, v).cuda()


@pytest.mark.parametrize("stream_kind", ["default", "side"])
def test_runs_on_the_current_stream(stream_kind):
    x, y = _jsd_inputs(1)
    want = dt.jsd(x, y)
    torch.cuda.synchronize()
    stale = y.clone()  # loss 0 if read before the copy lands
    stream = torch.cuda.current_stream() if stream_kind == "default" else torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _delayed_copy(stale, x)
        got = dt.jsd(stale, y)
    torch.cuda.synchronize()
    assert torch.equal(got, want), f"{stream_kind} stream: {got.item()} != {want.item()}"


def test_cuda_graph_capture_and_replay():
    t, v, hs, ht = 96, 4099, 64, 96
    xs, ws, xt, wt, lab = _fused_inputs(2, t, v, hs, ht, torch.bfloat16)
    loss_fn = dt.FusedLinearJSDLoss()
    dt.prepare("cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture, as torch's recipe does
        for _ in range(2):
            loss_fn(xs, ws, xt, wt, lab).backward()
    torch.cuda.current_stream().wait_stream(side)
    xs.grad, ws.grad = None, None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = loss_fn(xs, ws, xt, wt, lab)
        static_loss.backward()
    for seed in (3, 4):
        with torch.no_grad():
            xs.copy_(normal(gen(seed), (t, hs), torch.bfloat16).cuda())
        graph.replay()
        torch.cuda.synchronize()
        rxs = xs.detach().double().cpu().requires_grad_(True)
        rws = ws.detach().double().cpu().requires_grad_(True)
        ref, _, _ = ref_fused(rxs, rws, xt.double().cpu(), wt.double().cpu(), lab.cpu())
        ref.backward()
        check("replayed loss", static_loss, ref, 2e-3)
        check("replayed grad_student_input", xs.grad, rxs.grad, 1e-2)
        check("replayed grad_student_weight", ws.grad, rws.grad, 1e-2)


def test_compile_reduce_overhead():
    """torch.compile's CUDA-graph mode (cudagraph trees) around the fused loss + backward."""
    t, v, hs, ht = 64, 2051, 32, 48
    xs, ws, xt, wt, lab = _fused_inputs(9, t, v, hs, ht, torch.float32)
    loss_fn = dt.FusedLinearJSDLoss(beta=0.3)

    def step(a, b):
        loss = loss_fn(a, b, xt, wt, lab)
        loss.backward()
        return loss.detach()

    compiled = torch.compile(step, mode="reduce-overhead")
    for _ in range(4):
        xs.grad, ws.grad = None, None
        got = compiled(xs, ws).clone()
        gx, gw = xs.grad.clone(), ws.grad.clone()
    rxs = xs.detach().double().cpu().requires_grad_(True)
    rws = ws.detach().double().cpu().requires_grad_(True)
    ref, _, _ = ref_fused(rxs, rws, xt.double().cpu(), wt.double().cpu(), lab.cpu(), beta=0.3)
    ref.backward()
    check("cudagraph loss", got, ref, 1e-5)
    check("cudagraph grad_student_input", gx, rxs.grad, 1e-4)
    check("cudagraph grad_student_weight", gw, rws.grad, 1e-4)


def test_workspace_from_torch_allocator():
    t, v, hs, ht = 512, 32000, 256, 384
    xs, ws, xt, wt, lab = _fused_inputs(5, t, v, hs, ht, torch.bfloat16)
    loss_fn = dt.FusedLinearJSDLoss()
    loss_fn(xs, ws, xt, wt, lab)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    loss_fn(xs, ws, xt, wt, lab)
    torch.cuda.synchronize()
    # The [T, V] fp32 logits of both heads pass through torch's allocator.
    assert torch.cuda.max_memory_allocated() - before >= 2 * t * v * 4


def test_default_stream_jsd_matches_reference():
    x, y = _jsd_inputs(6, t=33, v=1271)
    lab = labels_for(gen(7), 33, 1271).cuda()
    xr = x.detach().double().cpu().requires_grad_(True)
    x = x.requires_grad_(True)
    loss = dt.JSD(beta=0.3)(x, y, lab)
    (loss * 2).backward()
    ref = ref_jsd(xr, y.double().cpu(), lab.cpu(), 0.3)
    (ref * 2).backward()
    check("loss", loss, ref, 1e-5)
    check("grad", x.grad, xr.grad, 1e-5)


@pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="one GPU: the second device's context is not tested"
)
def test_contexts_per_device():
    outs = []
    for d in range(2):
        with torch.cuda.device(d):
            x, y = (t.to(f"cuda:{d}") for t in _jsd_inputs(8, t=8, v=100))
            outs.append(dt.jsd(x, y).cpu())
    assert torch.equal(outs[0], outs[1])
