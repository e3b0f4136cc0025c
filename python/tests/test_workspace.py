"""Where a distil.torch call's workspace comes from (distil/torch/_ops.py, _workspace).

A small cpu workspace is the context's own (nothing lent, no tensor per call); a large one is
lent from torch per call. On a GPU the eager path keeps one small block per context for the
stream it is bound to; a call under CUDA-graph capture takes its own from the graph's pool, so
that replacing the kept block later cannot free memory a graph still uses. Results are checked
against the float64 reference under docs/SPEC.md §3's bounds.
"""

import pytest
import torch
from conftest import check, gen, labels_for, leaf, log_probs, ref_jsd

import distil
import distil.torch as dt
from distil import _calls, _check, _lib, _options
from distil.torch import _ops

HAVE_CUDA = torch.cuda.is_available() and distil.backends().get("cuda", 0) > 0
needs_cuda = pytest.mark.skipif(
    not HAVE_CUDA,
    reason="no CUDA device (or libdistil without the cuda backend): CUDA workspace tests skipped",
)


def _jsd_case(seed, t, v, device):
    g = gen(seed)
    x = leaf(log_probs(g, (t, v), torch.float32), device)
    y = log_probs(g, (t, v), torch.float32).to(device)
    return x, y, labels_for(g, t, v).to(device)


def _jsd_checked(name, x, y, lab):
    """dt.jsd forward + backward, loss and every gradient element against the reference."""
    x.grad = None
    loss = dt.jsd(x, y, lab)
    loss.backward()
    xr = x.detach().double().cpu().requires_grad_(True)
    ref = ref_jsd(xr, y.double().cpu(), lab.cpu())
    ref.backward()
    check(f"{name} loss", loss, ref, 1e-5)
    check(f"{name} grad", x.grad, xr.grad, 1e-5)


@pytest.mark.parametrize("rows", [7, 300000])
def test_cpu_workspace(rows):
    # 7 rows: a few hundred bytes, the context's own; 300000 rows of 2: over 1 MiB, lent.
    x, y, lab = _jsd_case(40, rows, 2 if rows > 1000 else 53, "cpu")
    _jsd_checked(f"rows {rows}", x, y, lab)
    ctx = _ops.context_for(x)
    if rows > 1000:
        assert ctx.lent is not None, "a large cpu workspace is lent from torch"
    else:
        assert ctx.lent is None, "a small cpu workspace is the context's own: nothing lent"


class _Ctx:
    """What _kept_workspace reads and writes of a context."""

    def __init__(self):
        self.stream, self.kept = 0, None


def test_kept_workspace_per_stream_and_size():
    ctx, like = _Ctx(), torch.empty(0)
    a = _ops._kept_workspace(ctx, like, 100)
    assert a.numel() >= 100 and _ops._kept_workspace(ctx, like, 200) is a
    ctx.stream = 12345  # another stream: a block of its own
    b = _ops._kept_workspace(ctx, like, 100)
    assert b is not a and ctx.kept == (12345, b)
    c = _ops._kept_workspace(ctx, like, b.numel() + 1)  # larger than the block: replaced
    assert c is not b and c.numel() > b.numel()


@needs_cuda
def test_cuda_kept_workspace_across_streams():
    x, y, lab = _jsd_case(41, 64, 2003, "cuda")
    want = dt.jsd(x, y, lab).detach()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    got = []
    for i in range(6):  # alternate, the first stream's calls queued behind ~50 ms of spinning
        s = streams[i % 2]
        with torch.cuda.stream(s):
            if i % 2 == 0:
                torch.cuda._sleep(50_000_000)
            got.append(dt.jsd(x.detach(), y, lab))
    torch.cuda.synchronize()
    for i, loss in enumerate(got):
        assert torch.equal(loss, want), f"call {i}: {loss.item()} != {want.item()}"
    _jsd_checked("after the streams", x, y, lab)


@needs_cuda
def test_cuda_capture_leaves_the_kept_workspace():
    x, y, lab = _jsd_case(42, 32, 1271, "cuda")
    _jsd_checked("eager", x, y, lab)  # the context keeps a block for this stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dt.jsd(x.detach(), y, lab)  # the side stream's own kept block, before capture
        ctx = _ops.context_for(x)
        kept = ctx.kept[1]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            static = dt.jsd(x.detach(), y, lab)
        assert ctx.kept[1] is kept, "capture must not take or replace the kept block"
        # A larger eager call replaces the kept block; torch may hand its memory out again.
        rows = kept.numel() // 2  # the jsd workspace holds a float per row (core/row_loss.c)
        shape = _check.JsdShape(rows, 3, 3, 3, _lib.F32)
        need = _calls.jsd_plan(ctx, shape, _options.JsdOptions())[1]
        assert kept.numel() < need <= _ops._SMALL_WORKSPACE, "the larger call must replace it"
        bx, by, blab = _jsd_case(43, rows, 3, "cuda")
        dt.jsd(bx.detach(), by, blab)
        assert ctx.kept[1] is not kept
        size = kept.numel()
        del kept
        filler = torch.full((size,), 7, dtype=torch.uint8, device="cuda")
        graph.replay()
    torch.cuda.synchronize()
    assert bool((filler == 7).all()), "the replayed graph wrote into memory it does not own"
    check(
        "replayed loss",
        static,
        ref_jsd(x.detach().double().cpu(), y.double().cpu(), lab.cpu()),
        1e-5,
    )
