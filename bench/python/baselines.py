#!/usr/bin/env python3
"""baselines.py - time the PyTorch baselines of distil-bench on the same shapes.

Implementations (--impl):
  eager    PyTorch eager code of exactly docs/SPEC.md's math (JSD element formula with log m through
           logaddexp, batchmean; the fused loss with fp32 logits (x @ W.T).float(), CE + JSD on
           log_softmax(z / tau)); gradients by autograd.
  compile  the same functions through torch.compile.
  liger    Liger-Kernel's LigerJSD and LigerFusedLinearJSDLoss (CUDA only), when importable.
  distil   distil's Python package, called exactly as Liger is (distil.torch.JSD and
           FusedLinearJSDLoss): its time against distil-bench's C timing is the binding's cost.
  distil-entropy  the same with return_entropy=True (the student's entropy TRL logs; one more
           sum of the row kernel's pass, docs/SPEC.md §6).
  trl      TRL 1.16's own fused kernel (trl.kernels.chunked_divergence.ChunkedDivergenceFunction,
           Triton on CUDA), the fused workload only, soft part only (it has no hard CE):
           divergence per token and the student's entropy, loss = their sum / T.
--soft-only: the fused workload as TRL's DistillationTrainer runs it (weight_hard 0, weight_soft
1, no labels: every row counts): JSD at --beta, and --beta 0 for the forward KL.
Both take (student, teacher) with beta weighting the teacher, as docs/SPEC.md does.

Timing follows distil-bench: warm-up, then samples until --reps and --min-time (at most
--max-reps), median with p20/p80; CUDA events around each call on a GPU, perf_counter on the
CPU; several input sets rotated so that their total exceeds --cache-mb. Peak memory: on a GPU
torch.cuda.max_memory_allocated; on the CPU the peak RSS of a child process per point.
Writes the JSON/CSV schema of distil-bench (bench/README.md), so plot.sh draws both together.
"""

import argparse
import json
import math
import os
import platform
import resource
import socket
import subprocess
import sys
import time

FIELDS = [
    "workload",
    "mode",
    "backend",
    "device",
    "dtype",
    "T",
    "V",
    "Hs",
    "Ht",
    "beta",
    "temperature",
    "weight_hard",
    "weight_soft",
    "chunk_rows",
    "ignore_frac",
    "status",
    "message",
    "ms_median",
    "ms_p20",
    "ms_p80",
    "ms_sync_median",
    "timing",
    "reps",
    "batch",
    "sets",
    "bytes",
    "flops",
    "eff_tbs",
    "eff_tflops",
    "floor_ms",
    "floor_ratio",
    "peak_bw_tbs",
    "peak_tflops",
    "floor_source",
    "mem_bytes",
    "mem_kind",
    "working_bytes",
    "workspace_bytes",
    "loss",
]
DSIZE = {"f32": 4, "bf16": 2, "f16": 2}
FUSED_ONLY = ("trl", "distil-entropy")  # implementations of the fused workload alone
IGNORE = -100


# ---------------------------------------------------------------- command line


def rows_list(text):
    """'1024,2048', '256:8192' (doubling) or '256:2048:256' -> list of ints >= 1."""
    try:
        if ":" not in text:
            out = [int(t) for t in text.split(",")]
        else:
            parts = [int(t) for t in text.split(":")]
            if len(parts) not in (2, 3) or parts[1] < parts[0]:
                raise ValueError
            lo, hi = parts[0], parts[1]
            out, t = [], lo
            while t <= hi:
                out.append(t)
                t = t + parts[2] if len(parts) == 3 else 2 * t
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}': expected a list like 1024,2048 or 256:8192"
        ) from None
    if not out or min(out) < 1 or len(out) > 32:
        raise argparse.ArgumentTypeError(f"'{text}': values must be >= 1, at most 32 of them")
    return out


