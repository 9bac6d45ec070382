# Overlay port of strata: headers and the CMake package, nothing compiled.
#   vcpkg install strata --overlay-ports=<strata>/packaging/vcpkg   (features: mpi, cuda, mlflow)
# The sources are this repository's checkout; a registry port would take them with
# vcpkg_from_github at a release tag instead.
set(VCPKG_BUILD_TYPE release)  # header-only: one configuration is the whole package
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    mpi STRATA_ENABLE_MPI
    cuda STRATA_ENABLE_CUDA
    mlflow STRATA_ENABLE_MLFLOW
)
vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DSTRATA_ENABLE_TESTS=OFF
    -DSTRATA_ENABLE_EXAMPLES=OFF
    -DSTRATA_ENABLE_BENCH=OFF
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH lib/cmake/strata)

# Nothing is left in lib/ (vcpkg's post-build checks reject empty folders there).
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/debug")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
