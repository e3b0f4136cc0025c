#!/bin/bash
# trl_baseline.sh - distil against TRL 1.16's own fused kernel (trl.kernels.chunked_divergence.
# ChunkedDivergenceFunction, Triton), Liger-Kernel, torch.compile and eager on the soft-only
# fused workloads that TRL's DistillationTrainer runs (no hard CE, every row counts): the JSD at
# beta 0.5 and the forward KL (beta 0), at the seed shape (V 128256, Hs 2048, Ht 4096, bf16),
# T 1024 ... 16384, forward and forward + backward, time and peak working memory. distil also
# with return_entropy=True (TRL's kernel always returns the entropy), whose cuda tests
# (python/tests/test_trl_entropy.py) run first. JSON / CSV per step, a Markdown table and the
# log go to $OUT.
# usage: OUT=/some/dir bash bench/run/trl_baseline.sh    (repository root, a CUDA GPU; ~7 min)
# Offline: the wheels in .devcarry/wheels are installed first (--no-deps), made with
#   pip download --no-deps trl==1.16.0 liger-kernel==0.8.5 -d .devcarry/wheels
# (TRL's kernel needs only TRL itself, transformers and packaging: baselines.py stands in for
# TRL's ZeRO-3 helper when accelerate / datasets are missing). distil's package is built from
# this tree for sm_90a (CUDA_ARCHS) unless SKIP_INSTALL=1 (already installed, e.g. by
# bench/run/gpu_run.sh on the same machine).
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/distil-trl-baseline.XXXXXX")}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/trl_baseline.log") 2>&1
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-420}
START=$(date +%s)
log() { echo "[trl_baseline +$(($(date +%s) - START))s] $*"; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }

if ls .devcarry/wheels/*.whl > /dev/null 2>&1; then
    lib=/tmp/distil-trl-pylib
    "$PY" -m pip install -q --upgrade --no-deps --no-index --target "$lib" .devcarry/wheels/*.whl
    export PYTHONPATH="$lib${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c 'import trl; print("trl", trl.__version__)' || log "TRL is not importable: its rows fail"
"$PY" -c 'import liger_kernel; print("liger-kernel ok")' || log "no Liger-Kernel: skipped"
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    log "START pip install . (distil, cuda ${CUDA_ARCHS:-90a})"
    timeout 300 "$PY" -m pip install -q --no-build-isolation --no-deps \
        --config-settings=build-dir=/tmp/distil-wheel \
        --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}" \
        --config-settings=cmake.define.DISTIL_CPU=OFF \
        --config-settings=cmake.define.DISTIL_OPENCL=OFF . > "$OUT/pip-install.log" 2>&1
    log "END pip install: exit $?"
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
    git log -1 --format='commit %H %s' 2>/dev/null; } > "$OUT/environment.txt" 2>&1

# the student entropy output on cuda (docs/SPEC.md §6) against its float64 reference first
log "START entropy tests (cuda)"
timeout 120 "$PY" -m pytest -q -rs python/tests/test_trl_entropy.py -k cuda -p no:cacheprovider \
    > "$OUT/entropy-tests.log" 2>&1
log "END entropy tests: exit $? ($(tail -1 "$OUT/entropy-tests.log"))"

TS=1024,2048,4096,8192,16384
TIMING=(--warmup 2 --reps 5 --min-time 0.3 --max-reps 20 --soft-only 1 --workload fused
    --mode all --device cuda --quiet)
# run NAME CAP BETA IMPLS [T]: one baselines.py sweep, capped, into $OUT/NAME.{json,csv}
run() {
    local name=$1 cap=$2 beta=$3 impls=$4 ts=${5:-$TS}
    local t=$(($(left) - 10))
    [ "$t" -gt "$cap" ] && t=$cap
    if [ "$t" -lt 20 ]; then
        log "SKIP $name: no time left"
        return
    fi
    log "START $name (cap ${t}s)"
    timeout --signal=INT --kill-after=10 "$t" "$PY" bench/python/baselines.py "${TIMING[@]}" \
        --beta "$beta" --impl "$impls" --T "$ts" --json "$OUT/$name.json" --csv "$OUT/$name.csv"
    log "END $name: exit $?"
}
# in order of importance: distil and TRL's kernel first
run jsd-distil-trl 120 0.5 distil,trl
run fkl-distil-trl 120 0.0 distil,trl
run jsd-liger-entropy 80 0.5 liger,distil-entropy
run fkl-liger-entropy 80 0.0 liger,distil-entropy
run jsd-torch 90 0.5 compile,eager 1024,2048,4096,8192
run fkl-torch 90 0.0 compile,eager 1024,2048,4096,8192
files=("$OUT"/*.json)
if [ -f "${files[0]}" ]; then
    "$PY" bench/python/results_table.py "${files[@]}" > "$OUT/tables.md" 2>> "$OUT/trl_baseline.log" ||
        log "results_table.py failed: the JSON / CSV stand"
fi
log "done: $OUT"