def ranged(kind, lo, hi):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {kind.__name__}") from None
        if not (lo <= v <= hi):  # also rejects nan
            raise argparse.ArgumentTypeError(f"'{text}' is outside [{lo}, {hi}]")
        return v

    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    a = p.add_argument
    a("--impl", default="eager", help="comma list of eager, compile, liger, distil (default eager)")
    a("--device", default="auto", choices=["auto", "cuda", "cpu"])
    a("--preset", default="auto", choices=["auto", "gpu", "cpu"])
    a("--workload", default="all", choices=["jsd", "fused", "all"])
    a("--mode", default="all", choices=["forward", "full", "all"])
    a("--T", type=rows_list, help="tokens of both workloads")
    a("--jsd-T", type=rows_list)
    a("--fused-T", type=rows_list)
    a("--V", type=ranged(int, 1, 10**9))
    a("--jsd-V", type=ranged(int, 1, 10**9))
    a("--fused-V", type=ranged(int, 1, 10**9))
    a("--Hs", type=ranged(int, 1, 10**6))
    a("--Ht", type=ranged(int, 1, 10**6))
    a("--dtype", choices=["f32", "bf16", "f16"])
    a("--jsd-dtype", choices=["f32", "bf16", "f16"])
    a("--fused-dtype", choices=["f32", "bf16", "f16"])
    a("--beta", type=ranged(float, 0.0, 1.0), default=0.5)
    a("--tau", type=ranged(float, 1e-30, 1e30), default=1.0)
    a("--weight-hard", type=ranged(float, 0.0, 1e30), default=0.5)
    a("--weight-soft", type=ranged(float, 0.0, 1e30), default=0.5)
    a("--chunk", type=ranged(int, 0, 10**9), default=0, help="Liger chunk_size (0: its 1024)")
    a("--ignore-frac", type=ranged(float, 0.0, 1.0), default=0.0)
    a("--warmup", type=ranged(int, 0, 10**6), default=3)
    a("--reps", type=ranged(int, 1, 10**6), default=10)
    a("--max-reps", type=ranged(int, 1, 10**6), default=200)
    a("--min-time", type=ranged(float, 0.0, 1e6), default=1.0)
    a("--sets", type=ranged(int, 1, 16), default=8)
    a(
        "--calls-per-sample",
        type=ranged(int, 1, 1000),
        default=1,
        help="CUDA: calls enqueued back to back between a sample's two events, the time divided "
        "by their number (default 1: one call after a synchronisation, so that its host "
        "time before the first launch counts; > 1: the GPU's time per call in a loop that "
        "keeps the queue full, as a training loop does)",
    )
    a("--cache-mb", type=ranged(float, 0.0, 1e9), default=512.0)
    a("--peak-bw-tbs", type=ranged(float, 0.0, 1e6), default=0.0)
    a("--peak-tflops", type=ranged(float, 0.0, 1e9), default=0.0)
    a("--floor-from", help="distil-bench JSON whose floor rates to use (same device)")
    a(
        "--liger-compiled",
        type=ranged(int, 0, 1),
        default=1,
        help="LigerFusedLinearJSDLoss(compiled=...) (default 1, Liger's default)",
    )
    a(
        "--compile-dynamic",
        type=ranged(int, 0, 1),
        default=0,
        help="torch.compile(dynamic=True): one compile for all T instead of one per T",
    )
    a("--json")
    a("--csv")
    a(
        "--isolate",
        type=ranged(int, 0, 1),
        default=1,
        help="CPU: each point in a child process, for its own peak RSS (default 1)",
    )
    a(
        "--soft-only",
        type=ranged(int, 0, 1),
        default=0,
        help="fused: the soft part alone, no labels (TRL's DistillationTrainer's loss)",
    )
    a("--quiet", action="store_true")
    a("--_point", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.weight_hard + args.weight_soft <= 0.0:
        p.error("--weight-hard and --weight-soft are both 0")
    impls = args.impl.split(",")
    known = ("eager", "compile", "liger", "distil", "distil-entropy", "trl")
    if not impls or any(i not in known for i in impls):
        p.error(f"--impl '{args.impl}': expected a comma list of {', '.join(known)}")
    args.impls = impls
    args.max_reps = max(args.max_reps, args.reps)
    return args


def resolve(args, torch):
    """Device and preset, then the two base shapes and their T lists (as distil-bench)."""
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("baselines.py: --device cuda but torch sees no CUDA device")
    gpu = args.preset == "gpu" or (args.preset == "auto" and args.device == "cuda")
    jsd_t = [1024, 2048, 4096, 8192] if gpu else [64, 128, 256, 512, 1024]
    fused_t = [1024, 2048, 4096, 8192] if gpu else [128, 256, 512, 1024, 2048]
    jsd = dict(workload="jsd", dtype="f32", V=128256, beta=args.beta, ignore_frac=args.ignore_frac)
    fused = dict(
        workload="fused",
        dtype="bf16" if gpu else "f32",
        V=128256 if gpu else 32000,
        Hs=2048 if gpu else 512,
        Ht=4096 if gpu else 1024,
        beta=args.beta,
        temperature=args.tau,
        weight_hard=args.weight_hard,
        weight_soft=args.weight_soft,
        chunk_rows=args.chunk,
        ignore_frac=args.ignore_frac,
    )
    if args.soft_only:  # TRL's DistillationTrainer: no hard CE, every row counts
        fused.update(weight_hard=0.0, weight_soft=1.0, ignore_frac=0.0)
    for key, val in (("V", args.V), ("dtype", args.dtype)):
        if val is not None:
            jsd[key] = fused[key] = val
    jsd.update({k: v for k, v in (("V", args.jsd_V), ("dtype", args.jsd_dtype)) if v})
    fused.update(
        {
            k: v
            for k, v in (
                ("V", args.fused_V),
                ("dtype", args.fused_dtype),
                ("Hs", args.Hs),
                ("Ht", args.Ht),
            )
            if v
        }
    )
    jsd_t = args.jsd_T or args.T or jsd_t
    fused_t = args.fused_T or args.T or fused_t
    return jsd, jsd_t, fused, fused_t


def set_bytes(s):
    d = DSIZE[s["dtype"]]
    T, V = s["T"], s["V"]
    if s["workload"] == "jsd":
        return 2 * T * V * d + (8 * T if s["ignore_frac"] > 0 else 0)
    return (T * s["Hs"] + V * s["Hs"] + T * s["Ht"] + V * s["Ht"]) * d + 8 * T


def output_bytes(s, full):
    d = DSIZE[s["dtype"]]
    if not full:
        return 4
    if s["workload"] == "jsd":
        return 4 + s["T"] * s["V"] * d
    return 4 + (s["T"] + s["V"]) * s["Hs"] * d


def work_of(s, full):
    """Minimum bytes and GEMM flops of one call, as bench_work_of in bench_run.c."""
    d = DSIZE[s["dtype"]]
    T, V = s["T"], s["V"]
    if s["workload"] == "jsd":
        return (3 if full else 2) * T * V * d, 0.0
    hs, ht = s["Hs"], s["Ht"]
    nbytes = (T * hs + V * hs + T * ht + V * ht) * d + 8 * T
    flops = 2.0 * T * V * (hs + ht)
    if full:
        nbytes += (T * hs + V * hs) * d
        flops += 4.0 * T * V * hs
    return nbytes, flops


# ---------------------------------------------------------------- the losses (docs/SPEC.md)


def jsd_rows(x, y, beta, torch):
    """Per-row generalised JSD of docs/SPEC.md §1 on log-probs x (student), y (teacher)."""
    if beta == 0.0:
        e = torch.exp(y) * (y - x)
    elif beta == 1.0:
        e = torch.exp(x) * (x - y)
    else:
        log_m = torch.logaddexp(y + math.log(beta), x + math.log1p(-beta))
        e = beta * torch.exp(y) * (y - log_m) + (1.0 - beta) * torch.exp(x) * (x - log_m)
    return e.sum(-1)


def make_losses(torch):
    F = torch.nn.functional

    def jsd_eager(x, y, labels, beta):
        rows = jsd_rows(x.float(), y.float(), beta, torch)
        if labels is None:
            return rows.sum() / x.shape[0]
        valid = labels != IGNORE
        return torch.where(valid, rows, 0.0).sum() / valid.sum().clamp(min=1)

    def fused_eager(xs, ws, xt, wt, labels, wh, wsoft, beta, tau):
        zs = (xs @ ws.t()).float()
        with torch.no_grad():
            zt = (xt @ wt.t()).float()
        rows = jsd_rows(F.log_softmax(zs / tau, -1), F.log_softmax(zt / tau, -1), beta, torch)
        if labels is None:  # --soft-only: every row counts
            return wsoft * rows.sum() / zs.shape[0]
        valid = labels != IGNORE
        n = valid.sum().clamp(min=1)
        ce = F.cross_entropy(zs, labels, ignore_index=IGNORE, reduction="sum")
        return wh * ce / n + wsoft * torch.where(valid, rows, 0.0).sum() / n

    return jsd_eager, fused_eager


# ---------------------------------------------------------------- inputs and calls


def make_set(s, device, torch):
    """One input set: random, non-zero, filled in slabs of rows so that no [T, V] temporary
    raises the peak memory. Log-probs are log_softmax of logits 2 * N(0, 1), as distil-bench."""
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[s["dtype"]]
    T, V = s["T"], s["V"]

    def logp(rows):
        t = torch.empty(rows, V, dtype=dt, device=device)
        for i in range(0, rows, 256):
            z = torch.randn(min(256, rows - i), V, device=device).mul_(2.0)
            t[i : i + z.shape[0]] = torch.log_softmax(z, -1)
        return t

    def labels():
        lab = torch.randint(0, V, (T,), device=device)
        if s["ignore_frac"] > 0:
            lab[torch.rand(T, device=device) < s["ignore_frac"]] = IGNORE
        return lab

    if s["workload"] == "jsd":
        return {
            "x": logp(T),
            "y": logp(T),
            "labels": labels() if s["ignore_frac"] > 0 else None,
            "leaves": ["x"],
        }
    hs, ht = s["Hs"], s["Ht"]
    return {
        "xs": torch.empty(T, hs, dtype=dt, device=device).normal_(),
        "ws": torch.empty(V, hs, dtype=dt, device=device).normal_(0.0, hs**-0.5),
        "xt": torch.empty(T, ht, dtype=dt, device=device).normal_(),
        "wt": torch.empty(V, ht, dtype=dt, device=device).normal_(0.0, 2.0 * ht**-0.5),
        "labels": labels(),
        "leaves": ["xs", "ws"],
    }


_COMPILED = {}


def make_call(impl, s, args, torch):
    """A function of one input set that returns the loss (no backward)."""
    jsd_eager, fused_eager = make_losses(torch)

    def compiled(fn):  # one compiled function per loss, so dynamic shapes compile once
        if fn.__name__ not in _COMPILED:
            for knob in ("cache_size_limit", "recompile_limit"):  # one compile per T and mode
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, 64)
            _COMPILED[fn.__name__] = torch.compile(fn, dynamic=bool(args.compile_dynamic))
        return _COMPILED[fn.__name__]

    if s["workload"] == "jsd":
        if impl in ("liger", "distil"):
            if impl == "liger":
                from liger_kernel.transformers import LigerJSD
            else:
                from distil.torch import LigerJSD
            m = LigerJSD(beta=s["beta"], ignore_index=IGNORE)
            return lambda st: m(st["x"], st["y"], st["labels"])
        f = compiled(jsd_eager) if impl == "compile" else jsd_eager
        return lambda st: f(st["x"], st["y"], st["labels"], s["beta"])
    if impl == "trl":
        return trl_call(s, torch)
    if impl in ("liger", "distil", "distil-entropy"):
        extra = {}
        if impl == "liger":
            from liger_kernel.chunked_loss import LigerFusedLinearJSDLoss
        else:
            from distil.torch import LigerFusedLinearJSDLoss

            extra = {"return_entropy": impl == "distil-entropy"}
        m = LigerFusedLinearJSDLoss(
            weight_hard_loss=s["weight_hard"],
            weight_soft_loss=s["weight_soft"],
            beta=s["beta"],
            ignore_index=IGNORE,
            temperature=s["temperature"],
            compiled=bool(args.liger_compiled),
            chunk_size=s["chunk_rows"] or 1024,
            **extra,
        )
        first = (lambda out: out[0]) if impl == "distil-entropy" else (lambda out: out)
        # --soft-only: no labels (every row counts); Liger takes its (all valid) labels
        lab = (lambda st: None) if args.soft_only and impl != "liger" else (lambda st: st["labels"])
        return lambda st: first(m(st["xs"], st["ws"], st["xt"], st["wt"], lab(st)))
    f = compiled(fused_eager) if impl == "compile" else fused_eager
    lab = (lambda st: None) if args.soft_only else (lambda st: st["labels"])
    return lambda st: f(
        st["xs"],
        st["ws"],
        st["xt"],
        st["wt"],
        lab(st),
        s["weight_hard"],
        s["weight_soft"],
        s["beta"],
        s["temperature"],
    )


