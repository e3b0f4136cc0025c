#!/usr/bin/env bash
# The Python package's part of the test command: `pip install .` (which builds libdistil with
# every backend whose toolchain is present) into a virtual environment that also sees the
# system's packages, the test dependencies (torch, numpy, pytest, transformers) where missing,
# then the pytest suite. CUDA-only tests skip with a message without a GPU. Without a GPU the
# package is built without its cuda and hip backends: there they could only be compiled, which
# the C build before this already does, and compiling them again for the package took ~5 of CI's
# minutes. pip options by their long names: Debian 12's pip (23.0) has no -C.
#   DISTIL_PY_VENV   the virtual environment (default build-py/venv)
#   DISTIL_PY_GPU    1: build the package's GPU backends without a GPU; 0: never (default: auto)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${DISTIL_PY_VENV:-build-py/venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv --system-site-packages "$venv"
fi
py="$venv/bin/python"
need=()
for m in torch numpy pytest transformers; do
    "$py" -c "import $m" 2>/dev/null || need+=("$m")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "test-python.sh: installing ${need[*]}"
    "$py" -m pip install -q "${need[@]}"
fi
# The real TRL for python/tests/test_trl.py (docs/TRL.md): the release distil.torch.trl is
# tested against, pinned, with its own dependencies (accelerate, datasets).
if [ "$("$py" -c 'import trl; print(trl.__version__)' 2>/dev/null)" != 1.16.0 ]; then
    echo "test-python.sh: installing trl==1.16.0"
    "$py" -m pip install -q trl==1.16.0
fi
gpu="${DISTIL_PY_GPU:-auto}"
if [ "$gpu" = auto ]; then
    gpu=0
    { nvidia-smi -L 2>/dev/null | grep -q GPU || [ -e /dev/kfd ]; } && gpu=1
fi
opts=(--config-settings=build-dir=build-py/wheel)
if [ "$gpu" = 0 ]; then
    echo "test-python.sh: no GPU: the package without its cuda and hip backends (DISTIL_PY_GPU=1 builds them)"
    opts+=(--config-settings=cmake.define.DISTIL_CUDA=OFF --config-settings=cmake.define.DISTIL_HIP=OFF)
fi
echo "test-python.sh: pip install ."
"$py" -m pip install -q --force-reinstall --no-deps "${opts[@]}" .
"$py" -m pytest -q -rs python/tests
