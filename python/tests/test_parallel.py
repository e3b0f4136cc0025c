"""Vocabulary-parallel losses through torch.distributed (docs/SPEC.md §8): gloo on CPU tensors,
world sizes 2 and 3 (one spawn of three processes, a subgroup of two), unequal shards. Each
rank's loss equals
the unsharded distil loss on the same inputs within docs/SPEC.md §3 and is bitwise the same on
every rank and on a rerun; the gradients are the unsharded gradients' rows / columns of the
shard, the student hidden states' gradient whole."""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import FUSED_F32_GRAD, HAVE_CPU

import distil.torch as dt

# The gloo test needs the cpu backend; the NCCL one only a GPU (a GPU wheel has no cpu backend).
_needs_gloo = pytest.mark.skipif(
    not (HAVE_CPU and dist.is_available()),
    reason="needs the cpu backend and torch.distributed (gloo)",
)


def _bounds(v, world, rank):
    """Widths proportional to rank + 1, as tests/common/test_tp_shard.c."""
    total = world * (world + 1) // 2
    acc = sum(r + 1 for r in range(rank))
    return v * acc // total, (v if rank == world - 1 else v * (acc + rank + 1) // total)


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def _inputs(seed, t=24, v=401, hs=16, ht=24):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(t, hs, generator=g)
    ws = torch.randn(v, hs, generator=g) * 3 / hs**0.5
    bs = torch.randn(v, generator=g) * 0.5
    xt = torch.randn(t, ht, generator=g)
    wt = torch.randn(v, ht, generator=g) * 3 / ht**0.5
    labels = torch.randint(0, v, (t,), generator=g)
    labels[::5] = -100
    return xs, ws, bs, xt, wt, labels


def _fused_rank(rank, world, group):
    if True:
        xs, ws, bs, xt, wt, labels = _inputs(7)
        v0, v1 = _bounds(ws.shape[0], world, rank)
        whole = dt.FusedLinearJSDLoss(
            0.4, 0.6, beta=0.3, temperature=1.5, chunk_rows=7, return_soft_hard_loss=True
        )
        par = dt.FusedLinearJSDLoss(
            0.4,
            0.6,
            beta=0.3,
            temperature=1.5,
            chunk_rows=7,
            return_soft_hard_loss=True,
            process_group=group,
        )
        x0, w0, b0 = (t.clone().requires_grad_() for t in (xs, ws, bs))
        ref = whole(x0, w0, xt, wt, labels, b0)
        ref[0].backward()
        outs = []
        for _ in range(2):
            x1 = xs.clone().requires_grad_()
            w1 = ws[v0:v1].clone().requires_grad_()
            b1 = bs[v0:v1].clone().requires_grad_()
            got = par(x1, w1, xt, wt[v0:v1].contiguous(), labels, b1)
            got[0].backward()
            outs.append((torch.stack(got).detach(), x1.grad, w1.grad, b1.grad))
        loss, gx, gw, gb = outs[0]
        for k in range(3):
            assert abs(float(loss[k]) - float(ref[k])) <= 1e-5 * abs(float(ref[k])), (k, loss, ref)
        assert _rel(gx, x0.grad) <= FUSED_F32_GRAD
        assert _rel(gw, w0.grad[v0:v1]) <= FUSED_F32_GRAD
        assert _rel(gb, b0.grad[v0:v1]) <= FUSED_F32_GRAD
        for a, b in zip(outs[0], outs[1], strict=False):
            assert torch.equal(a, b), "rerun differs"
        every = [torch.zeros(3) for _ in range(world)]
        dist.all_gather(every, loss, group=group)
        assert all(torch.equal(e, every[0]) for e in every), "ranks' losses differ"


def _jsd_rank(rank, world, group):
    if True:
        g = torch.Generator().manual_seed(3)
        t, v = 12, 333
        x = torch.log_softmax(torch.randn(t, v, generator=g) * 2, -1)
        y = torch.log_softmax(torch.randn(t, v, generator=g) * 2, -1)
        labels = torch.randint(0, v, (t,), generator=g)
        labels[::3] = -100
        v0, v1 = _bounds(v, world, rank)
        x0 = x.clone().requires_grad_()
        ref = dt.JSD(beta=0.4)(x0, y, labels)
        ref.backward()
        x1 = x[:, v0:v1].contiguous().requires_grad_()
        got = dt.JSD(beta=0.4, process_group=group)(x1, y[:, v0:v1].contiguous(), labels)
        got.backward()
        assert abs(float(got) - float(ref)) <= 1e-5 * abs(float(ref))
        assert _rel(x1.grad, x0.grad[:, v0:v1]) <= 1e-5


def _rank(rank, init):
    """Three processes: world size 3 on the whole group, world size 2 on ranks 0 and 1 (one
    spawn: starting a process that imports torch costs seconds here)."""
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=3)
    pair = None
    try:
        pair = dist.new_group([0, 1])
        for world, group in ((3, dist.group.WORLD), (2, pair)):
            if rank < world:
                _fused_rank(rank, world, group)
                _jsd_rank(rank, world, group)
            dist.barrier()
    finally:
        # the subgroup first, on its members, then the default group: a gloo group left to
        # the process's exit can abort it ("terminate called without an active exception")
        if pair is not None and rank < 2:
            dist.destroy_process_group(pair)
        dist.destroy_process_group()


@_needs_gloo
def test_gloo_world_2_and_3():
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "rendezvous")
        mp.spawn(_rank, args=(init,), nprocs=3, join=True)


@pytest.mark.skipif(
    not (torch.cuda.is_available() and dist.is_available() and dist.is_nccl_available()),
    reason="needs a CUDA GPU and torch.distributed with NCCL",
)
def test_cuda_nccl_world_1():
    """World size 1 through ProcessGroupNCCL on one GPU: the fused loss's row statistics go
    through the callback communicator over device buffers, the JSD's share through all_reduce."""
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group(
            "nccl", init_method="file://" + os.path.join(d, "r"), rank=0, world_size=1
        )
        try:
            dev = torch.device("cuda", 0)
            xs, ws, bs, xt, wt, labels = (t.to(dev) for t in _inputs(11, t=64, v=1031))
            args = dict(beta=0.5, temperature=2.0, return_soft_hard_loss=True)
            x0, w0 = xs.clone().requires_grad_(), ws.clone().requires_grad_()
            ref = dt.FusedLinearJSDLoss(0.5, 0.5, **args)(x0, w0, xt, wt, labels, bs)
            ref[0].backward()
            x1, w1 = xs.clone().requires_grad_(), ws.clone().requires_grad_()
            got = dt.FusedLinearJSDLoss(0.5, 0.5, process_group=dist.group.WORLD, **args)(
                x1, w1, xt, wt, labels, bs
            )
            got[0].backward()
            for a, b in zip(got, ref, strict=False):
                assert abs(float(a) - float(b)) <= 1e-5 * abs(float(b))
            assert _rel(x1.grad, x0.grad) <= FUSED_F32_GRAD
            assert _rel(w1.grad, w0.grad) <= FUSED_F32_GRAD
            x = torch.log_softmax(torch.randn(8, 300, device=dev), -1)
            y = torch.log_softmax(torch.randn(8, 300, device=dev), -1)
            j0 = dt.JSD()(x, y)
            j1 = dt.JSD(process_group=dist.group.WORLD)(x, y)
            assert abs(float(j1) - float(j0)) <= 1e-5 * abs(float(j0))
        finally:
            dist.destroy_process_group()
