#!/usr/bin/env bash
# gpu-check.sh - the correctness half of a GPU run (bench/run/gpu_run.sh is the speed half):
# build with cuda + opencl + tests, run the demo, `ctest -L cuda`, the cuda suites again with the
# fused loss's second lane delayed (test hook side_delay_us: a missing join would fail them),
# the parity suite with the portable GEMM and with the streaming row kernel (the paths HIP
# takes), the student entropy's cases with the resident row kernel required, the fp8 head's
# suites, fresh test_precision seeds with both row kernels
# (PRECISION_SEEDS, default 8), `ctest -L opencl` on the GPU's own OpenCL driver, then
# compute-sanitizer over the cuda parity suite.
# Logs go to $OUT. ONLY_BUILD=1 stops after the build; SKIP_SANITIZE=1 before the sanitizer.
# The device machine has no network: Debian packages it lacks (cmocka, CLBlast, the OpenCL ICD
# loader and headers, clinfo) travel as .deb files in .devcarry/debs (scripts/fetch-gpu-debs.sh)
# and are unpacked into /tmp/deps. The test hooks (core/testing/distil_testing.h) reach the test
# programs as DISTIL_TEST_HOOKS.
#   usage: OUT=/some/dir bash scripts/gpu-check.sh      (from the repository root; ~3 min)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# Raw output goes to $OUT, never into the source tree (default: a fresh folder under /tmp).
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/distil-gpu-check.XXXXXX")}
echo "gpu-check.sh: output in $OUT"
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/check.log") 2>&1
START=$(date +%s)
log() { echo "[gpu-check +$(($(date +%s) - START))s] $*"; }

