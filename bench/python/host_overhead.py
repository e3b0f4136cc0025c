"""Host time of one distil.torch call, layer by layer, at a tiny shape (the work is negligible).

    python bench/python/host_overhead.py [--device cpu|cuda] [--calls 2000] [--rounds 5] [--json F]
                                  [--T 8] [--V 256] [--hidden 64]

For each loss (distil.torch.JSD, and FusedLinearJSDLoss with labels), from the bottom up:
  C call        the library call through ctypes, descriptor cached, workspace lent: the floor
  C scale       distil_scale, the one library call of backward (docs/SPEC.md §5)
  op kernel     the op's Python kernel: outputs, plan lookup, workspace, the call
  custom op     the torch.library op through the dispatcher, with its autograd (torch.compile's
                path; eager calls do not take it)
  eager op      the autograd.Function eager calls take
  forward       the public module's forward
  backward      loss.backward() after it (timed alone, in the same iteration)
  fwd + bwd     both
  forward alone the public forward in a loop without backward (its graph dropped): on cuda
                the "forward" row above also pays for the previous backward's hand-over from
                torch's autograd device thread (the GIL and a thread wake-up), this one not
  stubbed       the C call and the public forward alone with the library's entry point replaced
                by a C function that does nothing and returns 0 (the same ctypes conversions):
                the Python layers' own host time, free of the library's, whose launches on a
                GPU vary by +-10 µs from call to call and make the difference above noisy
and, for scale, torch's own floor: an autograd.Function saving one tensor, forward + backward.
"overhead" rows subtract the C calls from the public forward (alone and in the fwd + bwd loop)
and from forward + backward, and the stubbed call from the stubbed forward.
Each row is the median host time over --calls calls, the least such median over --rounds
interleaved rounds (the machine may be shared); on cuda the queue is drained every 16 calls
(untimed), so that a full launch queue never makes the host wait for the GPU.
"""

import argparse
import ctypes
import json
import os
import statistics
import time

import torch

T, V, HS, HT = 8, 256, 64, 64  # tiny: the host time dominates


clock = time.perf_counter  # --clock thread: time.thread_time


def _median_us(fn, calls, drain):
    """Median microseconds per call; fn returns None (timed whole) or a dict of its parts."""
    samples = {}
    for i in range(calls):
        t0 = clock()
        parts = fn()
        total = (clock() - t0) * 1e6
        for k, v in (parts if isinstance(parts, dict) else {"": total}).items():
            samples.setdefault(k, []).append(v)
        if drain and i % 16 == 15:
            torch.cuda.synchronize()
    return {k: statistics.median(v) for k, v in samples.items()}


def _fwd_bwd(forward, params):
    """A timer body: forward, then backward, each timed; gradients dropped untimed."""

    def body():
        for p in params:
            p.grad = None
        t0 = clock()
        loss = forward()
        t1 = clock()
        loss.backward()
        t2 = clock()
        return {
            "forward": (t1 - t0) * 1e6,
            "backward": (t2 - t1) * 1e6,
            "fwd + bwd": (t2 - t0) * 1e6,
        }

    return body


class _FloorGrads(torch.autograd.Function):
    """torch's cost of a fused loss's forward: the loss and the two gradients allocated."""

    @staticmethod
    def forward(ctx, xs, ws):
        ctx.grads = (torch.empty_like(xs), torch.empty_like(ws))
        return xs.new_empty((), dtype=torch.float32)

    @staticmethod
    def backward(ctx, grad):
        return ctx.grads


class _Floor(torch.autograd.Function):
    """torch's own cost of a loss Function: one saved [T, V] tensor, returned by backward."""

    @staticmethod
    def forward(ctx, x):
        g = torch.empty_like(x)
        ctx.save_for_backward(g)
        return x.new_empty((), dtype=torch.float32)

    @staticmethod
    def backward(ctx, grad):
        return ctx.saved_tensors[0]


def _stubbed(entry, fn):
    """fn with distil's `entry` (a name in distil._lib.lib) replaced by a C function that ignores
    its arguments and returns 0 (getuid as root, else sched_yield), restored after each call."""
    from distil import _lib

    real = getattr(_lib.lib, entry)
    stub = ctypes.CDLL(None)["getuid" if os.getuid() == 0 else "sched_yield"]
    stub.argtypes, stub.restype = real.argtypes, real.restype

    def body():
        setattr(_lib.lib, entry, stub)
        try:
            fn()
        finally:
            setattr(_lib.lib, entry, real)

    return body


