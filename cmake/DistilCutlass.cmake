# CUTLASS's headers for the cuda backend's sm_90a kernels, sets DISTIL_CUTLASS_DIR (include/ and
# tools/util/include/ below it) or leaves it empty. In order:
#   -DDISTIL_CUTLASS_DIR=...       given;
#   deps/cutlass                   where scripts/install-deps.sh unpacked them;
#   the Python package cutlass_library (PyPI's nvidia-cutlass), as pyproject.toml's build
#   requirements install it for `pip install .`: its headers are below cutlass_library/source/.
# pyproject.toml pins nvidia-cutlass to one version: PyPI never replaces a released file, so the
# version names the bytes (pip checks no hashes of build requirements; the version printed
# below is the one compiled).
set(DISTIL_CUTLASS_DIR "" CACHE PATH "CUTLASS's headers (include/ and tools/util/include/ below it)")
if(NOT DISTIL_CUTLASS_DIR AND EXISTS "${PROJECT_SOURCE_DIR}/deps/cutlass/include/cutlass/cutlass.h")
    set(DISTIL_CUTLASS_DIR "${PROJECT_SOURCE_DIR}/deps/cutlass" CACHE PATH "" FORCE)
endif()
if(NOT DISTIL_CUTLASS_DIR)
    if(NOT Python_EXECUTABLE)
        find_package(Python COMPONENTS Interpreter QUIET)
    endif()
    if(Python_EXECUTABLE)
        execute_process(
            COMMAND ${Python_EXECUTABLE} -c
                "import os, cutlass_library as c; print(os.path.join(os.path.dirname(c.__file__), 'source'))"
            OUTPUT_VARIABLE _distil_cutlass RESULT_VARIABLE _distil_rc
            ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
        if(_distil_rc EQUAL 0 AND EXISTS "${_distil_cutlass}/include/cutlass/cutlass.h")
            set(DISTIL_CUTLASS_DIR "${_distil_cutlass}" CACHE PATH "" FORCE)
        endif()
    endif()
endif()
if(DISTIL_CUTLASS_DIR AND EXISTS "${DISTIL_CUTLASS_DIR}/include/cutlass/version.h")
    file(STRINGS "${DISTIL_CUTLASS_DIR}/include/cutlass/version.h" _distil_cv
         REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) [0-9]+")
    string(REGEX REPLACE "[^;]*CUTLASS_[A-Z]+ ([0-9]+)" "\\1" _distil_cv "${_distil_cv}")
    string(REPLACE ";" "." _distil_cv "${_distil_cv}")
    message(STATUS "distil: CUTLASS ${_distil_cv} at ${DISTIL_CUTLASS_DIR}")
endif()
