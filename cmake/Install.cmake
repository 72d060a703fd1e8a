# Exported, namespaced targets (lpdiag::diag, lpdiag::cuda) and a versioned package config, so
# downstream projects use find_package(lpdiag). tests/install builds such a project.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(LPDIAG_INSTALL_TARGETS lpdiag_diag)
if(LPDIAG_CUDA_ENABLED)
  list(APPEND LPDIAG_INSTALL_TARGETS lpdiag_cuda)
endif()
install(TARGETS ${LPDIAG_INSTALL_TARGETS} EXPORT lpdiagTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS lpdiag_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY libdiag/include/lpdiag DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT lpdiagTargets NAMESPACE lpdiag:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lpdiag)

configure_package_config_file(cmake/lpdiagConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/lpdiagConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lpdiag)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/lpdiagConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/lpdiagConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/lpdiagConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lpdiag)
