#!/usr/bin/env bash
# Build the binary wheel, distil-<v>-py3-none-manylinux_2_28_x86_64.whl, into dist/ (docs/INSTALL.md):
#   libdistil.so          cpu (scipy-openblas32's BLAS) + opencl (the ICD loader opened at run time)
#   libdistil_cuda12.so   the same + the cuda backend built with CUDA 12, and
#   libdistil_cuda13.so   with CUDA 13, for sm_80, sm_90a (+ the CUTLASS kernels), sm_100a and
#                         compute_100 PTX (CUDA 12.4: sm_80, sm_90a, compute_90 PTX);
#                         python/distil/_loader.py picks one from torch.version.cuda
# Options:
#   --cuda "12 13"   the CUDA majors to build (default "12 13"; "none": the host library only)
#   --archs LIST     CMAKE_CUDA_ARCHITECTURES (default 80-real;90a-real;100a-real;100-virtual;
#                    "auto": this machine's GPUs, cmake/DistilCudaArch.cmake)
#   --out DIR        where the wheel goes (default dist)
# DISTIL_WHEEL_BUILD_DIR: the build folder (default build-wheel).
# Toolkits: scripts/cuda-toolkit.sh (DISTIL_CUDA12_HOME / DISTIL_CUDA13_HOME, /usr/local/cuda of
# that major, else PyPI's for CUDA 13 and Debian's CUDA 12.4.1 packages for CUDA 12). Build tools go into build-wheel/venv from PyPI. Every
# library's glibc / libstdc++ symbol versions are checked against manylinux_2_28 before tagging.
set -euo pipefail
cd "$(dirname "$0")/.."
majors="12 13"
archs="80-real;90a-real;100a-real;100-virtual"
out=dist
while [ $# -gt 0 ]; do
    case "$1" in
    --cuda) majors="$2"; shift 2 ;;
    --archs) archs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "build-wheel.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$majors" = none ] && majors=""
jobs=$(nproc)
top="${DISTIL_WHEEL_BUILD_DIR:-build-wheel}"
mkdir -p "$top" && top="$(cd "$top" && pwd)" # absolute: cmake and pip run elsewhere
venv="$top/venv"
py="$venv/bin/python"
t0=$(date +%s)
stamp() { echo "build-wheel.sh: [$(( $(date +%s) - t0 )) s] $*"; }

# The build tools, pinned where they end up inside the wheel's libraries.
if [ ! -x "$py" ]; then
    python3 -m venv "$venv"
fi
"$py" -m pip install -q "scikit-build-core>=0.10" "wheel>=0.40" nvidia-cutlass==4.2.0.0 \
    scipy-openblas32==0.3.34.481.3

# Options every library of the wheel shares: see cmake/DistilPython.cmake and DistilPortable.cmake.
common=(-DCMAKE_BUILD_TYPE=Release -DDISTIL_PYTHON=ON -DDISTIL_PYTHON_PORTABLE=ON
        -DDISTIL_BLAS_VENDOR=scipy-openblas32 -DDISTIL_CPU_OPENMP=OFF -DDISTIL_OPENCL=ON
        -DDISTIL_OPENCL_CLBLAST=OFF -DDISTIL_MPI=OFF -DDISTIL_HIP=OFF -DDISTIL_BUILD_TESTS=OFF
        -DDISTIL_BUILD_BENCH=OFF -DDISTIL_BUILD_EXAMPLES=OFF -DPython_EXECUTABLE="$py")

# The architectures a toolkit can build: one without sm_100 (CUDA 12 before 12.8) builds the
# others and compute_90 PTX in place of compute_100's (newer cards compile it at load).
archs_for() {
    local root=$1 list=$2
    if [ "$list" = auto ] || "$root/bin/nvcc" --list-gpu-arch | grep -qx compute_100; then
        echo "$list"
        return
    fi
    echo "$list" | tr ';' '\n' | sed -e '/^100a-real$/d' -e 's/^100-virtual$/90-virtual/' |
        paste -sd';'
}

extra=()
for m in $majors; do
    root=$(bash scripts/cuda-toolkit.sh "$m" "$top/toolkit$m")
    use=$(archs_for "$root" "$archs")
    stamp "CUDA $m from $root, architectures $use"
    b="$top/cuda$m"
    arch_def=(-DCMAKE_CUDA_ARCHITECTURES="$use")
    [ "$archs" = auto ] && arch_def=(-DDISTIL_CUDA_ARCHS=auto)
    cmake -S . -B "$b" "${common[@]}" -DDISTIL_CUDA=ON -DCMAKE_CUDA_COMPILER="$root/bin/nvcc" \
        -DCUDAToolkit_ROOT="$root" "${arch_def[@]}" \
        -DDISTIL_PYTHON_LIBRARY_NAME="distil_cuda$m" >"$b.log"
    cmake --build "$b" -j"$jobs" >>"$b.log" 2>&1 || { tail -40 "$b.log"; exit 1; }
    cmake --install "$b" --component python --prefix "$top/stage$m" >>"$b.log"
    extra+=("$top/stage$m/distil/libdistil_cuda$m.so")
done

stamp "the host library and the wheel"
rm -rf "$top/dist"
defs=("${common[@]}" -DDISTIL_CUDA=OFF "-DDISTIL_PYTHON_EXTRA_LIBRARIES=$(IFS=';'; echo "${extra[*]}")")
settings=(--config-settings=build-dir="$top/py-host")
for d in "${defs[@]}"; do
    d="${d#-D}"
    settings+=("--config-settings=cmake.define.${d%%=*}=${d#*=}")
done
"$py" -m pip wheel -q --no-deps --no-build-isolation "${settings[@]}" -w "$top/dist" .
whl=$(ls "$top"/dist/distil-*.whl)

stamp "checking symbol versions against manylinux_2_28"
"$py" scripts/wheel-check.py "$whl"
mkdir -p "$out"
"$py" -m wheel tags --remove --platform-tag manylinux_2_28_x86_64 "$whl" >/dev/null
final=$(ls "$top"/dist/distil-*manylinux_2_28_x86_64.whl)
mv "$final" "$out/"
stamp "$out/$(basename "$final") ($(du -k "$out/$(basename "$final")" | cut -f1) KiB)"