def trl_kernel():
    """TRL's ChunkedDivergenceFunction from the installed TRL. Its module imports TRL's trainer
    utilities (accelerate, datasets, pandas) for one ZeRO-3 helper; where those are missing (a
    GPU image with TRL's wheel alone) that helper is a null context, as it is without ZeRO-3."""
    try:
        from trl.kernels.chunked_divergence import ChunkedDivergenceFunction
    except ImportError as e:
        import contextlib
        import types

        print(
            f"baselines.py: trl's trainer utilities do not import ({e}): the kernel without "
            "its ZeRO-3 helper",
            file=sys.stderr,
        )
        stub = types.ModuleType("trl.trainer.utils")
        stub.maybe_gather_lm_head_ctx = lambda *params: contextlib.nullcontext()
        sys.modules["trl.trainer.utils"] = stub
        from trl.kernels.chunked_divergence import ChunkedDivergenceFunction
    return ChunkedDivergenceFunction


def trl_call(s, torch):
    """TRL 1.16's ChunkedDivergenceFunction on the soft-only fused workload: the per-token
    divergence (and entropy) of every row, loss = their sum / T, as _chunked_divergence_loss
    reduces without num_items_in_batch."""
    ChunkedDivergenceFunction = trl_kernel()
    if s["weight_hard"] != 0.0:
        raise ValueError("trl: TRL's kernel has no hard CE: run it with --soft-only 1")

    def call(st):
        div, _entropy = ChunkedDivergenceFunction.apply(
            st["xs"], st["ws"], None, st["xt"], st["wt"], None, s["beta"], s["temperature"]
        )
        return div.sum() / st["xs"].shape[0]

    return call


