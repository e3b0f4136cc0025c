#!/usr/bin/env bash
# Time `pip install .` on a GPU machine with no network: the build requirements (scikit-build-core,
# nvidia-cutlass, scipy-openblas32) come from the carried WHEELS folder, CMake and nvcc from the
# machine; the defaults pick the cuda backend for this machine's GPUs (sm_90a on an H100, with
# the CUTLASS kernels), then `python -m distil` on the result.
#   usage: OUT=/some/dir bash scripts/gpu-source-build.sh [WHEELS]     (WHEELS default .whl)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
wheels=$(cd "${1:-.whl}" && pwd) || exit 2
OUT=${OUT:-$PWD/gpu-source-out}
mkdir -p "$OUT"
py=${PYTHON:-python3}
tmp=$(mktemp -d)
export PATH="/usr/local/cuda/bin:$PATH"
# --no-deps: the build reads only nvidia-cutlass's headers, not its Python runtime (cuda-python).
"$py" -m pip install -q --no-index --no-deps --find-links "$wheels" --target "$tmp/deps" \
    scikit-build-core packaging pathspec nvidia-cutlass scipy-openblas32 || exit 1
export PYTHONPATH="$tmp/deps"
start=$(date +%s%N)
"$py" -m pip install -v --no-index --no-build-isolation --no-deps --target "$tmp/site" \
    --config-settings=build-dir="$tmp/build" . > "$OUT/pip-install.log" 2>&1 ||
    { tail -40 "$OUT/pip-install.log"; exit 1; }
end=$(date +%s%N)
echo "pip install . ($(nproc) cores): $(( (end - start) / 1000000 )) ms" | tee "$OUT/time.txt"
# The package's run-time BLAS, beside it as pip would install it (the run path is relative).
"$py" -m pip install -q --no-index --no-deps --find-links "$wheels" --target "$tmp/site" \
    scipy-openblas32 || exit 1
grep -E "distil: (cuda|CUTLASS)" "$OUT/pip-install.log" | head
cd "$tmp" && PYTHONPATH="$tmp/site:$tmp/deps" "$py" -X faulthandler -m distil | tee "$OUT/distil.txt"
