# What `cmake --install <build> [--prefix P]` puts under the prefix besides
# the binaries (the top-level CMakeLists.txt includes this):
#   lib/libdet_sdk.so.X.Y.Z, its SONAME link libdet_sdk.so.0 and libdet_sdk.so
#   include/det/*.h                   the SDK headers, det/version.h included
#   lib/cmake/det/                    the CMake package: detConfig.cmake,
#                                     detConfigVersion.cmake, detTargets*.cmake
#                                     (det::sdk), detAddTrial.cmake
#   lib/pkgconfig/det-sdk.pc          the pkg-config file
# All of it is relocatable: the package and the .pc file find the prefix from
# their own place, so `--prefix` at install time is enough.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DET_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/det)

# (det_sdk's INSTALL_INTERFACE include directory is the installed include/.)
install(TARGETS det_sdk EXPORT detTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/trial_runtime/include/det DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  PATTERN "*.in" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/trial_runtime/include/det/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/det)

install(EXPORT detTargets NAMESPACE det:: DESTINATION ${DET_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/detConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/detConfig.cmake INSTALL_DESTINATION ${DET_CMAKE_DIR})
# 0.x releases share the SONAME libdet_sdk.so.0; a trial built against 0.1
# finds any 0.y >= 0.1 (and det-trial still checks the plugin ABI version).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/detConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/cmake/detConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/detConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/detAddTrial.cmake
  DESTINATION ${DET_CMAKE_DIR})

# det-sdk.pc: LibTorch's flags from what find_package(Torch) found here
# (Debian's libtorch-dev ships no .pc file); nlohmann_json through its own
# nlohmann_json.pc.
file(RELATIVE_PATH DET_PC_RELATIVE_PREFIX
  ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" DET_PC_RELATIVE_PREFIX "${DET_PC_RELATIVE_PREFIX}")
set(DET_PC_TORCH_CFLAGS "")
foreach(dir ${TORCH_INCLUDE_DIRS})
  string(APPEND DET_PC_TORCH_CFLAGS " -I${dir}")
endforeach()
string(APPEND DET_PC_TORCH_CFLAGS " ${TORCH_CXX_FLAGS}")
string(STRIP "${DET_PC_TORCH_CFLAGS}" DET_PC_TORCH_CFLAGS)
get_filename_component(DET_TORCH_LIBDIR "${TORCH_LIBRARY}" DIRECTORY)
set(DET_PC_TORCH_LIBS "-L${DET_TORCH_LIBDIR} -ltorch -ltorch_cpu -lc10")
if(TARGET torch_cuda)
  string(APPEND DET_PC_TORCH_LIBS " -ltorch_cuda -lc10_cuda")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/det-sdk.pc.in ${PROJECT_BINARY_DIR}/cmake/det-sdk.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/det-sdk.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
