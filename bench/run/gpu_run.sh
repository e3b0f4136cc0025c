#!/bin/bash
# gpu_run.sh - the GPU run behind docs/PERFORMANCE.md: build distil with CUDA (+ OpenCL, + cpu when
# their dependencies are there), then time distil on cuda and opencl and the PyTorch eager,
# Liger-Kernel and torch.compile baselines and distil's Python package (distil.torch, called as
# Liger is) on the seed workloads; JSON/CSV, PNG plots and
# Markdown tables go to $OUT. Offline: Liger-Kernel is installed from .whl/ when present.
# usage: OUT=/some/dir bash bench/run/gpu_run.sh        (from the repository root; ~8 min)
#        SKIP_OPENCL=1 leaves out the OpenCL timings. distil-torch-queued: distil.torch with 8 calls
#        back to back per sample (bench/python/baselines.py --calls-per-sample), the GPU's time per call
#        without the host time before the first launch that a one-call sample includes.
# Each step has a time cap and the whole run a deadline (BUDGET_S, default 470 s), so a slow
# step loses only its own numbers. Steps run in order of importance.
set -u
cd "$(dirname "$0")/../.." || exit 1
# Raw output goes to $OUT, never into the source tree (default: a fresh folder under /tmp).
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/distil-gpu-run.XXXXXX")}
echo "gpu_run.sh: output in $OUT"
BUDGET_S=${BUDGET_S:-470}
BUILD=${BUILD:-build-gpu}
PY=${PYTHON:-python3}
START=$(date +%s)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1

log() { echo "[gpu_run +$(($(date +%s) - START))s] $*"; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }

# step CAP_S NAME CMD...: run CMD with a timeout of min(CAP_S, time left - 20 s for the plots).
step() {
    local cap=$1 name=$2
    shift 2
    local t=$(($(left) - 20))
    [ "$t" -gt "$cap" ] && t=$cap
    if [ "$t" -lt 10 ]; then
        log "SKIP $name: no time left"
        return 1
    fi
    log "START $name (cap ${t}s): $*"
    timeout --signal=INT --kill-after=10 "$t" "$@"
    local rc=$?
    log "END $name: exit $rc"
    return $rc
}

environment() {
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        git log -1 --format='commit %H %s' 2>/dev/null
        echo "source tree hash $(bash scripts/tree-hash.sh) (scripts/tree-hash.sh; .git may be stale on a copy)"
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
        nvcc --version | tail -2
        cmake --version | head -1
        lscpu | grep -E 'Model name|^CPU\(s\)'
        "$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
    } > "$OUT/environment.txt" 2>&1
    cat "$OUT/environment.txt"
}

# Liger-Kernel (pure Python) and, if missing, its one extra dependency `packaging`.
install_liger() {
    local pkgs=(.whl/liger_kernel-*.whl)
    if [ ! -f "${pkgs[0]}" ]; then
        log "no .whl/liger_kernel-*.whl: Liger-Kernel is skipped unless already installed"
        return 0
    fi
    if ! "$PY" -c 'import packaging' 2>/dev/null && [ -f "$(echo .whl/packaging-*.whl)" ]; then
        pkgs+=(.whl/packaging-*.whl)
    fi
    "$PY" -m pip install -q --upgrade --no-deps --no-index --target "$BUILD/pylib" "${pkgs[@]}" &&
        export PYTHONPATH="$PWD/$BUILD/pylib${PYTHONPATH:+:$PYTHONPATH}"
    "$PY" -c 'import liger_kernel.chunked_loss, liger_kernel.transformers; print("liger-kernel ok")'
}

# CUDA always; OpenCL and cpu when their dependencies configure (an option set ON whose
# dependency is missing is a configure error, so try the combinations in turn).
configure() {
    local hints=() cuda=${CUDA_HOME:-/usr/local/cuda}
    if [ -f "$cuda/include/CL/cl.h" ] && [ -e "$cuda/lib64/libOpenCL.so" ]; then
        hints=(-DOpenCL_INCLUDE_DIR="$cuda/include" -DOpenCL_LIBRARY="$cuda/lib64/libOpenCL.so")
    fi
    local cl cpu
    for combo in "ON ON" "ON OFF" "OFF ON" "OFF OFF"; do
        read -r cl cpu <<< "$combo"
        if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDISTIL_CUDA=ON -DDISTIL_HIP=OFF \
            -DDISTIL_OPENCL="$cl" -DDISTIL_CPU="$cpu" -DDISTIL_BUILD_TESTS=OFF \
            -DDISTIL_BUILD_EXAMPLES=OFF -DDISTIL_BUILD_BENCH=ON \
            -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}" "${hints[@]}" \
            >> "$OUT/configure.log" 2>&1; then
            log "configured: cuda ON, opencl $cl, cpu $cpu"
            return 0
        fi
        log "configure with opencl $cl, cpu $cpu failed (see configure.log)"
    done
    return 1
}