def jsd_rows(device):
    import distil.torch as dt
    from distil import _calls, _check, _lib, _options
    from distil.torch import _ops

    x = torch.log_softmax(torch.randn(T, V, device=device), -1).requires_grad_()
    y = torch.log_softmax(torch.randn(T, V, device=device), -1)
    xd = x.detach()
    ctx = _ops.context_for(xd)
    opts = _options.JsdOptions()
    plan = _calls.jsd_plan(ctx, _check.JsdShape(T, V, V, V, _lib.F32), opts)
    work = torch.empty(max(plan[1], 1), dtype=torch.uint8, device=device)
    loss, grad = torch.empty((), device=device), torch.empty_like(xd)
    one = torch.ones((), device=device)
    module = dt.JSD()
    tensors = _ops.JsdTensors(xd, y)
    addrs = _calls.JsdAddrs(xd.data_ptr(), y.data_ptr(), 0, loss.data_ptr(), grad.data_ptr())

    keep = (loss, grad, xd, y)  # addrs holds bare addresses: keep their tensors

    def c_call():
        _calls.run_jsd(ctx, plan, work.data_ptr(), addrs)
        return keep and None

    def op_kernel():
        _ops.jsd_call(tensors, opts, True, _ops._out)

    return {
        "C call": c_call,
        "C scale": lambda: _calls.run_scale(
            ctx, grad.data_ptr(), _lib.F32, grad.numel(), one.data_ptr()
        ),
        "op kernel": op_kernel,
        "custom op (dispatcher) fwd + bwd": _fwd_bwd(
            lambda: _ops.jsd_op(x, y, None, None, **opts.op_kwargs(), want_grad=True)[0], [x]
        ),
        "eager op fwd + bwd": _fwd_bwd(lambda: _ops.jsd(_ops.JsdTensors(x, y), opts, True), [x]),
        "public": _fwd_bwd(lambda: module(x, y), [x]),
        "public forward alone": lambda: module(x, y),
        "stubbed: C call": _stubbed("distil_jsd", c_call),
        "stubbed: public forward alone": _stubbed("distil_jsd", lambda: module(x, y)),
        "torch floor (Function, one saved tensor) fwd + bwd": _fwd_bwd(
            lambda: _Floor.apply(x), [x]
        ),
    }


def fused_rows(device):
    import distil.torch as dt
    from distil import _calls, _check, _lib, _options
    from distil.torch import _ops

    dtype = torch.bfloat16
    xs = torch.randn(T, HS, device=device, dtype=dtype).requires_grad_()
    ws = (torch.randn(V, HS, device=device, dtype=dtype) / 8).requires_grad_()
    xt = torch.randn(T, HT, device=device, dtype=dtype)
    wt = torch.randn(V, HT, device=device, dtype=dtype) / 8
    lab = torch.randint(0, V, (T,), device=device)
    d = [t.detach() for t in (xs, ws)]
    ctx = _ops.context_for(d[0])
    opts = _options.FusedOptions()
    want = _options.FusedOutputs(True, True, False)
    plan = _calls.fused_plan(ctx, _check.FusedShape(T, V, HS, HT, _lib.BF16, V, 0), opts, want)
    work = torch.empty(max(plan[1], 1), dtype=torch.uint8, device=device)
    parts = torch.empty(3, device=device)
    gx, gw = torch.empty_like(d[0]), torch.empty_like(d[1])
    one = torch.ones((), device=device)
    module = dt.FusedLinearJSDLoss()
    ptrs = _calls.FusedAddrs(
        d[0].data_ptr(),
        d[1].data_ptr(),
        0,
        xt.data_ptr(),
        wt.data_ptr(),
        0,
        lab.data_ptr(),
        parts.data_ptr(),
        gx.data_ptr(),
        gw.data_ptr(),
        0,
    )
    op_tensors = _ops.FusedTensors(d[0], d[1], None, xt, wt, None, lab)

    keep = (work, parts, gx, gw, xt, wt, lab)  # ptrs holds bare addresses: keep their tensors

    def scales():
        for g in keep[2:4]:
            _calls.run_scale(ctx, g.data_ptr(), _lib.BF16, g.numel(), one.data_ptr())

    eager_want = _options.FusedOutputs(True, True, False, parts=False)

    def eager():
        return _ops.fused(_ops.FusedTensors(xs, ws, None, xt, wt, None, lab), opts, eager_want)[0]

    return {
        "C call": lambda: _calls.run_fused(ctx, plan, keep[0].data_ptr(), ptrs),
        "C scale": scales,
        "op kernel": lambda: _ops.fused_call(op_tensors, opts, want, _ops._out),
        "custom op (dispatcher) fwd + bwd": _fwd_bwd(
            lambda: _ops.fused_op(
                xs, ws, None, xt, wt, None, lab, None, None, **opts.op_kwargs(), **want.op_kwargs()
            )[0][0],
            [xs, ws],
        ),
        "eager op fwd + bwd": _fwd_bwd(eager, [xs, ws]),
        "public": _fwd_bwd(lambda: module(xs, ws, xt, wt, lab), [xs, ws]),
        "public forward alone": lambda: module(xs, ws, xt, wt, lab),
        "stubbed: C call": _stubbed(
            "distil_fused_linear_jsd", lambda: _calls.run_fused(ctx, plan, keep[0].data_ptr(), ptrs)
        ),
        "stubbed: public forward alone": _stubbed(
            "distil_fused_linear_jsd", lambda: module(xs, ws, xt, wt, lab)
        ),
        "torch floor forward (Function, loss + 2 gradients allocated)": lambda: _FloorGrads.apply(
            xs, ws
        ),
    }


