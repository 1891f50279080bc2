# `cmake --install build --prefix P`: the ssdtrain binary, the libraries
# (ssdtrain::traces, models, sim, exec, analysis) with their public headers,
# the configs, and a CMake package, so that an outside project's
#   find_package(ssdtrain CONFIG REQUIRED)
#   target_link_libraries(x PRIVATE ssdtrain::sim)
# builds against P (tests/install_test.cc does exactly that).
#
# Layout under P:
#   bin/ssdtrain
#   lib/libssdtrain_<module>.a, lib/cmake/ssdtrain/ (the package)
#   include/ssdtrain/<module>/*.h  (a module's top-level headers: its API.
#       detail/ and the few headers listed below that reach into it stay
#       private; consumers include "sim/simulate.h" as the project does)
#   share/ssdtrain/configs/{hardware,models,published}/
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SSDTRAIN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ssdtrain)
set(SSDTRAIN_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/ssdtrain)
set(ssdtrain_installed_modules traces models sim exec analysis)
# Top-level headers that are the executor's own machinery, not its API
# (each includes exec/detail/): the CPU backend's class (MakeDevice makes it),
# the CUDA backend's error macro, the tensor cache's state machine.
set(ssdtrain_private_headers cpu_device.h cuda_error.h tensor_cache.h)

foreach(module ${ssdtrain_installed_modules})
  if(NOT TARGET ${module})
    continue()
  endif()
  install(TARGETS ${module} EXPORT ssdtrainTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${SSDTRAIN_INSTALL_INCLUDEDIR})
  set(excludes "")
  foreach(h ${ssdtrain_private_headers})
    list(APPEND excludes PATTERN ${h} EXCLUDE)
  endforeach()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${module}/
    DESTINATION ${SSDTRAIN_INSTALL_INCLUDEDIR}/${module}
    FILES_MATCHING PATTERN "*.h"
    PATTERN detail EXCLUDE PATTERN tests EXCLUDE PATTERN bench EXCLUDE ${excludes})
endforeach()

install(EXPORT ssdtrainTargets NAMESPACE ssdtrain:: DESTINATION ${SSDTRAIN_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ssdtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ssdtrainConfig.cmake
  INSTALL_DESTINATION ${SSDTRAIN_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ssdtrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ssdtrainConfig.cmake
  ${PROJECT_BINARY_DIR}/ssdtrainConfigVersion.cmake
  DESTINATION ${SSDTRAIN_INSTALL_CMAKEDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/
  DESTINATION ${CMAKE_INSTALL_DATADIR}/ssdtrain/configs)
