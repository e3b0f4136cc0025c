#!/bin/bash
# cpu_run.sh - the CPU run behind bench/RESULTS.md: distil's cpu backend and PyTorch eager on the
# scaled-down CPU sweeps (JSD fp32 V 128256, T 64..1024; fused fp32 Hs 512, Ht 1024, V 32000,
# T 128..2048), each point in its own process for its peak RSS; JSON/CSV, plots and tables to $OUT.
# usage: OUT=/some/dir [BUILD=build] [PYTHON=python3] bash bench/cpu_run.sh   (repository root)
# Needs a build with the cpu backend (cmake -DDISTIL_CPU=ON) and torch for $PYTHON.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/cpu-run-out}
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
TIMING=(--preset cpu --warmup 2 --reps 5 --max-reps 100 --min-time 1)
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    git log -1 --format='commit %H %s' 2>/dev/null
    lscpu | grep -E 'Model name|^CPU\(s\)|L3'
    uptime
    "$PY" -c 'import torch; print("torch", torch.__version__, "threads", torch.get_num_threads())'
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
"$BUILD/bench/distil-bench" --backend cpu "${TIMING[@]}" \
    --json "$OUT/distil-cpu.json" --csv "$OUT/distil-cpu.csv"
"$PY" bench/baselines.py --device cpu --impl eager "${TIMING[@]}" \
    --floor-from "$OUT/distil-cpu.json" --json "$OUT/torch-eager.json" --csv "$OUT/torch-eager.csv"
echo "load after the run: $(uptime)" | tee -a "$OUT/environment.txt"
bash bench/plot.sh "$OUT/plots" "$OUT/distil-cpu.json" "$OUT/torch-eager.json"
"$PY" bench/results_table.py "$OUT/distil-cpu.json" "$OUT/torch-eager.json" > "$OUT/tables.md"
