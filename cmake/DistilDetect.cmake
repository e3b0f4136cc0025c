# Default values of the backend options: ON when the toolchain is present on this machine.
include(CheckLanguage)

set(DISTIL_CUDA_FOUND_DEFAULT OFF)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
    set(DISTIL_CUDA_FOUND_DEFAULT ON)
endif()

set(DISTIL_OPENCL_FOUND_DEFAULT OFF)
find_package(OpenCL QUIET)
if(OpenCL_FOUND)
    set(DISTIL_OPENCL_FOUND_DEFAULT ON)
endif()