# ---------------------------------------------------------------- timing


def percentile(v, q):
    v = sorted(v)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] * (1 - (pos - lo)) + v[hi] * (pos - lo)


def clear_grads(sets):
    for st in sets:
        for k in st["leaves"]:
            st[k].grad = None


def time_mode(call, sets, full, args, torch, cuda, warmup):
    """Samples of one call each (ms), rotating the sets; returns (samples, last loss)."""
    for st in sets:
        for k in st["leaves"]:
            st[k].requires_grad_(full)

    def once(i):
        loss = call(sets[i % len(sets)])
        if full:
            loss.backward()
        return loss

    # torch.compile finishes compiling (in worker processes) during its first calls: warm longer
    for i in range(warmup):
        clear_grads(sets)
        once(i)
    ms, i, start = [], 0, time.perf_counter()
    while len(ms) < args.max_reps and (
        len(ms) < args.reps or time.perf_counter() - start < args.min_time
    ):
        clear_grads(sets)
        if cuda:
            n = args.calls_per_sample
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            e0.record()
            for j in range(n):
                if j:
                    clear_grads(sets)
                loss = once(i + j)
            e1.record()
            e1.synchronize()
            ms.append(e0.elapsed_time(e1) / n)
        else:
            t0 = time.perf_counter()
            loss = once(i)
            ms.append(1e3 * (time.perf_counter() - t0))
        i += 1
    return ms, float(loss.detach().float())


