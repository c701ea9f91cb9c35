# `cmake --install build --prefix P` installs the libraries, the headers and a CMake package, so
# that another project writes
#   find_package(Loom REQUIRED)                       # with -DCMAKE_PREFIX_PATH=P
#   target_link_libraries(app PRIVATE Loom::nn Loom::data)
# Headers keep their layer folders under include/loom ("nn/nn.h"), as inside this tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(loom_install_targets loom_core loom_ops loom_autograd loom_nn loom_data loom_quant loom_warnings)
if(TARGET loom_distributed)
  list(APPEND loom_install_targets loom_distributed)
endif()
foreach(target ${loom_install_targets})
  string(REPLACE "loom_" "" short ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${short})
endforeach()

install(TARGETS ${loom_install_targets} EXPORT LoomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(layer core ops autograd nn data quant distributed)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${layer})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom
            FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
  endif()
endforeach()
install(EXPORT LoomTargets NAMESPACE Loom:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/LoomConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/LoomConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/LoomConfig.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
