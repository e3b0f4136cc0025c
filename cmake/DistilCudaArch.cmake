# The cuda backend's compiler and architectures, settled before any directory enables CUDA
# (libdistil links the cuda objects, so the architectures are project-wide).
#   DISTIL_CUDA_ARCHS  "auto" (default): the GPUs of this machine (nvidia-smi's compute
#                      capabilities, 9.0 -> 90a and 10.0 -> 100a so that the arch-specific
#                      kernels build), or the wheel's list where no GPU is;
#                      "wheel": 80-real;90a-real;100a-real;100-virtual (A100, H100/H200,
#                      B200 machine code, and PTX that newer GPUs compile at load time).
#   CMAKE_CUDA_ARCHITECTURES, when given, wins over both.
if(NOT DISTIL_CUDA)
    return()
endif()

set(DISTIL_CUDA_WHEEL_ARCHS "80-real;90a-real;100a-real;100-virtual")
set(DISTIL_CUDA_ARCHS "auto" CACHE STRING "CUDA architectures when CMAKE_CUDA_ARCHITECTURES is unset: auto or wheel")
set_property(CACHE DISTIL_CUDA_ARCHS PROPERTY STRINGS auto wheel)

check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
    if(DISTIL_GPU_CAPS)
        set(_distil_why "this machine has an NVIDIA GPU (compute capability ${DISTIL_GPU_CAPS})")
    else()
        set(_distil_why "DISTIL_CUDA is ON")
    endif()
    message(FATAL_ERROR
        "${_distil_why} but no CUDA compiler (nvcc) was found, so the cuda backend cannot be "
        "built. Either\n"
        "  - install the binary wheel, which needs no compiler (docs/INSTALL.md), or\n"
        "  - get nvcc: a CUDA toolkit (add its bin/ to PATH), or PyPI's, matching torch's CUDA "
        "major M (python -c 'import torch; print(torch.version.cuda)'): "
        "scripts/cuda-toolkit.sh M DIR, then build with "
        "-C cmake.define.CMAKE_CUDA_COMPILER=DIR/bin/nvcc (pip) or "
        "-DCMAKE_CUDA_COMPILER=DIR/bin/nvcc (cmake), or\n"
        "  - build without the cuda backend on purpose: -C cmake.define.DISTIL_CUDA=OFF (pip) or "
        "-DDISTIL_CUDA=OFF (cmake).")
endif()

if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(_distil_archs "")
    if(DISTIL_NATIVE OR (DISTIL_CUDA_ARCHS STREQUAL "auto" AND DISTIL_GPU_CAPS))
        foreach(_cap IN LISTS DISTIL_GPU_CAPS)
            string(REPLACE "." "" _arch "${_cap}")
            if(_arch GREATER_EQUAL 90)
                string(APPEND _arch "a") # wgmma, clusters' arch-specific code, tcgen05
            endif()
            list(APPEND _distil_archs ${_arch})
        endforeach()
    endif()
    if(NOT _distil_archs)
        set(_distil_archs ${DISTIL_CUDA_WHEEL_ARCHS})
    endif()
    set(CMAKE_CUDA_ARCHITECTURES "${_distil_archs}" CACHE STRING "CUDA architectures" FORCE)
endif()
message(STATUS "distil: cuda: architectures ${CMAKE_CUDA_ARCHITECTURES}")
