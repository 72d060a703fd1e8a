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

# The Python package, with the op library inside it (lpdiag/lib, where the package looks first),
# under lib/python3/dist-packages (Debian's layout for packages outside pip).
set(LPDIAG_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING "Where cmake --install puts the lpdiag Python package")
install(DIRECTORY python/lpdiag DESTINATION ${LPDIAG_PYTHON_INSTALL_DIR} PATTERN "__pycache__" EXCLUDE)
if(TARGET lpdiag_torch)
  # From <dir>/lpdiag/lib back to <prefix>/lib, where liblpdiag is.
  file(RELATIVE_PATH lpdiag_py_to_lib "/${LPDIAG_PYTHON_INSTALL_DIR}/lpdiag/lib" "/${CMAKE_INSTALL_LIBDIR}")
  set_target_properties(lpdiag_torch PROPERTIES INSTALL_RPATH "$ORIGIN/${lpdiag_py_to_lib}")
  install(TARGETS lpdiag_torch LIBRARY DESTINATION ${LPDIAG_PYTHON_INSTALL_DIR}/lpdiag/lib)
  install(DIRECTORY hooks/include/lpdiag DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})  # the hooks' public headers
endif()

configure_package_config_file(cmake/lpdiagConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/lpdiagConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lpdiag)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/lpdiagConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/lpdiagConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/lpdiagConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lpdiag)