# ---------------------------------------------------------------- one point


def device_name(args, torch):
    if args.device == "cuda":
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or "cpu"


def max_rss_bytes():
    return 1024.0 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB


def new_row(impl, s, mode, dev):
    r = dict.fromkeys(FIELDS)
    r.update({k: v for k, v in s.items() if k in r})
    # distil's Python package is "python": results_table.py shows it as distil-python.
    names = {"liger": "liger", "distil": "python", "distil-entropy": "python-entropy", "trl": "trl"}
    r.update(
        backend=names.get(impl, "torch-" + impl),
        device=dev,
        mode=mode,
        status="ok",
        message="",
        batch=1,
        timing="none",
        mem_kind="none",
        workspace_bytes=0,
    )
    if s["workload"] == "jsd":
        r.update(
            Hs=None, Ht=None, temperature=None, weight_hard=None, weight_soft=None, chunk_rows=None
        )
    r["bytes"], r["flops"] = work_of(s, mode == "full")
    if impl == "compile":
        r["message"] = f"torch.compile(dynamic={bool(ARGS.compile_dynamic)})"
    if impl == "liger":
        r["message"] = f"liger-kernel {liger_version()}"
    if impl == "distil":
        r["message"] = "distil.torch (Python package)"
    if impl == "distil-entropy":
        r["message"] = "distil.torch (Python package), return_entropy=True"
    if impl == "trl":
        r["message"] = f"trl {package_version('trl')} ChunkedDivergenceFunction"
    if ARGS.calls_per_sample > 1:
        r["message"] += f"; {ARGS.calls_per_sample} calls per sample"
    return r


