#!/usr/bin/env bash
# The binary wheel on a GPU machine: installed with pip into a fresh virtual environment that
# sees the machine's torch, with no CUDA compiler on PATH and no network, then `python -m distil`
# and the Python suite (its CUDA tests included) run against the installed package.
#   usage: OUT=/some/dir bash scripts/gpu-wheel-check.sh [WHEELS]
#   WHEELS (default .whl): a folder holding distil-*-manylinux_2_28_x86_64.whl (scripts/build-wheel.sh)
#   and scipy_openblas32-*.whl (its one dependency: python3 -m pip download --no-deps
#   --only-binary=:all: scipy-openblas32 -d .whl), carried to the machine.
# Logs go to $OUT: install.log (with the install's seconds), distil.txt, pytest.log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo=$PWD
wheels=$(cd "${1:-.whl}" && pwd) || exit 2
OUT=${OUT:-$PWD/gpu-wheel-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu-wheel-check.log") 2>&1
py=${PYTHON:-python3}
tmp=$(mktemp -d)

# PATH without any folder that holds nvcc; CUDA_HOME and friends unset.
clean=""
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [ -n "$d" ] && [ ! -x "$d/nvcc" ] && clean="${clean:+$clean:}$d"
done
export PATH="$clean"
unset CUDA_HOME CUDA_PATH CUDACXX DISTIL_LIBRARY DISTIL_VARIANT
if command -v nvcc >/dev/null; then echo "nvcc still on PATH"; exit 1; fi
echo "PATH=$PATH (no nvcc); $("$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"

# A fresh venv that sees the machine's packages (torch, pytest, ...): where python3 is itself a
# venv, --system-site-packages would show the base interpreter's instead, so a .pth file adds
# python3's own site-packages after the new venv's.
"$py" -m venv "$tmp/venv"
vpy="$tmp/venv/bin/python"
"$py" -c 'import site; print("\n".join(site.getsitepackages()))' > \
    "$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine-site.pth"
start=$(date +%s%N)
"$vpy" -m pip install --no-index --find-links "$wheels" distil > "$OUT/install.log" 2>&1 ||
    { cat "$OUT/install.log"; exit 1; }
end=$(date +%s%N)
echo "pip install (no index, no compiler): $(( (end - start) / 1000000 )) ms" | tee -a "$OUT/install.log"
ls -l "$wheels"/distil-*.whl | tee -a "$OUT/install.log"

cd "$tmp" || exit 2 # outside the source tree: `import distil` is the installed wheel
"$vpy" -m distil | tee "$OUT/distil.txt"
"$vpy" -c 'import distil, sys; b = distil.backends(); sys.exit(0 if b.get("cuda", 0) > 0 else 1)' ||
    { echo "FAIL: the cuda backend has no device"; exit 1; }
timeout 900 "$vpy" -m pytest -q -rs -p no:cacheprovider "$repo/python/tests" > "$OUT/pytest.log" 2>&1
rc=$?
tail -25 "$OUT/pytest.log"
echo "pytest exit status $rc"
rm -rf "$tmp"
exit $rc
