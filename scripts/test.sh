#!/usr/bin/env bash
# Install what is needed, build distil with warnings as errors and every backend whose
# toolchain is present (the CUDA/HIP backends compile without a GPU; their tests skip), and
# run the whole test suite: the C suite (ctest), then the Python package's (pip install . and
# pytest, scripts/test-python.sh; DISTIL_TEST_PYTHON=0 skips it). Backends without a device
# are reported as skipped, not passed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
. scripts/env.sh
build="${DISTIL_TEST_BUILD_DIR:-build-test}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDISTIL_WERROR=ON \
    -DDISTIL_BUILD_TESTS=ON -DDISTIL_BUILD_BENCH=ON ${DISTIL_CMAKE_ARGS:-}
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" ${DISTIL_CTEST_ARGS:-}
if [ "${DISTIL_TEST_PYTHON:-1}" != "0" ]; then
    bash scripts/test-python.sh
fi
