# Warning and sanitizer flags, applied per target with distil_target_warnings().
set(DISTIL_C_WARNINGS -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wno-unused-parameter)
# CUDA sources: nvcc's own diagnostics and those of the host compiler it runs. HIP sources take
# DISTIL_HIP_WARNINGS from backends/hip (hipcc is clang: the host flags apply directly).
set(DISTIL_CUDA_WARNINGS -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter)
set(DISTIL_HIP_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(DISTIL_WERROR)
    list(APPEND DISTIL_C_WARNINGS -Werror)
    list(APPEND DISTIL_CUDA_WARNINGS "SHELL:-Werror all-warnings" -Xcompiler=-Werror)
    list(APPEND DISTIL_HIP_WARNINGS -Werror)
endif()

function(distil_target_warnings target)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C>:${DISTIL_C_WARNINGS}>
                                             $<$<COMPILE_LANGUAGE:CUDA>:${DISTIL_CUDA_WARNINGS}>)
endfunction()

if(DISTIL_SANITIZE)
    string(REPLACE ";" "," _distil_san "${DISTIL_SANITIZE}")
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_distil_san}>
                        $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                        $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
    add_link_options(-fsanitize=${_distil_san})
endif()

if(DISTIL_NATIVE)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-march=native>)
endif()
