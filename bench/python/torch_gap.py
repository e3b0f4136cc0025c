#!/usr/bin/env python3
"""torch_gap.py - where distil.torch's device time per call goes beyond the C call's.

At the JSD seed shape (fp32 log-probs [T, 128256], beta 0.5), or with --workload fused at the
fused seed shape (bf16, Hs 2048, Ht 4096, V 128256, hard CE + JSD, the student's gradients
wanted) on CUDA, the device time per call,
with `--queue` calls queued between two CUDA events (so host time hides behind the device's),
the variants taken in turn in each of --reps rounds, of:
  c          the library's call through ctypes on tensors allocated once (the library alone)
  forward    distil.torch.jsd(x, y) with x.requires_grad (the gradient is computed, not used);
             fused: FusedLinearJSDLoss()(xs, Ws, xt, Wt, labels), xs and Ws requiring grad
  backward   the same plus loss.backward() (the device-side scale of the saved gradient and
             autograd's accumulation into x.grad, cleared before each call)
  c fresh    the C call writing a gradient allocated per call from torch's caching allocator,
             as distil.torch's is (the library alone, but on distil.torch's buffers)
Prints a Markdown table (ms per call, median of --reps samples) and, with --json, the numbers.
--profile adds, per variant, every kernel torch.profiler saw in `queue` calls: launches and
device µs per call, and the device's busy time against the span (where a gap per call goes:
more kernels, slower kernels, or idle time between them).
  usage: python bench/python/torch_gap.py [--workload jsd|fused] [--T 1024,8192] [--queue 8]
                                          [--reps 15] [--sets 3] [--json FILE] [--profile]
"""

import argparse
import itertools
import json
import statistics

import torch


def sample(fn, queue):
    """Device ms per call of `queue` back-to-back calls of fn between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(queue):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / queue


def timed(variants, queue, reps):
    """{name: median device ms per call} over reps samples of each variant, the variants taken
    in turn within each round (at T 8192 the card sits at its power limit and its clock drifts
    over a run: one variant after another would time the drift, bench/RESULTS.md)."""
    for _, fn in variants:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples = {name: [] for name, _ in variants}
    for _ in range(reps):
        for name, fn in variants:
            samples[name].append(sample(fn, queue))
    return {name: statistics.median(v) for name, v in samples.items()}


def point(t, vocab, queue, reps, sets, profile=False):
    import distil.torch as dt
    from distil import _calls, _check, _lib, _options
    from distil.torch import _ops

    # `sets` input pairs, the next one each call in every variant (as distil-bench rotates its
    # inputs): the kernel's time depends on where its buffers lie (up to 7% at T 8192 between
    # two allocations of the same tensors, bench/RESULTS.md), so every variant sees the same mix.
    pairs = [
        (
            torch.log_softmax(torch.randn(t, vocab, device="cuda"), -1).requires_grad_(),
            torch.log_softmax(torch.randn(t, vocab, device="cuda"), -1),
        )
        for _ in range(sets)
    ]
    turn = itertools.cycle(range(sets))
    xd = pairs[0][0].detach()
    ctx = _ops.context_for(xd)
    plan = _calls.jsd_plan(
        ctx, _check.JsdShape(t, vocab, vocab, vocab, _lib.F32), _options.JsdOptions()
    )
    work = torch.empty(max(plan[1], 1), dtype=torch.uint8, device="cuda")
    loss = torch.empty((), device="cuda")
    grad = torch.empty_like(xd)

    def c_call(g=None):
        x, y = pairs[next(turn)]
        _ops.context_for(xd)  # binds the current stream, as every distil.torch call does
        _calls.run_jsd(
            ctx,
            plan,
            work.data_ptr(),
            _calls.JsdAddrs(
                x.data_ptr(),
                y.data_ptr(),
                0,
                loss.data_ptr(),
                (grad if g is None else g).data_ptr(),
            ),
        )

    def c_fresh():
        c_call(torch.empty_like(xd))

    def forward():
        x, y = pairs[next(turn)]
        dt.jsd(x, y)

    def backward():
        x, y = pairs[next(turn)]
        x.grad = None
        dt.jsd(x, y).backward()
        x.grad = None  # the gradient's memory goes back before the next call, as in training

    variants = (("c", c_call), ("c fresh", c_fresh), ("forward", forward), ("backward", backward))
    return measured({"T": t, "V": vocab}, variants, queue, reps, profile)


def measured(out, variants, queue, reps, profile):
    """out with each variant's time (and kernels under profile) added."""
    out.update(timed(variants, queue, reps))
    if profile:
        try:
            out["profile"] = {name: profiled(fn, queue) for name, fn in variants}
        except Exception as e:  # a profiler that cannot run here: the timings still print
            print(f"torch_gap.py: torch.profiler failed: {e!r}")
    return out  # its buffers go with the variants' closures; the caller empties torch's cache


