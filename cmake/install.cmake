# `cmake --install BUILD --prefix P` (and `make install PREFIX=P`): the
# header, both libraries, a pkg-config file and a CMake package, so a
# project finds Loom with `pkg-config --cflags --libs loom` or
# `find_package(Loom)` and links Loom::loom (shared) or Loom::loom_static.
include(CMakePackageConfigHelpers)

install(FILES ${PROJECT_SOURCE_DIR}/include/loom.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set_target_properties(loom PROPERTIES EXPORT_NAME loom_static)
set_target_properties(loom_shared PROPERTIES EXPORT_NAME loom)
install(TARGETS loom loom_shared EXPORT LoomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS loom_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(LOOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
install(EXPORT LoomTargets NAMESPACE Loom:: DESTINATION ${LOOM_CMAKE_DIR})
set(LOOM_WITH_MPI ${MPI_C_FOUND})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/LoomConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/LoomConfig.cmake
                              INSTALL_DESTINATION ${LOOM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/LoomConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/LoomConfig.cmake ${PROJECT_BINARY_DIR}/LoomConfigVersion.cmake
        DESTINATION ${LOOM_CMAKE_DIR})

# pkg-config: the shared library by default; `--static` adds what the
# archive needs (OpenMP, oneDNN, libm, MPI when built with it).
set(LOOM_PC_PRIVATE "-fopenmp ${DNNL_LIBRARY} -lm")
if(MPI_C_FOUND)
  string(JOIN " " LOOM_PC_MPI ${MPI_C_LIBRARIES})
  string(APPEND LOOM_PC_PRIVATE " ${LOOM_PC_MPI}")
endif()
# Relocatable: the prefix is found from the .pc file's own folder, so
# `cmake --install --prefix P` needs no reconfiguring.
file(RELATIVE_PATH LOOM_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${PROJECT_SOURCE_DIR}/cmake/loom.pc.in ${PROJECT_BINARY_DIR}/loom.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/loom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
