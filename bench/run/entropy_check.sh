#!/bin/bash
# entropy_check.sh - the student entropy (docs/SPEC.md §6) on cuda's fused row kernels, in one run:
#   1. its parity cases (tests/test_parity.c, names ending "entropy") with the resident kernel
#      (the default), with it required (test hook fused_rows=resident: a row pass it declines
#      fails) and with the streaming kernel (fused_rows=stream);
#   2. the whole cuda parity suite with the resident kernel required;
#   3. the fused loss at the seed shape (bf16, V 128256, T 8192, forward and full) timed without
#      the entropy, with it (resident kernel), and with it on the streaming kernel, alternated
#      twice (docs/GPU-NOTES.md §3).
# Logs, JSON and CSV go to $OUT.
# usage: OUT=/some/dir bash bench/run/entropy_check.sh   (repository root, a CUDA GPU; ~6 min
#        with the build; BUILD names the build folder, default build-gpu, reused when there)
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/distil-entropy.XXXXXX")}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/entropy.log") 2>&1
export PATH="/usr/local/cuda/bin:$PATH"
START=$(date +%s)
log() { echo "[entropy_check +$(($(date +%s) - START))s] $*"; }

log "configure + build (test_parity, distil-bench)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDISTIL_CUDA=ON -DDISTIL_OPENCL=OFF \
    -DDISTIL_CPU=OFF -DDISTIL_BUILD_TESTS=ON -DDISTIL_BUILD_BENCH=ON -DDISTIL_WERROR=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}" > "$OUT/configure.log" 2>&1 ||
    { tail -30 "$OUT/configure.log"; exit 1; }
timeout 400 cmake --build "$BUILD" -j"$(nproc)" --target test_parity distil-bench \
    > "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
git log -1 --format='commit %H %s' 2>/dev/null

# hooks KERNEL: the test hooks (DISTIL_TEST_HOOKS) for the row kernel KERNEL ("" = the default).
hooks() { echo "${1:+fused_rows=$1}"; }

# parity KERNEL FILTER LOG: test_parity on cuda with the row kernel KERNEL ("" = default).
parity() {
    env DISTIL_TEST_HOOKS="$(hooks "$1")" DISTIL_TEST_BACKEND=cuda DISTIL_TEST_FILTER="$2" timeout 240 \
        "$BUILD/tests/test_parity" > "$OUT/$3" 2>&1
    echo "exit $?"
    grep -E "PASSED|FAILED|SKIPPED|error|declined" "$OUT/$3" | head -12
}
for k in "" resident stream; do
    log "entropy parity cases, fused_rows=${k:-(default)}"
    parity "$k" '*entropy*' "parity-entropy-${k:-default}.log"
done
log "the whole cuda parity suite, fused_rows=resident"
parity resident '*' parity-all-resident.log

TIMING=(--backend cuda --preset gpu --workload fused --fused-T 8192 --mode all --warmup 2
    --reps 5 --min-time 0.5 --quiet)
# bench NAME KERNEL [FLAGS...]: one distil-bench point set with the row kernel KERNEL ("" =
# default) into $OUT/NAME.{json,csv}
bench() {
    local name=$1 kernel=$2
    shift 2
    log "bench $name: fused_rows=${kernel:-(default)} $*"
    DISTIL_TEST_HOOKS="$(hooks "$kernel")" timeout 120 "$BUILD/bench/distil-bench" "${TIMING[@]}" "$@" \
        --json "$OUT/$name.json" --csv "$OUT/$name.csv" 2>&1 | grep -vE "^#"
}
for r in 1 2; do
    bench "plain-$r" ""
    bench "entropy-$r" "" --entropy
    bench "entropy-stream-$r" stream --entropy
done
log "done: $OUT"
