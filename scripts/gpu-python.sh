#!/usr/bin/env bash
# gpu-python.sh - the Python package on a GPU machine: `pip install .` (cuda backend; the cpu and
# opencl backends only where their libraries are there), the pytest suite with its CUDA tests,
# and the package's timings: bench/python/host_overhead.py (host time per call, layer by layer),
# bench/python/autograd_floor.py (torch's own autograd.Function floor) and
# bench/python/torch_step.py (host overhead per call, a training step of the tiny example with
# distil, Liger-Kernel and torch.compile). Liger-Kernel is installed from .whl/ when a wheel is
# there (no network on the device machine).
#   usage: OUT=/some/dir bash scripts/gpu-python.sh          (from the repository root; ~3 min)
#   CUDA_ARCHS (default 90a), DISTIL_PY_CPU / DISTIL_PY_OPENCL (default OFF); ONLY_TESTS=1 stops
#   after pytest
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/gpu-python-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/python.log") 2>&1
START=$(date +%s)
log() { echo "[gpu-python +$(($(date +%s) - START))s] $*"; }
export PATH="/usr/local/cuda/bin:$PATH"

for w in .whl/liger_kernel-*.whl; do
    [ -f "$w" ] && "$PY" -m pip install -q --no-index --no-deps "$w" && log "installed $w"
done
log "pip install ."
timeout 400 "$PY" -m pip install -q --no-build-isolation --no-deps --config-settings=build-dir=/tmp/distil-wheel \
    --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90a}" \
    --config-settings=cmake.define.DISTIL_CPU="${DISTIL_PY_CPU:-OFF}" \
    --config-settings=cmake.define.DISTIL_OPENCL="${DISTIL_PY_OPENCL:-OFF}" . > "$OUT/pip-install.log" 2>&1 ||
    { tail -30 "$OUT/pip-install.log"; exit 1; }
(cd /tmp && "$PY" -c 'import distil; print("distil", distil.version(), distil.backends(), distil.library_path())')

log "pytest"
timeout 600 "$PY" -m pytest -q -rs python/tests > "$OUT/pytest.log" 2>&1
tail -15 "$OUT/pytest.log"
[ -n "${ONLY_TESTS:-}" ] && { log "done (timings skipped)"; exit 0; }

log "bench/python/host_overhead.py"
timeout 300 "$PY" bench/python/host_overhead.py --json "$OUT/host-overhead.json" > "$OUT/host-overhead.md" 2>&1
cat "$OUT/host-overhead.md"
log "bench/python/autograd_floor.py"
timeout 120 "$PY" bench/python/autograd_floor.py --calls 1000 --rounds 3 > "$OUT/autograd-floor.md" 2>&1
cat "$OUT/autograd-floor.md"

log "bench/python/torch_step.py"
timeout 300 "$PY" bench/python/torch_step.py --json "$OUT/torch-step.json" > "$OUT/torch-step.md" 2>&1
cat "$OUT/torch-step.md"
log "done"