def liger_version():
    return package_version("liger-kernel")


def package_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return "unknown version"


def measure(r, call, sets, s, args, torch):
    """Time one mode into row r, with its peak memory."""
    cuda = args.device == "cuda"
    full = r["mode"] == "full"
    clear_grads(sets)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = max_rss_bytes()
    warmup = max(args.warmup, 10) if r["backend"] == "torch-compile" else args.warmup
    ms, loss = time_mode(call, sets, full, args, torch, cuda, warmup)
    extra = output_bytes(s, full)
    if cuda:
        working = torch.cuda.max_memory_allocated() - before - extra
        r.update(
            mem_bytes=set_bytes(s) + extra + working,
            mem_kind="inputs+outputs+working (torch peak allocated)",
        )
    else:
        peak = max_rss_bytes()
        working = peak - before - extra
        r.update(mem_bytes=peak, mem_kind="peak-rss")
    r.update(
        working_bytes=max(0.0, working),
        loss=loss,
        reps=len(ms),
        timing="cuda-events" if cuda else "host-sync",
        ms_median=percentile(ms, 0.5),
        ms_p20=percentile(ms, 0.2),
        ms_p80=percentile(ms, 0.8),
    )
    r["ms_sync_median"] = r["ms_median"]


def run_point(impl, s, modes, args, torch):
    """Rows of the given modes of one shape: one input allocation, each mode timed."""
    dev = device_name(args, torch)
    rows = [new_row(impl, s, m, dev) for m in modes]
    nsets = max(1, min(args.sets, math.ceil(args.cache_mb * 2**20 / max(1, set_bytes(s)))))
    sets = []
    try:
        call = make_call(impl, s, args, torch)
        sets = [make_set(s, args.device, torch) for _ in range(nsets)]
        for r in rows:
            r["sets"] = nsets
            try:
                measure(r, call, sets, s, args, torch)
            except Exception as e:  # OOM, compile failure: a row, not a crash
                fail(r, e)
                clear_grads(sets)
                release(args, torch)
    except Exception as e:
        for r in rows:
            fail(r, e)
    sets.clear()
    release(args, torch)
    return rows


def fail(r, e):
    oom = "out of memory" in str(e).lower() or isinstance(e, MemoryError)
    r.update(
        status="out of memory" if oom else "error",
        message=(type(e).__name__ + ": " + str(e).splitlines()[0])[:200]
        if str(e)
        else type(e).__name__,
    )


