#!/usr/bin/env bash
# Print the root of a CUDA toolkit of major version M (bin/nvcc, include/, lib64/ with cudart and
# cuBLAS), getting it from PyPI when this machine has none:
#   scripts/cuda-toolkit.sh M [DIR]     DIR: where a PyPI toolkit goes (default build-wheel/toolkitM)
# In order: $DISTIL_CUDA<M>_HOME; /usr/local/cuda when its nvcc is of major M (unless
# DISTIL_CUDA_PYPI=1); PyPI's packages
# (CUDA 13: nvidia-cuda-nvcc, -nvvm, -cuda-crt, -cuda-runtime, -cublas, -cuda-cccl, whose
# nvidia/cu13/ folder is a whole toolkit). CUDA 12 has no compiler on PyPI (nvidia-cuda-nvcc-cu12
# holds ptxas and NVVM but not nvcc, cudafe++, fatbinary or nvlink): Debian's CUDA 12.4.1
# packages, unpacked by scripts/cuda12-debian.sh (a local 12.8+ in DISTIL_CUDA12_HOME adds
# sm_100a).
set -euo pipefail
cd "$(dirname "$0")/.."
major="${1:?usage: scripts/cuda-toolkit.sh MAJOR [DIR]}"
dir="${2:-build-wheel/toolkit$major}"

nvcc_major() { "$1" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p'; }

home_var="DISTIL_CUDA${major}_HOME"
if [ -n "${!home_var:-}" ]; then
    [ "$(nvcc_major "${!home_var}/bin/nvcc")" = "$major" ] ||
        { echo "cuda-toolkit.sh: $home_var=${!home_var} has no CUDA $major nvcc" >&2; exit 1; }
    echo "${!home_var}"
    exit 0
fi
if [ -z "${DISTIL_CUDA_PYPI:-}" ] && [ "$(nvcc_major /usr/local/cuda/bin/nvcc)" = "$major" ]; then
    echo /usr/local/cuda
    exit 0
fi
case "$major" in
12) bash scripts/cuda12-debian.sh "$dir"
    exit 0 ;;
13) pkgs=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
          nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.0.2.14 nvidia-cuda-cccl==13.0.85)
    root="$dir/nvidia/cu13" ;;
*) echo "cuda-toolkit.sh: no CUDA $major toolkit here: install one and set $home_var to its" \
        "root" >&2
   exit 1 ;;
esac
if [ ! -x "$root/bin/nvcc" ]; then
    echo "cuda-toolkit.sh: CUDA $major from PyPI into $dir" >&2
    python3 -m pip install -q --no-deps --only-binary=:all: --target "$dir" "${pkgs[@]}" >&2
fi
# CMake's FindCUDAToolkit looks in lib64/ and links the unversioned names.
[ -e "$root/lib64" ] || ln -s lib "$root/lib64"
for so in "$root"/lib/lib*.so.*; do
    base="${so%%.so.*}.so"
    [ -e "$base" ] || ln -s "$(basename "$so")" "$base"
done
echo "$root"
