#!/bin/bash
# devrun.sh - one device call for the cuda backend: build (sm_90a), the parity check against
# "ref", compute-sanitizer on the small cases, and the seed-workload timings. Logs go to $OUT.
# Usage on the device machine, from the repository root:  backends/cuda/tools/devrun.sh [MODE]
# MODE: (none) everything; fast: memcheck only (no racecheck); quick: no sanitizers, short bench.
set -u
OUT=${OUT:-/tmp/devrun-out}
mkdir -p "$OUT"
B=build-devrun
{
    echo "commit $(git rev-parse --short HEAD 2>/dev/null) $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
} | tee "$OUT/env.txt"
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DDISTIL_CUDA=ON -DDISTIL_CPU=OFF -DDISTIL_OPENCL=OFF \
    -DDISTIL_BUILD_TESTS=OFF -DDISTIL_BUILD_BENCH=OFF -DDISTIL_BUILD_EXAMPLES=OFF \
    -DDISTIL_CUDA_TOOLS=ON -DCMAKE_CUDA_ARCHITECTURES=90a >"$OUT/build.txt" 2>&1 &&
    cmake --build $B -j16 >>"$OUT/build.txt" 2>&1
rc=$?
echo "build rc=$rc in $(($(date +%s) - t0)) s"
if [ $rc -ne 0 ]; then
    tail -40 "$OUT/build.txt"
    exit 1
fi
CHECK=$B/backends/cuda/distil-cuda-check
export LD_LIBRARY_PATH=$B/core:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
timeout 200 $CHECK >"$OUT/check.txt" 2>&1
echo "check rc=$? in $(($(date +%s) - t0)) s: $(tail -1 "$OUT/check.txt")"
grep -E "FAIL|FATAL" "$OUT/check.txt" | head -20
if [ "${1:-}" != "quick" ]; then
    t0=$(date +%s)
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $CHECK small \
        >"$OUT/memcheck.txt" 2>&1
    echo "memcheck rc=$? in $(($(date +%s) - t0)) s: $(grep -E "ERROR SUMMARY" "$OUT/memcheck.txt" | tail -1)"
    [ "${1:-}" = "fast" ] || {
    t0=$(date +%s)
    timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $CHECK small \
        >"$OUT/racecheck.txt" 2>&1
    echo "racecheck rc=$? in $(($(date +%s) - t0)) s: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/racecheck.txt" | tail -1)"
    }
fi
t0=$(date +%s)
timeout 200 $CHECK bench $([ "${1:-}" = quick ] && echo quick) >"$OUT/bench.txt" 2>&1
echo "bench rc=$? in $(($(date +%s) - t0)) s"
cat "$OUT/bench.txt"