def release(args, torch):
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def run_isolated(impl, s, mode, args, argv):
    """CPU: one mode of one point in a child process, so that its peak RSS is its own."""
    spec = json.dumps({"impl": impl, "shape": s, "mode": mode})
    cmd = [sys.executable, os.path.abspath(__file__)] + argv + ["--_point", spec]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode == 0 and lines:
        return json.loads(lines[-1])
    r = new_row(impl, s, mode, "cpu")
    r.update(status="error", message=f"child process exited with status {p.returncode}")
    return [r]


# ---------------------------------------------------------------- floors and output


def floor_rates(args, dev, dtype):
    """(bw TB/s, GEMM TFLOP/s, source) as distil-bench's bench_floor.c."""
    bw, tf, src = 0.0, 0.0, "unknown (give --peak-bw-tbs, --peak-tflops or --floor-from)"
    if "H200" in dev:
        bw, tf, src = (
            4.28,
            67.0 if dtype == "f32" else 790.0,
            "H200 defaults (docs/DESIGN.md; fp32 datasheet)",
        )
    if args.floor_from:
        with open(args.floor_from) as f:
            for r in json.load(f)["results"]:
                if r.get("peak_bw_tbs") and r.get("dtype") == dtype:
                    bw, tf = r["peak_bw_tbs"], r.get("peak_tflops") or 0.0
                    src = (
                        r.get("floor_source", "")
                        + " (from "
                        + os.path.basename(args.floor_from)
                        + ")"
                    )
                    break
    if args.peak_bw_tbs or args.peak_tflops:
        bw, tf, src = args.peak_bw_tbs or bw, args.peak_tflops or tf, "flags"
    return bw, tf, src


def finish_row(r, args):
    bw, tf, src = floor_rates(args, r["device"], r["dtype"])
    r.update(peak_bw_tbs=bw or None, peak_tflops=tf or None, floor_source=src)
    mem = r["bytes"] / (bw * 1e12) if bw else 0.0
    gemm = r["flops"] / (tf * 1e12) if tf else 0.0
    known = tf if r["flops"] else bw
    r["floor_ms"] = 1e3 * max(mem, gemm) if known else None
    if r["status"] == "ok":
        sec = r["ms_median"] * 1e-3
        r["eff_tbs"] = r["bytes"] / sec / 1e12
        r["eff_tflops"] = r["flops"] / sec / 1e12 if r["flops"] else None
        r["floor_ratio"] = r["ms_median"] / r["floor_ms"] if r["floor_ms"] else None
    else:
        for k in (
            "ms_median",
            "ms_p20",
            "ms_p80",
            "ms_sync_median",
            "mem_bytes",
            "working_bytes",
            "workspace_bytes",
            "loss",
        ):
            r[k] = None


def size_str(b):
    if b is None:
        return "-"
    return (
        f"{b / 1e9:.2f} GB"
        if b >= 1e9
        else (f"{b / 1e6:.1f} MB" if b >= 1e6 else f"{b / 1e3:.0f} kB")
    )


def print_header():
    print(
        f"{'work':<5} {'mode':<7} {'backend':<13} {'type':<4} {'T':>6} {'V':>7} {'ms(med)':>10} "
        f"{'[p20 .. p80]':>21} {'rate':>9} {'xfloor':>7} {'memory':>10} {'working':>10}"
    )


def print_row(r):
    head = (
        f"{r['workload']:<5} {r['mode']:<7} {r['backend']:<13} {r['dtype']:<4} {r['T']:>6} "
        f"{r['V']:>7} "
    )
    if r["status"] != "ok":
        print(head + f"{r['status']}: {r['message']}", flush=True)
        return
    rate = f"{r['eff_tflops']:5.2f} TF" if r["flops"] else f"{r['eff_tbs']:5.2f} TB"
    ratio = f"{r['floor_ratio']:.2f}" if r["floor_ratio"] else "-"
    print(
        head + f"{r['ms_median']:10.3f} [{r['ms_p20']:8.3f} .. {r['ms_p80']:8.3f}] {rate:>9} "
        f"{ratio:>7} {size_str(r['mem_bytes']):>10} {size_str(r['working_bytes']):>10}",
        flush=True,
    )


