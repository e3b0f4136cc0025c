#!/usr/bin/env bash
# The Python package's part of the test command, the way users get it: scripts/build-wheel.sh
# builds the binary wheel's host library (cpu + opencl), pip installs the wheel into a fresh
# virtual environment that sees the system's packages (the test dependencies torch, numpy,
# pytest, transformers are installed where missing), and pytest runs the suite against the
# installed package from outside the source tree. The cuda backend is compiled once per test
# command: by the C build before this (scripts/test.sh). Without a GPU the CUDA tests skip with a
# message; with one, the suite takes the C build's libdistil (DISTIL_LIBRARY, its cuda backend
# for this machine's GPUs). scripts/gpu-wheel-check.sh tests the whole wheel on a GPU.
#   DISTIL_PY_VENV   the virtual environment (default build-py/venv, made afresh)
#   DISTIL_PY_GPU    1: build the wheel's own cuda library (torch's CUDA major, this machine's
#                    GPUs) and test that; 0: never use a GPU library; default auto: the C
#                    build's where a GPU is
#   DISTIL_TEST_BUILD_DIR  the C build (default build-test)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
venv="${DISTIL_PY_VENV:-build-py/venv}"
need=()
for m in torch numpy pytest transformers; do
    python3 -c "import $m" 2>/dev/null || need+=("$m")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "test-python.sh: installing ${need[*]}"
    python3 -m pip install -q "${need[@]}"
fi
gpu="${DISTIL_PY_GPU:-auto}"
cuda=none
lib=""
c_lib="${DISTIL_TEST_BUILD_DIR:-build-test}/core/libdistil.so"
if [ "$gpu" = auto ]; then
    gpu=0
    nvidia-smi -L 2>/dev/null | grep -q GPU && [ -f "$c_lib" ] && lib="$PWD/$c_lib"
fi
if [ "$gpu" = 1 ]; then
    cuda=$(python3 -c 'import torch; print((torch.version.cuda or "none").split(".")[0])')
fi
rm -rf build-py/dist
DISTIL_WHEEL_BUILD_DIR=build-py/wheel bash scripts/build-wheel.sh --cuda "$cuda" --archs auto --out build-py/dist
rm -rf "$venv"
python3 -m venv --system-site-packages "$venv"
py="$repo/$venv/bin/python"
echo "test-python.sh: pip install the wheel into a fresh $venv"
"$py" -m pip install -q build-py/dist/distil-*.whl
# The real TRL from PyPI for python/tests/test_trl.py (docs/TRL.md), pinned, into the fresh venv
# (its dependencies where the system lacks them); DISTIL_REQUIRE_TRL makes its absence a failure.
echo "test-python.sh: pip install trl==1.16.0 into $venv"
"$py" -m pip install -q --ignore-installed --no-deps trl==1.16.0
"$py" -m pip install -q trl==1.16.0
export DISTIL_REQUIRE_TRL=1
cd "$(mktemp -d)"
if [ -n "$lib" ]; then
    echo "test-python.sh: a GPU: the suite on the C build's $lib"
    export DISTIL_LIBRARY="$lib"
fi
"$py" -m distil
"$py" -m pytest -q -rs -p no:cacheprovider "$repo/python/tests"
