#!/usr/bin/env bash
# Every tracked C, CUDA and OpenCL source must match the committed .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=()
while IFS= read -r f; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cl')
if [ ${#bad[@]} -gt 0 ]; then
    echo "check-format: not formatted (run clang-format -i): ${bad[*]}" >&2
    exit 1
fi
echo "check-format: all sources formatted"
