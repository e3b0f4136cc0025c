# DISTIL_PYTHON_PORTABLE: libdistil for the binary wheel (manylinux_2_28_x86_64).
# Every C file (and the host side of the CUDA files) includes distil_glibc_compat.h first: it
# binds the glibc functions whose default version is newer than 2.28 to their older versions,
# which every later glibc keeps. scripts/build-wheel.sh checks the result with objdump.
set(_distil_compat "${CMAKE_CURRENT_LIST_DIR}/distil_glibc_compat.h")
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:SHELL:-include ${_distil_compat}>"
                    "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcompiler=-include,${_distil_compat}>")
# glibc < 2.34 has the pthread and dl functions in these two libraries.
add_link_options("LINKER:--no-as-needed" "LINKER:-l:libpthread.so.0" "LINKER:-l:libdl.so.2"
                 "LINKER:--as-needed")
