#!/bin/bash
# cpu_run.sh - the CPU run behind docs/PERFORMANCE.md: distil's cpu backend and PyTorch eager on the
# scaled-down CPU sweeps (JSD fp32 V 128256, T 64..1024; fused fp32 Hs 512, Ht 1024, V 32000,
# T 128..2048), each point in its own process for its peak RSS; JSON/CSV, plots and tables to $OUT.
# usage: OUT=/some/dir [BUILD=build] [PYTHON=python3] [WAIT_IDLE=0.95] [ONLY="distil:jsd:1024 ..."]
#        bash bench/run/cpu_run.sh      (ONLY: re-measure just these tool:workload:T points in $OUT)
# Run from the repository root with a build that has the cpu backend and torch for $PYTHON.
# The floor rates are probed once, then given to every point. On a shared machine, WAIT_IDLE
# makes each point wait until the cores are that idle; loads.csv records the idle fraction just
# before and the load average after every point. distil and PyTorch alternate point by point.
set -u
cd "$(dirname "$0")/../.." || exit 1
# Raw output goes to $OUT, never into the source tree (default: a fresh folder under /tmp).
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/distil-cpu-run.XXXXXX")}
echo "cpu_run.sh: output in $OUT"
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
WAIT_IDLE=${WAIT_IDLE:-}
BENCH=$BUILD/bench/distil-bench
mkdir -p "$OUT/points"
[ -n "${ONLY:-}" ] && [ -f "$OUT/probe.json" ] && SKIP_PROBE=1
exec > >(tee -a "$OUT/run.log") 2>&1
TIMING=(--preset cpu --warmup 2 --reps 5 --max-reps 100 --min-time 1 --quiet)

load1() { cut -d' ' -f1 /proc/loadavg; }

# Idle fraction of all cores over the next 2 s, from /proc/stat (unlike the load average it does
# not remember our own previous point).
idle2s() {
    local a b
    a=$(head -1 /proc/stat)
    sleep 2
    b=$(head -1 /proc/stat)
    awk -v a="$a" -v b="$b" 'BEGIN { split(a, x); split(b, y); t = 0
        for (i = 2; i <= 9; i++) t += y[i] - x[i]
        printf "%.2f", (y[5] - x[5] + y[6] - x[6]) / (t > 0 ? t : 1) }'
}

# With WAIT_IDLE (e.g. 0.95), wait until the cores are at least that idle over 2 s.
wait_quiet() {
    [ -n "$WAIT_IDLE" ] || return 0
    local i idle
    for i in $(seq 1 1800); do
        idle=$(idle2s)
        awk -v l="$idle" -v m="$WAIT_IDLE" 'BEGIN { exit !(l >= m) }' && return 0
        [ "$i" = 1 ] && echo "waiting for idle >= $WAIT_IDLE (now $idle)"
    done
}

if [ -n "${SKIP_PROBE:-}" ]; then
    echo "re-measured at $(date -u +%Y-%m-%dT%H:%M:%SZ): $ONLY" | tee -a "$OUT/environment.txt"
else
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        git log -1 --format='commit %H %s' 2>/dev/null
        echo "source tree hash $(bash scripts/tree-hash.sh) (scripts/tree-hash.sh; .git may be stale on a copy)"
        lscpu | grep -E 'Model name|^CPU\(s\)|L3'
        "$PY" -c 'import torch; print("torch", torch.__version__, "threads", torch.get_num_threads())'
    } > "$OUT/environment.txt" 2>&1
    cat "$OUT/environment.txt"
    # Floor rates: the host probes of distil-bench (memcpy, cpu fp32 fused forward), once.
    wait_quiet
    "$BENCH" --backend cpu --workload jsd --mode forward --T 8 --V 1000 --reps 1 --min-time 0 \
        --quiet --json "$OUT/probe.json" > "$OUT/probe.txt"
fi
read -r BW TF < <("$PY" -c 'import json, sys; r = json.load(open(sys.argv[1]))["results"][0]
print(r["peak_bw_tbs"], r["peak_tflops"])' "$OUT/probe.json")
echo "floor rates from the host probes: copy $BW TB/s, GEMM $TF TFLOP/s" | tee -a "$OUT/environment.txt"

[ -f "$OUT/loads.csv" ] || echo "tool,workload,T,idle_before,load1_after" > "$OUT/loads.csv"
point() { # point TOOL WORKLOAD T CMD...
    local tool=$1 w=$2 t=$3
    shift 3
    case " ${ONLY:- $tool:$w:$t } " in *" $tool:$w:$t "*) ;; *) return 0 ;; esac
    wait_quiet
    local before
    before=$(idle2s)
    "$@"
    echo "$tool,$w,$t,$before,$(load1)" >> "$OUT/loads.csv"
}

for w in jsd fused; do
    if [ "$w" = jsd ]; then ts="64 128 256 512 1024"; else ts="128 256 512 1024 2048"; fi
    for t in $ts; do
        point distil "$w" "$t" "$BENCH" --backend cpu --workload "$w" --T "$t" "${TIMING[@]}" \
            --peak-bw-tbs "$BW" --peak-tflops "$TF" --json "$OUT/points/distil-cpu-$w-$t.json"
        point torch "$w" "$t" "$PY" bench/python/baselines.py --device cpu --impl eager --workload "$w" \
            --T "$t" "${TIMING[@]}" --peak-bw-tbs "$BW" --peak-tflops "$TF" \
            --json "$OUT/points/torch-eager-$w-$t.json"
    done
done

bash bench/run/plot.sh "$OUT/plots" "$OUT"/points/*.json
"$PY" bench/python/results_table.py "$OUT"/points/*.json > "$OUT/tables.md"
cat "$OUT/tables.md"
