#!/usr/bin/env python3
"""torch_gap.py - where distil.torch's device time per JSD call goes beyond the C call's.

At the JSD seed shape (fp32 log-probs [T, 128256], beta 0.5) on CUDA, the device time per call,
with `--queue` calls queued between two CUDA events (so host time hides behind the device's), of:
  c          distil_jsd through ctypes on tensors allocated once (the library alone)
  forward    distil.torch.jsd(x, y) with x.requires_grad (the gradient is computed, not used)
  backward   the same plus loss.backward() (the device-side scale of the saved gradient and
             autograd's accumulation into x.grad, cleared before each call)
Prints a Markdown table (ms per call, median of --reps samples) and, with --json, the numbers.
  usage: python bench/torch_gap.py [--T 1024,8192] [--queue 8] [--reps 15] [--json FILE]
"""
import argparse
import json
import statistics

import torch


def timed(fn, queue, reps):
    """Median device ms per call of fn over reps samples of `queue` back-to-back calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(queue):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / queue)
    return statistics.median(samples)


def point(t, vocab, queue, reps):
    import distil.torch as dt
    from distil import _calls, _lib
    from distil.torch import _ops

    x = torch.log_softmax(torch.randn(t, vocab, device="cuda"), -1).requires_grad_()
    y = torch.log_softmax(torch.randn(t, vocab, device="cuda"), -1)
    xd = x.detach()
    ctx = _ops.context_for(xd)
    desc, nbytes = _calls.jsd_plan(ctx, t, vocab, (vocab, vocab, vocab), _lib.F32, 0.5, -100,
                                   "batchmean")
    work = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda")
    loss = torch.empty((), device="cuda")
    grad = torch.empty_like(xd)

    def c_call():
        _ops.context_for(xd)  # binds the current stream, as every distil.torch call does
        _calls.run_jsd(ctx, desc, work.data_ptr(), nbytes, xd.data_ptr(), y.data_ptr(), 0,
                       loss.data_ptr(), grad.data_ptr())

    def forward():
        dt.jsd(x, y)

    def backward():
        x.grad = None
        dt.jsd(x, y).backward()

    out = {"T": t, "V": vocab}
    for name, fn in (("c", c_call), ("forward", forward), ("backward", backward)):
        out[name] = timed(fn, queue, reps)
    del grad, work
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", default="1024,8192")
    ap.add_argument("--V", type=int, default=128256)
    ap.add_argument("--queue", type=int, default=8)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gap.py: no CUDA device; nothing measured")
        return
    rows = [point(int(t), a.V, a.queue, a.reps) for t in a.T.split(",")]
    print(f"| T | C call (ms) | distil.torch forward | + backward | forward / C | backward / C |\n"
          f"|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['T']} | {r['c']:.3f} | {r['forward']:.3f} | {r['backward']:.3f} | "
              f"{r['forward'] / r['c']:.3f} | {r['backward'] / r['c']:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
