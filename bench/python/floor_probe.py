#!/usr/bin/env python3
"""floor_probe.py - the GPU's own ceilings, measured in the same run as the benchmarks: a bf16
matrix product (8192 x 8192 x 8192 through PyTorch / cuBLAS) in TFLOP/s and a
device-to-device copy (1 GiB, bytes read + written) in TB/s, each two ways:
  burst      mean of 10 timed calls after 3 warm-ups (how docs/DESIGN.md's floors were measured);
  sustained  back-to-back calls for --seconds, timed over the last half, after the card has
             settled at its power limit (how a long distil-bench point runs).
usage: python3 bench/python/floor_probe.py [--seconds 4] [--json out.json]
"""

import argparse
import json
import sys
import time


def timed(torch, fn, calls):
    """ms per call of `calls` back-to-back calls, between two events."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(calls):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / calls


def burst_and_sustained(torch, fn, seconds):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    burst = timed(torch, fn, 10)
    per = max(1, int(50.0 / max(burst, 1e-3)))  # ~50 ms batches
    start, samples = time.perf_counter(), []
    while time.perf_counter() - start < seconds:
        samples.append((time.perf_counter() - start, timed(torch, fn, per)))
    late = [ms for t, ms in samples if t >= seconds / 2] or [samples[-1][1]]
    return burst, sum(late) / len(late)


def gemm_tflops(torch, seconds):
    """(burst, sustained) TFLOP/s of the 8192^3 bf16 GEMM on random data."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    burst, sus = burst_and_sustained(torch, lambda: torch.mm(a, b, out=c), seconds)
    flop = 2.0 * n * n * n
    return flop / burst / 1e9, flop / sus / 1e9


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.seconds <= 0:
        p.error("--seconds must be > 0")
    import torch

    if not torch.cuda.is_available():
        print("floor_probe: no CUDA device")
        return 2
    g_burst, g_sus = gemm_tflops(torch, args.seconds)
    src = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    moved = 2.0 * src.numel()
    c_burst, c_sus = burst_and_sustained(torch, lambda: dst.copy_(src), args.seconds)
    out = {
        "device": torch.cuda.get_device_name(),
        "gemm_bf16_tflops_burst": g_burst,
        "gemm_bf16_tflops_sustained": g_sus,
        "copy_tbps_burst": moved / c_burst / 1e9,
        "copy_tbps_sustained": moved / c_sus / 1e9,
        "seconds": args.seconds,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for k, v in out.items():
        print(f"{k}: {v:.1f}" if isinstance(v, float) else f"{k}: {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
