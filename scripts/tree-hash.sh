#!/usr/bin/env bash
# tree-hash.sh - one hash of the source files that decide distil's numbers (include/, core/,
# backends/, bench/, CMake files), from their contents, not from .git: a machine that receives a
# copy of the working tree (the GPU device machine) may carry a stale .git, so `git log` there can
# name the wrong commit. Run it here and there; equal hashes mean the same sources.
#   usage: scripts/tree-hash.sh        (from anywhere in the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
find include core backends bench cmake CMakeLists.txt -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cl' \
    -o -name '*.cmake' -o -name 'CMakeLists.txt' -o -name '*.py' -o -name '*.sh' \) \
    -not -path '*/results/*' -print0 | LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12
