# distil_add_backend(NAME): add backends/NAME, whose CMakeLists defines the object library
# distil_backend_NAME (and links its vendor libraries into `distil` itself), put its objects
# into libdistil and tell core/registry.c about it with DISTIL_USE_<NAME>.
set(DISTIL_BACKENDS "" CACHE INTERNAL "")
macro(distil_add_backend name)
    add_subdirectory(${PROJECT_SOURCE_DIR}/backends/${name} ${PROJECT_BINARY_DIR}/backends/${name})
    string(TOUPPER ${name} _distil_up)
    target_sources(distil PRIVATE $<TARGET_OBJECTS:distil_backend_${name}>)
    target_compile_definitions(distil_registry PRIVATE DISTIL_USE_${_distil_up}=1)
    set(DISTIL_BACKENDS "${DISTIL_BACKENDS};${name}" CACHE INTERNAL "")
endmacro()

# Common settings of a backend object library.
function(distil_backend_library name)
    add_library(distil_backend_${name} OBJECT ${ARGN})
    # The public header and the backend-facing part of the core (the vtable, errors, the fault
    # hook, half conversions), and nothing else of core/: a backend that includes another core
    # header does not build.
    target_include_directories(distil_backend_${name} PRIVATE
        ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/core/backend_api)
    target_compile_definitions(distil_backend_${name} PRIVATE DISTIL_BUILDING=1)
    distil_target_warnings(distil_backend_${name})
endfunction()

# What a static libdistil needs from its users' build: each backend names its vendor libraries
# here, and DistilInstall.cmake writes them into distilConfig.cmake (find_dependency) and
# distil.pc (Requires.private / Libs.private). A shared libdistil carries them itself.
#   distil_package_dependency(CMAKE <line of CMake code> ...)  lines run before the targets load
#   distil_package_dependency(PC <pkg-config module> LIBS <fallback flags or paths>...)
#     the module goes to Requires.private when pkg-config knows it here, else the flags go
#     to Libs.private
#   distil_package_dependency(LIBS <flags or paths>...)  always Libs.private
function(distil_package_dependency)
    cmake_parse_arguments(PARSE_ARGV 0 _dep "" "PC" "CMAKE;LIBS")
    foreach(_line IN LISTS _dep_CMAKE)
        set_property(GLOBAL APPEND PROPERTY DISTIL_PACKAGE_CMAKE "${_line}")
    endforeach()
    set(_libs ${_dep_LIBS})
    if(_dep_PC)
        find_package(PkgConfig QUIET)
        if(PkgConfig_FOUND)
            pkg_check_modules(_distil_pc_${_dep_PC} QUIET ${_dep_PC})
        endif()
        if(_distil_pc_${_dep_PC}_FOUND)
            set_property(GLOBAL APPEND PROPERTY DISTIL_PACKAGE_PC_REQUIRES ${_dep_PC})
            set(_libs "")
        endif()
    endif()
    set_property(GLOBAL APPEND PROPERTY DISTIL_PACKAGE_PC_LIBS ${_libs})
endfunction()
