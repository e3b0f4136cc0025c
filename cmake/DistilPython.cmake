# The Python package (pyproject.toml, scikit-build-core): libdistil goes into the `distil`
# package folder of the wheel as component "python".
#   DISTIL_PYTHON_LIBRARY_NAME  the file's name without lib/.so: "distil" (default), or
#                               "distil_cuda12" / "distil_cuda13" for the binary wheel's
#                               libraries of one CUDA major (python/distil/_loader.py picks one
#                               from torch.version.cuda)
#   DISTIL_PYTHON_PORTABLE      ON for the binary wheel: no absolute run paths (and
#                               cmake/DistilPortable.cmake)
#   DISTIL_PYTHON_EXTRA_LIBRARIES  libraries built beforehand (scripts/build-wheel.sh: the
#                               CUDA majors' libdistil_cudaM.so) installed beside libdistil
# Run path: $ORIGIN, scipy-openblas32's lib/ beside the package, and for the cuda backend the
# CUDA toolkit's libraries (a source build: the toolkit that built it; the binary wheel: the
# nvidia-* wheels beside the package, as pip's torch installs them). torch's own copies, loaded
# first by `import torch`, serve as well: they have the same sonames, so the process holds one
# CUDA runtime.
if(NOT DISTIL_PYTHON)
    return()
endif()
if(NOT BUILD_SHARED_LIBS)
    message(FATAL_ERROR "DISTIL_PYTHON needs a shared libdistil (BUILD_SHARED_LIBS=ON)")
endif()
set(DISTIL_PYTHON_LIBRARY_NAME "distil" CACHE STRING "libdistil's file name in the Python package, without lib and .so")
set(DISTIL_PYTHON_EXTRA_LIBRARIES "" CACHE STRING "Prebuilt libraries to install into the package")

set(_distil_py_rpath "$ORIGIN")
if(DISTIL_BLAS_VENDOR STREQUAL "scipy-openblas32")
    list(APPEND _distil_py_rpath "$ORIGIN/../scipy_openblas32/lib")
endif()
if(DISTIL_CUDA)
    find_package(CUDAToolkit REQUIRED)
    if(DISTIL_PYTHON_PORTABLE)
        # nvidia-cuda-runtime-cu12 / nvidia-cublas-cu12 (CUDA 12), nvidia-*  13 (nvidia/cu13)
        list(APPEND _distil_py_rpath "$ORIGIN/../nvidia/cuda_runtime/lib"
                                     "$ORIGIN/../nvidia/cublas/lib" "$ORIGIN/../nvidia/cu13/lib")
    elseif(CUDAToolkit_LIBRARY_DIR)
        list(APPEND _distil_py_rpath "${CUDAToolkit_LIBRARY_DIR}")
    endif()
endif()
# One file, no symbolic links (wheels carry none).
set_target_properties(distil PROPERTIES INSTALL_RPATH "${_distil_py_rpath}" NO_SONAME ON
                                        VERSION "" SOVERSION ""
                                        OUTPUT_NAME "${DISTIL_PYTHON_LIBRARY_NAME}")
install(TARGETS distil LIBRARY DESTINATION distil COMPONENT python
                       RUNTIME DESTINATION distil COMPONENT python
                       PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT devel)
if(DISTIL_PYTHON_EXTRA_LIBRARIES)
    install(FILES ${DISTIL_PYTHON_EXTRA_LIBRARIES} DESTINATION distil COMPONENT python)
endif()
