#!/usr/bin/env python3
"""plot_data.py - turn distil-bench / baselines.py results (JSON or CSV) into gnuplot data.

usage: plot_data.py OUTDIR FILE...

For every group of rows with the same workload, mode, dtype and shape (all but T) it writes
OUTDIR/<group>__<backend>.dat with columns "T ms_median ms_p20 ms_p80" sorted by T, and
OUTDIR/<group>__floor.dat when the rows carry a floor, then prints one line per group:
"<group>|<title>|<dat files>|<labels>|<floor file or ->". plot.sh reads these lines. Only the
Python standard library is used, so it runs wherever gnuplot does.
"""

import csv
import json
import os
import sys

BASELINES = ("torch-eager", "torch-compile", "liger", "trl")
NUM = ("T", "V", "Hs", "Ht", "ms_median", "ms_p20", "ms_p80", "floor_ms")


def load(path, ok_only=True):
    if path.endswith(".json"):
        with open(path) as f:
            rows = json.load(f)["results"]
    else:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    for r in rows:
        for k in NUM:
            v = r.get(k)
            r[k] = float(v) if v not in (None, "") else None
    ok = [r for r in rows if r.get("status") == "ok" and r.get("ms_median")]
    return ok if ok_only else [r for r in rows if r in ok or r.get("status") != "ok"]


def group_key(r):
    shape = f"V{int(r['V'])}" + (f"-Hs{int(r['Hs'])}-Ht{int(r['Ht'])}" if r["Hs"] else "")
    return f"{r['workload']}-{r['mode']}-{r['dtype']}-{shape}"


def title_of(r, devices):
    what = "JSD" if r["workload"] == "jsd" else "fused linear JSD"
    shape = f"V={int(r['V'])}" + (f", Hs={int(r['Hs'])}, Ht={int(r['Ht'])}" if r["Hs"] else "")
    mode = "loss only" if r["mode"] == "forward" else "loss + gradients"
    return f"{what} {mode}, {r['dtype']}, {shape} ({', '.join(sorted(devices))})"


def write_dat(path, points):
    with open(path, "w") as f:
        for p in sorted(points):
            f.write(" ".join(f"{v:.6g}" for v in p) + "\n")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__.strip().splitlines()[2])
    out, groups = argv[0], {}
    os.makedirs(out, exist_ok=True)
    for path in argv[1:]:
        for r in load(path):
            groups.setdefault(group_key(r), []).append(r)
    for key, rows in sorted(groups.items()):
        backends, floor = {}, {}
        for r in rows:
            backends.setdefault(r["backend"], {})[r["T"]] = (
                r["T"],
                r["ms_median"],
                r["ms_p20"],
                r["ms_p80"],
            )
            if r.get("floor_ms") and r["backend"] not in BASELINES:
                floor.setdefault(r["T"], (r["T"], r["floor_ms"]))
        files = []
        for b, pts in backends.items():
            files.append(os.path.join(out, f"{key}__{b}.dat"))
            write_dat(files[-1], pts.values())
        ffile = "-"
        if floor:
            ffile = os.path.join(out, f"{key}__floor.dat")
            write_dat(ffile, floor.values())
        devices = {r["device"] for r in rows if r["backend"] not in BASELINES} or {
            rows[0]["device"]
        }
        labels = [b if b in BASELINES else "distil-" + b for b in backends]
        print("|".join([key, title_of(rows[0], devices), " ".join(files), " ".join(labels), ffile]))


if __name__ == "__main__":
    main(sys.argv[1:])
