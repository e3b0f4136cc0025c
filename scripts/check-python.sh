#!/usr/bin/env bash
# Python style, as check-format.sh is for C: `ruff format --check` and `ruff check` (the rules in
# pyproject.toml's [tool.ruff]) over bench/, examples/ and the package python/.
#   DISTIL_RUFF_PACKAGE=0 leaves python/ out (default 1: checked).
# ruff is pinned; when the one on PATH is another version it is installed into build-ruff/ (a
# venv: one ~12 MB wheel, a few seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
RUFF_VERSION=0.17.6
paths=(bench examples)
if [ "${DISTIL_RUFF_PACKAGE:-1}" = 1 ]; then
    paths+=(python)
fi
ruff=ruff
if [ "$(ruff --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]; then
    if [ ! -x build-ruff/bin/ruff ] || [ "$(build-ruff/bin/ruff --version)" != "ruff $RUFF_VERSION" ]; then
        python3 -m venv build-ruff
        build-ruff/bin/pip install --quiet "ruff==$RUFF_VERSION"
    fi
    ruff=build-ruff/bin/ruff
fi
rc=0
"$ruff" format --check "${paths[@]}" || rc=1
"$ruff" check "${paths[@]}" || rc=1
if [ "$rc" != 0 ]; then
    echo "check-python: run '$ruff format ${paths[*]} && $ruff check --fix ${paths[*]}'" >&2
    exit 1
fi
echo "check-python: ${paths[*]} formatted and clean"