def fused_point(t, vocab, queue, reps, sets, profile=False):
    """point() for the fused loss: its variants on `sets` rotated input sets of the seed shape."""
    import distil.torch as dt
    from distil import _calls, _check, _lib, _options
    from distil.torch import _ops

    hs, ht, bf = 2048, 4096, torch.bfloat16

    def inputs():
        return {
            "xs": torch.randn(t, hs, device="cuda", dtype=bf).requires_grad_(),
            "ws": (torch.randn(vocab, hs, device="cuda", dtype=bf) / 32).requires_grad_(),
            "xt": torch.randn(t, ht, device="cuda", dtype=bf),
            "wt": torch.randn(vocab, ht, device="cuda", dtype=bf) / 45,
            "lab": torch.randint(0, vocab, (t,), device="cuda"),
        }

    data = [inputs() for _ in range(sets)]
    turn = itertools.cycle(range(sets))
    first = data[0]
    ctx = _ops.context_for(first["xs"])
    opts, want = _options.FusedOptions(), _options.FusedOutputs(True, True, False, parts=False)
    shape = _check.FusedShape(t, vocab, hs, ht, _lib.BF16, vocab)
    plan = _calls.fused_plan(ctx, shape, opts, want)
    kept = {
        "work": torch.empty(max(plan[1], 1), dtype=torch.uint8, device="cuda"),
        "loss": torch.empty((), device="cuda"),
        "gx": torch.empty_like(first["xs"]),
        "gw": torch.empty_like(first["ws"]),
    }

    def c_call(out=None):
        d = data[next(turn)]
        o = out or kept
        _ops.context_for(d["xs"])
        _calls.run_fused(
            ctx,
            plan,
            o["work"].data_ptr(),
            _calls.FusedAddrs(
                *(d[k].data_ptr() for k in ("xs", "ws")),
                0,
                *(d[k].data_ptr() for k in ("xt", "wt")),
                0,
                d["lab"].data_ptr(),
                o["loss"].data_ptr(),
                o["gx"].data_ptr(),
                o["gw"].data_ptr(),
                0,
            ),
        )

    def c_fresh():
        c_call({k: torch.empty_like(v) for k, v in kept.items()})

    module = dt.FusedLinearJSDLoss()

    def forward():
        d = data[next(turn)]
        return module(d["xs"], d["ws"], d["xt"], d["wt"], d["lab"])

    def backward():
        d = data[next(turn)]
        d["xs"].grad = d["ws"].grad = None
        module(d["xs"], d["ws"], d["xt"], d["wt"], d["lab"]).backward()
        d["xs"].grad = d["ws"].grad = None

    variants = (("c", c_call), ("c fresh", c_fresh), ("forward", forward), ("backward", backward))
    return measured({"T": t, "V": vocab}, variants, queue, reps, profile)


def profiled(fn, queue):
    """Kernels of `queue` calls of fn under torch.profiler: {name: (launches, device µs)} per
    call, and the busy time and span per call (µs)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(queue):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per = {}
    for e in kernels:
        n, us = per.get(e.name, (0, 0.0))
        per[e.name] = (n + 1, us + e.time_range.elapsed_us())
    span = (
        max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels)
        if kernels
        else 0
    )
    busy = sum(us for _, us in per.values())
    return {
        "kernels": {k: (n / queue, us / queue) for k, (n, us) in per.items()},
        "busy_us": busy / queue,
        "span_us": span / queue,
    }


def print_profile(rows):
    for r in rows:
        for variant, p in r.get("profile", {}).items():
            print(
                f"\nT {r['T']}, {variant}: busy {p['busy_us']:.1f} µs of a {p['span_us']:.1f} "
                "µs span per call\n\n| kernel | launches per call | device µs per call |\n"
                "|---|---|---|"
            )
            for name, (n, us) in sorted(p["kernels"].items(), key=lambda kv: -kv[1][1]):
                print(f"| {name[:90]} | {n:.2f} | {us:.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=("jsd", "fused"), default="jsd")
    ap.add_argument("--T", default="1024,8192")
    ap.add_argument("--V", type=int, default=128256)
    ap.add_argument("--queue", type=int, default=8)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json")
    ap.add_argument("--sets", type=int, default=3, help="input pairs rotated (default 3)")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gap.py: no CUDA device; nothing measured")
        return
    rows = []
    for t in a.T.split(","):
        at = fused_point if a.workload == "fused" else point
        rows.append(at(int(t), a.V, a.queue, a.reps, a.sets, a.profile))
        torch.cuda.empty_cache()  # the point's buffers, freed with it
    print(
        "| T | C call (ms) | C call, fresh gradient | distil.torch forward | + backward | "
        "forward / C | backward / C |\n|---|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['T']} | {r['c']:.3f} | {r['c fresh']:.3f} | {r['forward']:.3f} | "
            f"{r['backward']:.3f} | {r['forward'] / r['c']:.3f} | {r['backward'] / r['c']:.3f} |"
        )
    print_profile(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