def csv_value(v):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, str):
        return '"' + v.replace('"', '""') + '"'
    return f"{v:.9g}" if isinstance(v, float) else str(v)


def write_files(args, rows, torch, argv):
    if args.json:
        head = {
            "schema": "distil-bench/1",
            "tool": "baselines.py",
            "version": torch.__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": socket.gethostname(),
            "command": " ".join(["bench/python/baselines.py"] + argv),
            "protocol": {
                "warmup": args.warmup,
                "min_reps": args.reps,
                "max_reps": args.max_reps,
                "min_time_s": args.min_time,
                "cache_mb": args.cache_mb,
                "max_sets": args.sets,
            },
            "results": rows,
        }
        with open(args.json + ".tmp", "w") as f:
            json.dump(head, f, indent=1)
            f.write("\n")
        os.replace(args.json + ".tmp", args.json)  # never a half-written file
    if args.csv:
        with open(args.csv + ".tmp", "w") as f:
            f.write(",".join(FIELDS) + "\n")
            for r in rows:
                f.write(",".join(csv_value(r[k]) for k in FIELDS) + "\n")
        os.replace(args.csv + ".tmp", args.csv)


def liger_usable(args):
    if args.device != "cuda":
        return "Liger-Kernel needs a CUDA device (Triton)"
    try:
        import liger_kernel  # noqa: F401
    except ImportError as e:
        return f"Liger-Kernel is not installed ({e})"
    return None


def point_child(args, torch):
    """--_point: run one (impl, shape, mode) and print its rows as the last line of stdout."""
    spec = json.loads(args._point)
    rows = run_point(spec["impl"], spec["shape"], [spec["mode"]], args, torch)
    print(json.dumps(rows))


def sweep(args, torch, argv):
    jsd, jsd_t, fused, fused_t = resolve(args, torch)
    modes = ["forward", "full"] if args.mode == "all" else [args.mode]
    bases = [
        (b, ts)
        for b, ts in ((jsd, jsd_t), (fused, fused_t))
        if args.workload in ("all", b["workload"])
    ]
    impls = list(args.impls)
    if "liger" in impls and liger_usable(args):
        print(f"baselines.py: skipping liger: {liger_usable(args)}", file=sys.stderr)
        impls.remove("liger")
    total = sum(
        len(ts) for i in impls for b, ts in bases if i not in FUSED_ONLY or b["workload"] == "fused"
    ) * len(modes)
    rows, t0, tty = [], time.perf_counter(), sys.stderr.isatty()
    print_header()
    for impl in impls:
        for base, ts in bases:
            if impl in FUSED_ONLY and base["workload"] != "fused":
                continue
            for T in ts:
                s = dict(base, T=T)
                if not args.quiet:
                    print(
                        f"{chr(13) + chr(27) + '[K' if tty else ''}[{len(rows)}/{total} done, "
                        f"{time.perf_counter() - t0:.0f}s] {impl} {s['workload']} T={T} ...",
                        end="" if tty else "\n",
                        file=sys.stderr,
                        flush=True,
                    )
                if args.device == "cpu" and args.isolate:
                    new = [r for m in modes for r in run_isolated(impl, s, m, args, argv)]
                else:
                    new = run_point(impl, s, modes, args, torch)
                if tty and not args.quiet:
                    print(chr(13) + chr(27) + "[K", end="", file=sys.stderr)
                for r in new:
                    finish_row(r, args)
                    print_row(r)
                rows += [{k: clean(r[k]) for k in FIELDS} for r in new]
                write_files(args, rows, torch, argv)  # a run cut short keeps what it measured
    return rows


def clean(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


ARGS = None


def main(argv):
    global ARGS
    args = ARGS = parse_args(argv)
    import torch

    if args._point:
        resolve(args, torch)
        point_child(args, torch)
        return 0
    try:
        rows = sweep(args, torch, argv)
    except KeyboardInterrupt:
        print("baselines.py: interrupted; the files hold the points finished", file=sys.stderr)
        return 130
    return 0 if all(r["status"] == "ok" for r in rows) else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
