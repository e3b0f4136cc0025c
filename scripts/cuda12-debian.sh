#!/usr/bin/env bash
# A CUDA 12 toolkit for building libdistil_cuda12.so where no CUDA 12 is installed: Debian's
# non-free packages of CUDA 12.4.1 (trixie), downloaded with a private apt configuration (the
# archive's signature checked against this system's debian-archive-keyring), unpacked with
# dpkg -x (nothing is installed) and laid out as a toolkit root: bin/ (nvcc, ptxas, fatbinary,
# nvlink, cudafe++), nvvm/ (cicc, libdevice), include/ (with cub, thrust and libcu++), lib64/.
# PyPI has no CUDA 12 compiler (nvidia-cuda-nvcc-cu12 ships ptxas alone). CUDA 12.4 has no
# sm_100a: scripts/build-wheel.sh builds CUDA 12 for sm_80 and sm_90a with compute_90 PTX.
#   usage: scripts/cuda12-debian.sh DIR      (prints DIR/cuda, the toolkit root)
set -euo pipefail
dir="$(mkdir -p "${1:?usage: scripts/cuda12-debian.sh DIR}" && cd "$1" && pwd)"
root="$dir/cuda"
if [ -x "$root/bin/nvcc" ]; then
    echo "$root"
    exit 0
fi
# Pinned: the versions trixie ships (apt refuses any other).
pkgs=(nvidia-cuda-toolkit=12.4.131~12.4.1-2 nvidia-cuda-dev=12.4.127~12.4.1-2
      libcudart12=12.4.127~12.4.1-2 libcublas12=12.4.5.8~12.4.1-2
      libcublaslt12=12.4.5.8~12.4.1-2 libnvvm4=12.4.131~12.4.1-2 libcub-dev=2.3.2-2
      libthrust-dev=2.3.2-2 libcu++-dev=2.3.2-2)
apt_dir="$dir/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dir/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
    "http://deb.debian.org/debian trixie main contrib non-free" > "$apt_dir/sources.list"
opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
      -o APT::Sandbox::User=root)
echo "cuda12-debian.sh: CUDA 12.4.1 from Debian trixie into $dir" >&2
apt-get "${opts[@]}" -q update >&2
(cd "$dir/debs" && apt-get "${opts[@]}" -q download "${pkgs[@]}" >&2)
unpacked="$dir/unpacked"
rm -rf "$unpacked" "$root"
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$unpacked"; done
tk="$unpacked/usr/lib/nvidia-cuda-toolkit"
mkdir -p "$root/bin" "$root/nvvm/bin" "$root/nvvm/libdevice" "$root/lib64"
cp "$tk/bin/nvcc" "$root/bin/"
cp -r "$tk/bin/crt" "$root/bin/"
cp "$tk/bin/cicc" "$root/nvvm/bin/"
cp "$tk/libdevice/libdevice.10.bc" "$root/nvvm/libdevice/"
for tool in cudafe++ fatbinary nvlink ptxas bin2c nvprune cuobjdump; do
    cp -L "$unpacked/usr/bin/$tool" "$root/bin/"
done
cp -r "$unpacked/usr/include" "$root/include"
cp -a "$unpacked"/usr/lib/x86_64-linux-gnu/lib{cudart,cublas,cudadevrt,culibos}* \
    "$root/lib64/"
# Debian's nvcc reads /etc/nvcc.profile; this one points nvcc at the root it sits in.
cat > "$root/bin/nvcc.profile" <<'PROFILE'
TOP                = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH   += $(TOP)/lib64:
PATH              += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES          +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES          =+ $(_SPACE_) "-L$(TOP)/lib64"
PROFILE
rm -rf "$unpacked" "$dir/debs" "$apt_dir"
"$root/bin/nvcc" --version | tail -1 >&2
echo "$root"
