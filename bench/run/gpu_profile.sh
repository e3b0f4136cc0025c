#!/bin/bash
# gpu_profile.sh - where the fused loss spends its time on a GPU: Nsight Compute (ncu) times every
# kernel of one distil-bench call (fused, bf16 seed shapes, loss + gradients) and the per-kernel
# durations are summed by name. ncu serialises kernels, so the sum is the call without overlap.
#   usage: BUILD=build-gpu OUT=/dir T="1024 2048" bash bench/run/gpu_profile.sh   (after a build)
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build-gpu}
# Raw output goes to $OUT, never into the source tree (default: a fresh folder under /tmp).
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/distil-gpu-profile.XXXXXX")}
echo "gpu_profile.sh: output in $OUT"
mkdir -p "$OUT"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -z "$ncu" ] && { echo "gpu_profile: ncu not found"; exit 2; }
for t in ${T:-1024 2048}; do
    csv="$OUT/ncu-fused-full-T$t.csv"
    # One untimed + one timed call: the second call's kernels are the last half of the launches.
    timeout 240 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
        "$BUILD/bench/distil-bench" --backend cuda --workload fused --mode full --fused-T "$t" \
        --warmup 1 --reps 1 --max-reps 1 --min-time 0 --sets 1 --timing sync --quiet \
        > "$csv" 2> "$OUT/ncu-T$t.err"
    python3 - "$csv" "$t" <<'PY'
import csv, sys, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
half = rows[len(rows) // 2:]  # the timed call
tot = collections.OrderedDict()
for r in half:
    name = r["Kernel Name"][:90]
    v = float(r["Metric Value"].replace(",", ""))
    v = v / 1e6 if r["Metric Unit"] == "ns" else v / 1e3 if r["Metric Unit"] == "us" else v
    n, s = tot.get(name, (0, 0.0))
    tot[name] = (n + 1, s + v)
print(f"T={sys.argv[2]}: {len(half)} kernels, {sum(s for _, s in tot.values()):.3f} ms serialised")
for name, (n, s) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    print(f"  {s:8.3f} ms  x{n:<3d} {name}")
PY
done
