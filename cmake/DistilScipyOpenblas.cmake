# The cpu backend's BLAS from PyPI's scipy-openblas32 (DISTIL_BLAS_VENDOR=scipy-openblas32, set by
# pyproject.toml): OpenBLAS built by the NumPy/SciPy maintainers for manylinux, pthreads (no
# OpenMP runtime), 32-bit integers, every symbol prefixed scipy_ so that it never clashes with
# another BLAS in the process (NumPy's, torch's MKL). The Python builds depend on the package at
# run time; cmake/DistilPython.cmake points libdistil's run path at its lib/ folder.
#   DISTIL_SCIPY_OPENBLAS_DIR  the package's folder (default: found by the build's Python)
# Sets DISTIL_CBLAS_INCLUDE_DIR, DISTIL_SCIPY_OPENBLAS_LIBRARY, DISTIL_SCIPY_OPENBLAS_DEFINES.
set(DISTIL_SCIPY_OPENBLAS_DIR "" CACHE PATH "The scipy_openblas32 package folder")
if(NOT DISTIL_SCIPY_OPENBLAS_DIR)
    if(NOT Python_EXECUTABLE)
        find_package(Python COMPONENTS Interpreter QUIET)
    endif()
    execute_process(
        COMMAND ${Python_EXECUTABLE} -c
            "import os, scipy_openblas32 as s; print(os.path.dirname(s.__file__))"
        OUTPUT_VARIABLE _distil_sob RESULT_VARIABLE _distil_rc
        ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_distil_rc EQUAL 0)
        set(DISTIL_SCIPY_OPENBLAS_DIR "${_distil_sob}" CACHE PATH "" FORCE)
    endif()
endif()
if(NOT EXISTS "${DISTIL_SCIPY_OPENBLAS_DIR}/include/cblas.h")
    message(FATAL_ERROR "DISTIL_BLAS_VENDOR=scipy-openblas32 but the scipy_openblas32 package was "
                        "not found (pip install scipy-openblas32, or set "
                        "DISTIL_SCIPY_OPENBLAS_DIR to its folder)")
endif()
set(DISTIL_CBLAS_INCLUDE_DIR "${DISTIL_SCIPY_OPENBLAS_DIR}/include")
set(DISTIL_SCIPY_OPENBLAS_LIBRARY "${DISTIL_SCIPY_OPENBLAS_DIR}/lib/libscipy_openblas.so")
# The cpu backend calls the unprefixed names.
set(DISTIL_SCIPY_OPENBLAS_DEFINES
    cblas_sgemm=scipy_cblas_sgemm
    openblas_set_num_threads=scipy_openblas_set_num_threads
    openblas_get_config=scipy_openblas_get_config
    DISTIL_CPU_HAVE_OPENBLAS_THREADS=1
    DISTIL_CPU_HAVE_OPENBLAS_CONFIG=1)
