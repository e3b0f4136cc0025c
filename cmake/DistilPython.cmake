# The Python package (pyproject.toml, scikit-build-core): libdistil goes into the `distil`
# package folder of the wheel as component "python", and finds the CUDA toolkit's libraries
# through its run path when they are not on the loader's path (torch's own copies, loaded
# first by `import torch`, serve as well: they have the same sonames).
if(NOT DISTIL_PYTHON)
    return()
endif()
if(NOT BUILD_SHARED_LIBS)
    message(FATAL_ERROR "DISTIL_PYTHON needs a shared libdistil (BUILD_SHARED_LIBS=ON)")
endif()
set(_distil_py_rpath "$ORIGIN")
if(DISTIL_CUDA)
    find_package(CUDAToolkit REQUIRED)
endif()
if(DISTIL_CUDA AND CUDAToolkit_LIBRARY_DIR)
    list(APPEND _distil_py_rpath "${CUDAToolkit_LIBRARY_DIR}")
endif()
# One file named libdistil.so: wheels carry no symbolic links.
set_target_properties(distil PROPERTIES INSTALL_RPATH "${_distil_py_rpath}" NO_SONAME ON
                                        VERSION "" SOVERSION "")
install(TARGETS distil LIBRARY DESTINATION distil COMPONENT python
                       RUNTIME DESTINATION distil COMPONENT python)
