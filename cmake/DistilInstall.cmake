# Install rules: the library, the header, a CMake package (find_package(distil) gives
# distil::distil) and a pkg-config file.
include(CMakePackageConfigHelpers)

# The backends' dependencies (distil_package_dependency in DistilBackend.cmake). The CMake
# package finds them only for a static libdistil, whose exported target names them; pkg-config
# lists them as private, which only `pkg-config --static` reads.
get_property(_distil_dep_cmake GLOBAL PROPERTY DISTIL_PACKAGE_CMAKE)
get_property(_distil_pc_requires GLOBAL PROPERTY DISTIL_PACKAGE_PC_REQUIRES)
get_property(_distil_pc_libs GLOBAL PROPERTY DISTIL_PACKAGE_PC_LIBS)
set(DISTIL_CONFIG_DEPENDENCIES "")
if(NOT BUILD_SHARED_LIBS)
    list(REMOVE_DUPLICATES _distil_dep_cmake)
    string(REPLACE ";" "\n" DISTIL_CONFIG_DEPENDENCIES "${_distil_dep_cmake}")
endif()
list(REMOVE_DUPLICATES _distil_pc_requires)
string(REPLACE ";" " " DISTIL_PC_REQUIRES_PRIVATE "${_distil_pc_requires}")
string(REPLACE ";" " " DISTIL_PC_LIBS_PRIVATE "${_distil_pc_libs}")

install(TARGETS distil EXPORT distilTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT distilTargets NAMESPACE distil:: FILE distilTargets.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/distil)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/distilConfig.cmake.in
    ${PROJECT_BINARY_DIR}/distilConfig.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/distil)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/distilConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/distilConfig.cmake ${PROJECT_BINARY_DIR}/distilConfigVersion.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/distil)

file(RELATIVE_PATH DISTIL_PC_PREFIX_REL "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/distil.pc.in ${PROJECT_BINARY_DIR}/distil.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/distil.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