def measure(rows, calls, rounds, drain):
    """{row: µs}: each row's least median over the rounds (rows interleaved per round)."""
    best = {}
    for fn in rows.values():  # warm-up: plans, contexts, allocator blocks
        for _ in range(50):
            fn()
    for _ in range(rounds):
        for name, fn in rows.items():
            for part, us in _median_us(fn, calls, drain).items():
                key = f"{name} {part}".strip() if part else name
                key = (
                    key.replace("fwd + bwd forward", "forward")
                    .replace("fwd + bwd backward", "backward")
                    .replace("fwd + bwd fwd + bwd", "fwd + bwd")
                )
                best[key] = min(best.get(key, float("inf")), us)
    for key in [
        k for k in best if k.endswith((" forward", " backward")) and not k.startswith("public")
    ]:
        del best[key]  # the lower layers' split is not interesting; their sum is
    best["overhead: forward alone - C call"] = best["public forward alone"] - best["C call"]
    best["overhead: forward - C call"] = best["public forward"] - best["C call"]
    best["overhead, stubbed: forward alone - C call"] = (
        best["stubbed: public forward alone"] - best["stubbed: C call"]
    )
    best["overhead: fwd + bwd - C calls"] = (
        best["public fwd + bwd"] - best["C call"] - best["C scale"]
    )
    return best


def main():
    global clock, T, V, HS, HT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--clock",
        choices=("wall", "thread"),
        default="wall",
        help="thread: this thread's CPU time, steadier on a shared machine (cpu "
        "tensors with OMP_NUM_THREADS=1 only: it misses other threads' work)",
    )
    ap.add_argument("--json")
    ap.add_argument("--T", type=int, default=T, help="rows (default %(default)s)")
    ap.add_argument("--V", type=int, default=V, help="vocabulary (default %(default)s)")
    ap.add_argument("--hidden", type=int, default=HS, help="fused Hs = Ht (default %(default)s)")
    args = ap.parse_args()
    T, V, HS, HT = args.T, args.V, args.hidden, args.hidden
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    drain = args.device == "cuda"
    res = {
        "device": torch.cuda.get_device_name() if drain else "cpu",
        "torch": torch.__version__,
        "shape": dict(T=T, V=V, Hs=HS, Ht=HT),
        "clock": args.clock,
    }
    print(
        f"# distil.torch host time per call on {res['device']} (torch {torch.__version__}), "
        f"T {T}, V {V}, fused Hs = Ht = {HS} bf16; least median of {args.rounds} x "
        f"{args.calls} calls, {args.clock} clock\n"
    )
    for loss, rows in (("JSD", jsd_rows), ("FusedLinearJSDLoss", fused_rows)):
        res[loss] = measure(rows(args.device), args.calls, args.rounds, drain)
        print(f"| {loss} | µs |\n|---|---|")
        for k, v in res[loss].items():
            print(f"| {k} | {v:.1f} |")
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
