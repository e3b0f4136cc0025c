#!/usr/bin/env bash
# Install what is needed, build distil with warnings as errors and every backend this machine
# can run (cuda where nvcc and a GPU are; -DDISTIL_CUDA=ON in DISTIL_CMAKE_ARGS compiles it
# without a GPU, as CI does, and its tests skip), and run the whole test suite: the C suite
# (ctest), then the Python package's (the binary wheel's host part installed into a fresh venv,
# then pytest: scripts/test-python.sh; DISTIL_TEST_PYTHON=0 skips it). Backends without a device
# are reported as skipped, not passed. The cuda backend is compiled once, by the C build.
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