deps=/tmp/deps
for f in .devcarry/debs/*.deb; do
    [ -f "$f" ] && dpkg -x "$f" "$deps"
done
export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="/usr/local/cuda/bin:$PATH"
# NVIDIA's OpenCL driver may be present without an ICD file for the loader: name it in one.
. scripts/ocl-vendors.sh
echo "OpenCL ICDs: $(cat "$OCL_ICD_VENDORS"/*.icd | tr '\n' ' ')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
[ -x "$deps/usr/bin/clinfo" ] && "$deps/usr/bin/clinfo" -l 2>&1 | head -20
# Ask each NVIDIA OpenCL driver library directly, past the loader (for when it lists no NVIDIA platform).
cc -O1 -o /tmp/icd_probe backends/opencl/tools/icd_probe.c -ldl &&
    /tmp/icd_probe libnvidia-opencl.so.1 $(find / -xdev -name 'libnvidia-opencl.so*' 2>/dev/null |
        head -n 4) 2>&1 | tee "$OUT/icd-probe.log"
ls /etc/OpenCL/vendors/ /dev/nvidia* 2>&1 | tr '\n' ' '
echo

log "configure + build"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDISTIL_CUDA=ON -DDISTIL_OPENCL=ON \
    -DDISTIL_CPU=OFF -DDISTIL_BUILD_TESTS=ON -DDISTIL_BUILD_BENCH=ON -DDISTIL_WERROR=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}" -DOpenCL_INCLUDE_DIR="$deps/usr/include" \
    -DOpenCL_LIBRARY="$deps/usr/lib/x86_64-linux-gnu/libOpenCL.so" > "$OUT/configure.log" 2>&1 ||
    { tail -30 "$OUT/configure.log"; exit 1; }
timeout 300 cmake --build "$BUILD" -j"$(nproc)" > "$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }

[ -n "${ONLY_BUILD:-}" ] && { log "built (ONLY_BUILD)"; exit 0; }
log "demo"
timeout 60 "$BUILD/examples/distil-demo" cuda
DISTIL_OPENCL_PLATFORM=NVIDIA timeout 90 "$BUILD/examples/distil-demo" opencl

log "ctest -L cuda"
timeout 200 ctest --test-dir "$BUILD" -L '^cuda$' -j8 --timeout 180 --output-on-failure \
    > "$OUT/ctest-cuda.log" 2>&1
grep -E "tests passed|Test +#" "$OUT/ctest-cuda.log"

log "ctest -L cuda with the second lane delayed after each fork (a missing join fails here)"
DISTIL_TEST_HOOKS=side_delay_us=300 timeout 200 ctest --test-dir "$BUILD" -L '^cuda$' \
    -R 'parity|chunking|determinism|graph' -j8 --timeout 180 --output-on-failure \
    > "$OUT/ctest-cuda-side-delay.log" 2>&1
grep -E "tests passed|Test +#" "$OUT/ctest-cuda-side-delay.log"

log "ctest -L cuda -R parity with the portable GEMM (the one HIP uses without hipBLAS)"
DISTIL_TEST_HOOKS=gemm=portable timeout 200 ctest --test-dir "$BUILD" -L '^cuda$' -R parity -j8 \
    --timeout 180 --output-on-failure > "$OUT/ctest-cuda-portable.log" 2>&1
grep -E "tests passed|Test +#" "$OUT/ctest-cuda-portable.log"

log "ctest -L cuda -R parity with the streaming row kernel (the one HIP and very long rows use)"
DISTIL_TEST_HOOKS=fused_rows=stream timeout 200 ctest --test-dir "$BUILD" -L '^cuda$' -R parity -j8 \
    --timeout 180 --output-on-failure > "$OUT/ctest-cuda-stream.log" 2>&1
grep -E "tests passed|Test +#" "$OUT/ctest-cuda-stream.log"

log "the student entropy's parity cases with the resident row kernel required (fused_rows=resident: a row pass it declines fails)"
DISTIL_TEST_HOOKS=fused_rows=resident DISTIL_TEST_BACKEND=cuda DISTIL_TEST_FILTER='*entropy*' timeout 120 \
    "$BUILD/tests/test_parity" > "$OUT/entropy-resident.log" 2>&1
echo "entropy cases, resident kernel required: exit $?"
grep -E "PASSED|FAILED|SKIPPED|error" "$OUT/entropy-resident.log" | head -12

log "fp8 teacher head (docs/SPEC.md §6): its suites with the emulation kernel forced, and the aligned parity cases with cuBLASLt fp8 required"
DISTIL_TEST_HOOKS=fp8=emulate timeout 200 ctest --test-dir "$BUILD" -L '^cuda$' -R 'fp8|parity' -j8 \
    --timeout 180 --output-on-failure > "$OUT/ctest-cuda-fp8-emulate.log" 2>&1
grep -E "tests passed|Test +#" "$OUT/ctest-cuda-fp8-emulate.log"
DISTIL_TEST_HOOKS=fp8=lt DISTIL_TEST_BACKEND=cuda DISTIL_TEST_FILTER='*V=65536*fp8*' timeout 120 \
    "$BUILD/tests/test_parity" > "$OUT/fp8-lt.log" 2>&1
DISTIL_TEST_HOOKS=fp8=lt DISTIL_TEST_BACKEND=cuda DISTIL_TEST_FILTER='*V=2048 *fp8*' timeout 120 \
    "$BUILD/tests/test_parity" >> "$OUT/fp8-lt.log" 2>&1
grep -E "PASSED|FAILED|SKIPPED|error" "$OUT/fp8-lt.log" | head -12

log "test_precision with fresh seeds on cuda, both row kernels (resident, then fused_rows=stream); a failing seed's full output (DISTIL_TEST_VERBOSE=1: every quantity beside its bound) goes to precision-fail-SEED.log"
# precision_run KERNEL [SEED]: test_precision on cuda with the resident (default) or the streaming row kernel.
precision_run() {
    local hooks=""
    [ "$1" = stream ] && hooks=fused_rows=stream
    env DISTIL_TEST_HOOKS=$hooks DISTIL_TEST_BACKEND=cuda ${2:+DISTIL_TEST_SEED=$2 DISTIL_TEST_VERBOSE=1} \
        timeout 60 "$BUILD/tests/test_precision"
}
for i in $(seq "${PRECISION_SEEDS:-8}"); do
    for k in resident stream; do
        precision_run $k > "$OUT/precision.tmp" 2>&1
        rc=$?
        seed=$(grep -m1 -o 'DISTIL_TEST_SEED=[0-9]*' "$OUT/precision.tmp" | cut -d= -f2)
        echo "precision $k seed $seed: rc $rc"
        if [ "$rc" != 0 ] && [ -n "$seed" ]; then
            grep -E "> bound" "$OUT/precision.tmp" | head -3
            precision_run $k "$seed" > "$OUT/precision-fail-$k-$seed.log" 2>&1
        fi
    done
done

log "ctest -L opencl (NVIDIA OpenCL)"
DISTIL_OPENCL_PLATFORM=NVIDIA timeout 200 ctest --test-dir "$BUILD" -L '^opencl$' -j4 \
    --timeout 180 --output-on-failure > "$OUT/ctest-opencl.log" 2>&1
grep -E "tests passed|Test +#" "$OUT/ctest-opencl.log"

[ -n "${SKIP_SANITIZE:-}" ] && { log "done (sanitizer skipped)"; exit 0; }
log "compute-sanitizer over the cuda parity suite"
DISTIL_SANITIZE_REGEX="${SANITIZE_REGEX:-parity}" DISTIL_SANITIZE_TIMEOUT=100 \
    timeout 330 bash scripts/gpu-sanitize.sh "$BUILD" > "$OUT/sanitize.log" 2>&1
tail -8 "$OUT/sanitize.log"
log "done"
