#!/usr/bin/env bash
# The Python package's part of the test command: `pip install .` (which builds libdistil with
# every backend whose toolchain is present) into a virtual environment that also sees the
# system's packages, the test dependencies (torch, numpy, pytest, transformers) where missing,
# then the pytest suite. CUDA-only tests skip with a message without a GPU. pip options by their
# long names: Debian 12's pip (23.0) has no -C.
#   DISTIL_PY_VENV   the virtual environment (default build-py/venv)
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
echo "test-python.sh: pip install ."
"$py" -m pip install -q --force-reinstall --no-deps --config-settings=build-dir=build-py/wheel .
"$py" -m pytest -q -rs python/tests
