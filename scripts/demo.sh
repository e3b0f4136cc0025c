#!/usr/bin/env bash
# Install what is needed, build distil (every backend whose toolchain is present) and run the
# demo of both losses on the best backend available. Extra arguments go to distil-demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
. scripts/env.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDISTIL_BUILD_TESTS=OFF >build-configure.log \
    || { cat build-configure.log; exit 1; }
cmake --build build -j"$jobs"
./build/examples/distil-demo "$@"
