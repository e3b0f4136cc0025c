# Sourced by the scripts: put an installed CUDA toolkit on PATH so that CMake finds nvcc.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi
jobs="$(nproc 2>/dev/null || echo 2)"
