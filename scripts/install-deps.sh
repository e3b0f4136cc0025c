#!/usr/bin/env bash
# Install the Debian 12 packages distil needs.
#   install-deps.sh           build + demo: compiler, CMake, OpenBLAS, OpenMP, PoCL + CLBlast
#   install-deps.sh --test    also CMocka, valgrind and Python's venv + pip for the test suite
#   install-deps.sh --hip     also Debian's hipcc (ROCm 5.2), to compile the HIP backend
# CUDA is not a Debian package: the cuda backend builds when nvcc (CUDA 12+) is installed. Where
# nvcc is, CUTLASS's headers (PyPI's nvidia-cutlass wheel, pinned by its hash) are unpacked into
# deps/cutlass for the cuda backend's CUTLASS kernels (backends/cuda/gemm_stats.cu, gemm_gradw.cu);
# a copy of the wheel in .whl/ is taken first (machines without network). DISTIL_NO_CUTLASS=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."

cutlass_wheel=nvidia_cutlass-4.2.0.0-py3-none-any.whl
cutlass_sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
# The headers below cutlass_library/source/ of the wheel: include/ and tools/util/include/.
fetch_cutlass() {
    local dest=deps/cutlass
    [ -f "$dest/include/cutlass/cutlass.h" ] && return 0
    [ -n "${DISTIL_NO_CUTLASS:-}" ] && return 0
    command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || return 0
    local tmp
    tmp=$(mktemp -d)
    if [ -f ".whl/$cutlass_wheel" ]; then
        cp ".whl/$cutlass_wheel" "$tmp/"
    else
        python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cutlass==4.2.0.0" ||
            { echo "install-deps.sh: nvidia-cutlass not fetched (no pip or no network): the cuda" \
                   "backend builds without the row statistics GEMM"; rm -rf "$tmp"; return 0; }
    fi
    echo "$cutlass_sha256  $tmp/$cutlass_wheel" | sha256sum -c --quiet -
    python3 - "$tmp/$cutlass_wheel" "$dest" <<'PY'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
root = "cutlass_library/source/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        rel = name[len(root):] if name.startswith(root) else None
        if rel and (rel.startswith("include/") or rel.startswith("tools/util/include/")) \
                and not name.endswith("/"):
            out = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(name) as src, open(out, "wb") as dst:
                dst.write(src.read())
PY
    rm -rf "$tmp"
    echo "install-deps.sh: CUTLASS's headers in $dest"
}

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
    fetch_cutlass
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "install-deps.sh: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fetch_cutlass
