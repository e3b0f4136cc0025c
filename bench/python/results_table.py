#!/usr/bin/env python3
"""results_table.py - Markdown tables of distil-bench / baselines.py results (bench/tables/).

usage: results_table.py [--probe floor-probe.json] FILE.json|FILE.csv...

One table per workload, mode, dtype and shape: a row per T; per backend the median ms with
p20..p80; the speed-up of each distil backend over PyTorch eager (and torch.compile, Liger when
present); the ratio to the floor; with --probe (bench/python/floor_probe.py's file of the same
run) also the ratio to the floor at the rates the card sustained; and memory (peak, and working =
beyond inputs and outputs). Only the Python standard library is used.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_data import BASELINES, group_key, load, title_of  # noqa: E402


def num(v):
    """Milliseconds with 3 significant digits, never in exponent form."""
    v = float(v)
    return f"{v:.0f}" if v >= 100 else (f"{v:.1f}" if v >= 10 else f"{v:.3g}")


def fmt_ms(r):
    if r["status"] != "ok":
        return r["status"]
    return f"{num(r['ms_median'])} [{num(r['ms_p20'])}–{num(r['ms_p80'])}]"


def fmt_bytes(v):
    if v in (None, ""):
        return "–"
    v = float(v)
    if v >= 1e9:
        return f"{v / 1e9:.2f} GB"
    return f"{v / 1e6:.0f} MB" if v >= 1e6 else f"{v / 1e3:.0f} kB"


def sustained_floor_ms(r, probe):
    """The call's floor at the probe's sustained rates, as bench_floor.c takes it: the larger of
    bytes over the copy rate and FLOPs over the GEMM rate. Only on the probe's device (a name that
    starts with its name: opencl adds the platform), and
    FLOPs only in bf16 / f16 (the probe measures a bf16 GEMM); else None."""
    if not probe or not str(r.get("device", "")).startswith(probe.get("device", "?")):
        return None
    flops, moved = float(r.get("flops") or 0), float(r.get("bytes") or 0)
    if flops > 0 and r.get("dtype") not in ("bf16", "f16"):
        return None
    mem = moved / (probe["copy_tbps_sustained"] * 1e9)
    gemm = flops / (probe["gemm_bf16_tflops_sustained"] * 1e9)
    return max(mem, gemm) or None


def table(rows, probe=None):
    devices = {r["device"] for r in rows if r["backend"] not in BASELINES} or {rows[0]["device"]}
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    ours = [b for b in backends if b not in BASELINES]
    base = [b for b in backends if b in BASELINES]
    by = {(r["backend"], r["T"]): r for r in rows}
    ts = sorted({r["T"] for r in rows})
    head = ["T", "floor ms"] + [f"{'distil-' + b if b in ours else b} ms" for b in backends]
    head += [f"distil-{o} speed-up over {b}" for o in ours for b in base]
    head += [f"{'distil-' + o if o in ours else o} × floor" for o in ours]
    head += [f"distil-{o} × sustained floor" for o in ours] if probe else []
    head += [f"{b if b in BASELINES else 'distil-' + b} memory (working)" for b in backends]
    out = [
        f"**{title_of(rows[0], devices)}**",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for t in ts:
        cells = [str(int(t))]
        fl = next((by[(o, t)]["floor_ms"] for o in ours if (o, t) in by), None)
        cells.append(num(fl) if fl else "–")
        cells += [fmt_ms(by[(b, t)]) if (b, t) in by else "–" for b in backends]
        for o in ours:
            for b in base:
                ok = all((k, t) in by and by[(k, t)]["status"] == "ok" for k in (o, b))
                cells.append(
                    f"{by[(b, t)]['ms_median'] / by[(o, t)]['ms_median']:.2f}×" if ok else "–"
                )
        for o in ours:
            r = by.get((o, t))
            ok = r and r["status"] == "ok" and r["floor_ms"]
            cells.append(f"{r['ms_median'] / r['floor_ms']:.2f}" if ok else "–")
        for o in ours if probe else []:
            r = by.get((o, t))
            sf = sustained_floor_ms(r, probe) if r and r["status"] == "ok" else None
            cells.append(f"{r['ms_median'] / sf:.2f}" if sf else "–")
        for b in backends:
            r = by.get((b, t))
            cells.append(
                f"{fmt_bytes(r['mem_bytes'])} ({fmt_bytes(r['working_bytes'])})"
                if r and r["status"] == "ok"
                else "–"
            )
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    probe = None
    if argv[:1] == ["--probe"] and len(argv) > 1:
        with open(argv[1]) as f:
            probe = json.load(f)
        argv = argv[2:]
    if not argv:
        sys.exit("usage: results_table.py [--probe floor-probe.json] FILE.json|FILE.csv...")
    groups = {}
    for path in argv:
        for r in load(path, ok_only=False):
            groups.setdefault(group_key(r), []).append(r)
    print("\n\n".join(table(rows, probe) for _, rows in sorted(groups.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
