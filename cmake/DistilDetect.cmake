# Default values of the backend options, from what this machine has.
#   cuda    ON where a CUDA compiler AND an NVIDIA GPU are (nvidia-smi lists one): a machine with
#           nvcc and no GPU builds the host backends unless -DDISTIL_CUDA=ON asks (compiling the
#           cuda backend for three architectures takes minutes on a small machine, for code that
#           cannot run there). A GPU with no CUDA compiler is a configure error unless
#           -DDISTIL_CUDA=OFF says so (never a silent cpu-only build where a GPU is):
#           DistilCudaArch.cmake says how to get nvcc.
#   opencl  ON where OpenCL's headers are (the ICD loader is opened at run time).
include(CheckLanguage)

# The compute capabilities of this machine's NVIDIA GPUs ("9.0;8.6"), empty without one.
set(DISTIL_GPU_CAPS "")
find_program(DISTIL_NVIDIA_SMI nvidia-smi)
mark_as_advanced(DISTIL_NVIDIA_SMI)
if(DISTIL_NVIDIA_SMI)
    execute_process(COMMAND ${DISTIL_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _distil_caps RESULT_VARIABLE _distil_smi_rc
                    ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 30)
    if(_distil_smi_rc EQUAL 0 AND _distil_caps MATCHES "^[0-9]")
        string(REGEX REPLACE "[\r\n]+" ";" DISTIL_GPU_CAPS "${_distil_caps}")
        list(REMOVE_DUPLICATES DISTIL_GPU_CAPS)
    endif()
endif()

# With a GPU the default is ON whether or not nvcc is found: without one, DistilCudaArch.cmake
# stops with how to get it. (No GPU: nvcc is not even probed, which takes seconds.)
set(DISTIL_CUDA_FOUND_DEFAULT OFF)
if(DISTIL_GPU_CAPS)
    set(DISTIL_CUDA_FOUND_DEFAULT ON)
endif()

set(DISTIL_OPENCL_FOUND_DEFAULT OFF)
find_package(OpenCL QUIET)
find_path(DISTIL_OPENCL_INCLUDE_DIR CL/cl.h HINTS ${OpenCL_INCLUDE_DIRS})
if(DISTIL_OPENCL_INCLUDE_DIR)
    set(DISTIL_OPENCL_FOUND_DEFAULT ON)
endif()
