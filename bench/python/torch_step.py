#!/usr/bin/env python3
"""torch_step.py - what distil costs inside a PyTorch program (bench/RESULTS.md, "Python").

Two measurements, on CUDA when present (else the CPU, smaller):
  overhead  host time of one call at a tiny shape, where the GPU time is negligible: the raw
            C call through ctypes, distil.torch's op (forward), and Liger's module for
            comparison; median over many calls, the queue drained every 64 calls.
  step      one training step of examples/distill_tiny.py's student (Llama decoder) with the
            fused loss by distil, Liger-Kernel and torch.compile of the plain PyTorch loss:
            median step time and peak allocated memory.
Prints Markdown tables; --json writes the numbers.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def timed_host(fn, n=512, drain=64):
    """Median host microseconds of fn() over n calls (the device drained every `drain`)."""
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
        if torch.cuda.is_available() and i % drain == drain - 1:
            torch.cuda.synchronize()
    return statistics.median(times[n // 8 :])


def overhead(device):
    import distil.torch as dt
    from distil import _calls, _check, _lib, _options
    from distil.torch import _ops

    t, v, hs = 8, 256, 64
    x = torch.log_softmax(torch.randn(t, v, device=device), -1)
    y = torch.log_softmax(torch.randn(t, v, device=device), -1)
    xs = torch.randn(t, hs, device=device, dtype=torch.bfloat16)
    ws = torch.randn(v, hs, device=device, dtype=torch.bfloat16)
    lab = torch.randint(0, v, (t,), device=device)
    ctx = _ops.context_for(x)
    plan = _calls.jsd_plan(ctx, _check.JsdShape(t, v, v, v, _lib.F32), _options.JsdOptions())
    ws_buf = torch.empty(max(plan[1], 1), dtype=torch.uint8, device=device)
    loss = torch.empty((), device=device)
    grad = torch.empty_like(x)
    rows = {
        "jsd: C call through ctypes (descriptor cached)": lambda: _calls.run_jsd(
            ctx,
            plan,
            ws_buf.data_ptr(),
            _calls.JsdAddrs(x.data_ptr(), y.data_ptr(), 0, loss.data_ptr(), grad.data_ptr()),
        ),
        "jsd: distil.torch.jsd, loss + grad (forward)": lambda: dt.jsd(x.requires_grad_(), y),
        "fused: distil.torch.FusedLinearJSDLoss (forward, grads computed)": lambda: (
            dt.FusedLinearJSDLoss()(xs.requires_grad_(), ws.requires_grad_(), xs, ws, lab)
        ),
    }
    try:
        from liger_kernel.chunked_loss import LigerFusedLinearJSDLoss
        from liger_kernel.transformers import LigerJSD

        rows["jsd: Liger LigerJSD (forward)"] = lambda: LigerJSD()(x.requires_grad_(), y)
        rows["fused: Liger LigerFusedLinearJSDLoss (forward)"] = lambda: LigerFusedLinearJSDLoss(
            compiled=False
        )(xs, ws, xs, ws, lab)
    except ImportError:
        pass
    out = {}
    for name, fn in rows.items():
        for _ in range(16):
            fn()
        out[name] = timed_host(fn)
    return out


def training_step(device, impl, steps, batch, seq, vocab):
    import distill_tiny as ex

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    student, teacher = ex.make_models(vocab=vocab, dtype=dtype)
    student, teacher = student.to(device), teacher.to(device)
    data = ex.MarkovData(vocab)
    opt = torch.optim.AdamW(student.parameters(), lr=1e-3)
    if impl == "distil":
        loss_fn = ex.distil_loss_fn()
    elif impl == "liger":
        from liger_kernel.chunked_loss import LigerFusedLinearJSDLoss

        loss_fn = LigerFusedLinearJSDLoss(
            weight_hard_loss=0.5, weight_soft_loss=0.5, beta=0.5, temperature=1.0, compiled=True
        )
    else:
        loss_fn = torch.compile(ex.torch_loss)
    batches = [data.batch(batch, seq).to(device) for _ in range(4)]
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    for i in range(steps):
        t0 = time.perf_counter()
        sh, th, labels = ex.head_inputs(student, teacher, batches[i % 4])
        sh, th = sh.reshape(-1, sh.shape[-1]), th.reshape(-1, th.shape[-1])
        loss = loss_fn(sh, student.lm_head.weight, th, teacher.lm_head.weight, labels.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    return {
        "ms_median": statistics.median(times[steps // 4 :]),
        "peak_bytes": peak,
        "loss": loss.item(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--impls", default="distil,liger,compile")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = (8, 1024, 128256) if device == "cuda" else (4, 64, 2048)
    res = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "overhead_us": overhead(device),
        "step": {},
        "step_shape": dict(zip(("batch", "seq", "vocab"), shape, strict=False)),
    }
    print(f"# distil inside PyTorch on {res['device']} (torch {torch.__version__})\n")
    print("| call (host time, median) | µs |\n|---|---|")
    for k, v in res["overhead_us"].items():
        print(f"| {k} | {v:.1f} |")
    dt_name = "bf16" if device == "cuda" else "fp32"
    print(
        f"\n| training step, batch {shape[0]} x seq {shape[1]}, vocab {shape[2]}, {dt_name} "
        "(examples/distill_tiny.py models) | ms (median) | peak allocated |\n|---|---|---|"
    )
    for impl in args.impls.split(","):
        try:
            r = training_step(device, impl, args.steps, *shape)
        except Exception as e:  # Liger missing, compile failure: a row, not a crash
            print(f"| {impl} | {type(e).__name__}: {str(e).splitlines()[0][:80]} | |")
            continue
        res["step"][impl] = r
        print(f"| {impl} | {r['ms_median']:.2f} | {r['peak_bytes'] / 2**20:.0f} MiB |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
