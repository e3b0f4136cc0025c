#!/usr/bin/env bash
# Install the Debian 12 packages distil needs.
#   install-deps.sh           build + demo: compiler, CMake, OpenBLAS, OpenMP, PoCL + CLBlast
#   install-deps.sh --test    also CMocka, valgrind and Python's venv + pip for the test suite
#   install-deps.sh --hip     also Debian's hipcc (ROCm 5.2), to compile the HIP backend
# CUDA is not a Debian package: the cuda backend builds when nvcc (CUDA 12+) is installed.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libopenblas-dev libomp-dev
      ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast-dev)
for arg in "$@"; do
    case "$arg" in
    --test) pkgs+=(libcmocka-dev valgrind clang clang-format git python3-venv python3-pip
                   libopenmpi-dev openmpi-bin) ;;
    --hip) pkgs+=(hipcc) ;;
    *) echo "install-deps.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "install-deps.sh: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
