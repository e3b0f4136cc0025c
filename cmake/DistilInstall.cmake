# Install rules: the library, the header, a CMake package (find_package(distil) gives
# distil::distil) and a pkg-config file.
include(CMakePackageConfigHelpers)

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

# Private link dependencies matter only for a static libdistil.
set(DISTIL_PC_LIBS_PRIVATE "-lm -lpthread")
file(RELATIVE_PATH DISTIL_PC_PREFIX_REL "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/distil.pc.in ${PROJECT_BINARY_DIR}/distil.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/distil.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
