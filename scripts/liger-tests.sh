#!/usr/bin/env bash
# Liger-Kernel's own tests of the five losses distil mirrors, unmodified, against distil.torch's
# Liger-named objects: the liger-kernel 0.8.5 sdist from PyPI (pinned by version and sha256)
# gives test/transformers/test_{jsd,fused_linear_jsd,kl_div,tvd}.py and
# test/chunked_loss/test_jsd_loss.py (with test/utils.py and test/conftest.py); they run with
# scripts/liger/liger_shim.py mapping the liger_kernel imports they use onto distil.torch. On a
# GPU machine the tests pick cuda themselves (liger_kernel.utils.infer_device).
#   usage: scripts/liger-tests.sh [pytest arguments]      (the files: build-liger/, never kept)
#   DISTIL_PYTHON   the python to run (default python3; it must import distil, torch,
#                   transformers, tokenizers, e.g. build-py/venv/bin/python)
#   OUT             a directory for the log (liger-tests.log), if set
#   LIGER_ALL=1     every shape; without it, on a machine without a GPU the two largest shapes of
#                   test_kl_div / test_tvd ([1, 4096, 32000], [32, 4096, 1024]: several GiB each
#                   on the host, minutes per case) are deselected
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.8.5
sha256=4e8f8f611a8ad735c37c989410d09820bb08881f131851a3967c34baa7889d66
py="${DISTIL_PYTHON:-python3}"
dir=build-liger
sdist="$dir/liger_kernel-$version.tar.gz"
mkdir -p "$dir"
if [ ! -f "$sdist" ]; then
    "$py" -m pip download -q --no-deps --no-binary :all: "liger-kernel==$version" -d "$dir"
fi
echo "$sha256  $sdist" | sha256sum -c --quiet
files=(test/__init__.py test/utils.py test/conftest.py test/transformers/test_jsd.py
       test/transformers/test_fused_linear_jsd.py test/transformers/test_kl_div.py
       test/transformers/test_tvd.py test/chunked_loss/test_jsd_loss.py)
rm -rf "$dir/src"
mkdir -p "$dir/src"
tar -xzf "$sdist" -C "$dir/src" --strip-components=1 "${files[@]/#/liger_kernel-$version/}"
for f in "${files[@]}"; do
    [ -f "$dir/src/$f" ] || { echo "liger-tests.sh: $f is not in the sdist" >&2; exit 1; }
done
touch "$dir/src/test/transformers/__init__.py" "$dir/src/test/chunked_loss/__init__.py"
select=()
if [ "${LIGER_ALL:-0}" != 1 ] && ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
    select=(-k "not 4096-32000 and not 32-4096-1024")
fi
log="$(cd "${OUT:-$dir}" && pwd)/liger-tests.log"
cd "$dir/src"
set +e
PYTHONPATH="$PWD:$(cd ../../scripts/liger && pwd)${PYTHONPATH:+:$PYTHONPATH}" \
    "$py" -m pytest -p liger_shim -q -p no:cacheprovider -rf "${select[@]}" "${@}" \
    test/transformers/test_jsd.py test/transformers/test_fused_linear_jsd.py \
    test/transformers/test_kl_div.py test/transformers/test_tvd.py \
    test/chunked_loss/test_jsd_loss.py 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
exit "$rc"