build() {
    log "START build"
    configure || return 1
    timeout 240 cmake --build "$BUILD" -j"$(nproc)" --target distil-bench > "$OUT/build.log" 2>&1
    local rc=$?
    tail -5 "$OUT/build.log"
    log "END build: exit $rc"
    return $rc
}

# Shared flags: median of >= 10 samples over >= 0.3 s after 3 warm-up calls.
TIMING=(--warmup 3 --reps 10 --max-reps 100 --min-time 0.3)

run_distil() {
    local bench=$BUILD/bench/distil-bench
    $bench --list | tee "$OUT/backends.txt"
    step 150 distil-cuda "$bench" --backend cuda --jsd-T 1024:8192 --fused-T 1024:32768 \
        "${TIMING[@]}" --json "$OUT/distil-cuda.json" --csv "$OUT/distil-cuda.csv"
    if grep -q '^  opencl .*device(s)' "$OUT/backends.txt"; then
        have_opencl=1
    fi
}

run_opencl() {
    [ -n "${SKIP_OPENCL:-}" ] && { log "SKIP distil-opencl: SKIP_OPENCL set"; return 0; }
    [ "${have_opencl:-0}" = 1 ] || { log "SKIP distil-opencl: no OpenCL device"; return 0; }
    DISTIL_OPENCL_PLATFORM=NVIDIA step 100 distil-opencl "$BUILD/bench/distil-bench" \
        --backend opencl --T 1024:8192 \
        --warmup 1 --reps 5 --max-reps 20 --min-time 0.2 \
        --json "$OUT/distil-opencl.json" --csv "$OUT/distil-opencl.csv"
}

# baselines NAME CAP ARGS...: bench/python/baselines.py on the GPU, floors as distil's.
baselines() {
    local name=$1 cap=$2
    shift 2
    step "$cap" "$name" "$PY" bench/python/baselines.py --device cuda "${TIMING[@]}" "$@" \
        --json "$OUT/$name.json" --csv "$OUT/$name.csv"
}

report() {
    local files=("$OUT"/*.json)
    [ -f "${files[0]}" ] || { log "no results"; return 1; }
    bash bench/run/plot.sh "$OUT/plots" "${files[@]}"
    local probe=()
    [ -f "$OUT/floor/floor-probe.json" ] && probe=(--probe "$OUT/floor/floor-probe.json")
    "$PY" bench/python/results_table.py ${probe[@]+"${probe[@]}"} "${files[@]}" > "$OUT/tables.md"
    log "tables: $OUT/tables.md, plots: $OUT/plots/"
}

# The Python package (distil.torch), built from this tree into the image's Python, for the
# distil-torch baselines (distil called exactly as Liger is).
install_package() {
    step 300 pip-install "$PY" -m pip install -q --no-build-isolation --no-deps \
        --config-settings=build-dir=/tmp/distil-wheel \
        --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}" \
        --config-settings=cmake.define.DISTIL_CPU=OFF \
        --config-settings=cmake.define.DISTIL_OPENCL=OFF . \
        > "$OUT/pip-install.log" 2>&1
}

# Debian packages the image lacks (CLBlast, cmocka, the ICD loader) travel as .deb files in
# .devcarry/debs (scripts/fetch-gpu-debs.sh); NVIDIA's OpenCL driver gets an .icd file.
unpack_deps() {
    local deps=/tmp/deps f
    for f in .devcarry/debs/*.deb; do
        [ -f "$f" ] && dpkg -x "$f" "$deps"
    done
    export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    . scripts/ocl-vendors.sh
}

environment
unpack_deps
install_liger
build || { log "build failed: see $OUT/build.log"; report; exit 1; }
mkdir -p "$OUT/floor" # the card's GEMM and copy rates, burst and at its power limit, this run
step 40 floor-probe "$PY" bench/python/floor_probe.py --seconds 4 --json "$OUT/floor/floor-probe.json"
run_distil
install_package && baselines distil-torch 150 --impl distil --T 1024:8192 &&
    baselines distil-torch-queued 90 --impl distil --T 1024:8192 --calls-per-sample 8
baselines torch-eager 100 --impl eager --T 1024:8192
baselines liger 150 --impl liger --T 1024:8192
baselines liger-long 60 --impl liger --workload fused --fused-T 16384,32768
run_opencl
baselines torch-compile 400 --impl compile --compile-dynamic 1 --T 1024:8192
report
log "done in $(($(date +%s) - START)) s"
