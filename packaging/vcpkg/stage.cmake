# Runs the overlay port's portfile.cmake without vcpkg (which these machines lack): the
# vcpkg helpers it calls are defined here with what vcpkg's do for a header-only CMake
# port, the package goes to STAGE/packages/strata_x64-linux and is merged into
# STAGE/installed/x64-linux, as `vcpkg install` does; then a subset of vcpkg's post-build
# checks. Not exercised: vcpkg's dependency resolution and the ports it would build
# (boost, nlohmann-json, openblas, mpi, cuda come from the system here), its toolchain
# file, the debug configuration (the port sets VCPKG_BUILD_TYPE release).
#   cmake -DSTAGE=DIR [-DFEATURES="mpi;cuda"] -P packaging/vcpkg/stage.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT STAGE)
  message(FATAL_ERROR "stage.cmake: pass -DSTAGE=DIR")
endif()
set(PORT_DIR "${CMAKE_CURRENT_LIST_DIR}/strata")
set(PORT strata)
set(TARGET_TRIPLET x64-linux)
set(VCPKG_TARGET_IS_LINUX ON)
set(CURRENT_PACKAGES_DIR "${STAGE}/packages/${PORT}_${TARGET_TRIPLET}")
set(CURRENT_BUILDTREES_DIR "${STAGE}/buildtrees/${PORT}")
set(CURRENT_INSTALLED_DIR "${STAGE}/installed/${TARGET_TRIPLET}")
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}" "${CURRENT_BUILDTREES_DIR}")

# The manifest: its version must be the headers', and FEATURES defaults to its default-features.
file(READ "${PORT_DIR}/vcpkg.json" manifest)
string(JSON port_version GET "${manifest}" version)
file(STRINGS "${PORT_DIR}/../../../include/strata/core/version.hpp" header_version REGEX "STRATA_VERSION_STRING")
if(NOT header_version MATCHES "\"${port_version}\"")
  message(FATAL_ERROR "vcpkg.json says version ${port_version}; include/strata/core/version.hpp says ${header_version}")
endif()
if(NOT DEFINED FEATURES)
  set(FEATURES "")
  string(JSON n LENGTH "${manifest}" default-features)
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON f GET "${manifest}" default-features ${i})
    list(APPEND FEATURES ${f})
  endforeach()
endif()
foreach(f IN LISTS FEATURES)
  string(JSON ignored ERROR_VARIABLE missing GET "${manifest}" features ${f})
  if(missing)
    message(FATAL_ERROR "feature '${f}' is not in ${PORT_DIR}/vcpkg.json")
  endif()
endforeach()
list(PREPEND FEATURES core)

function(vcpkg_check_features)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "OUT_FEATURE_OPTIONS" "FEATURES;INVERTED_FEATURES")
  set(options "")
  list(LENGTH arg_FEATURES n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET arg_FEATURES ${i} feature)
    list(GET arg_FEATURES ${j} option)
    if(feature IN_LIST FEATURES)
      list(APPEND options "-D${option}=ON")
    else()
      list(APPEND options "-D${option}=OFF")
    endif()
  endforeach()
  set(${arg_OUT_FEATURE_OPTIONS} "${options}" PARENT_SCOPE)
endfunction()

function(run_or_fail what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_FILE "${CURRENT_BUILDTREES_DIR}/${what}.log"
                  ERROR_FILE "${CURRENT_BUILDTREES_DIR}/${what}.err")
  if(NOT rc EQUAL 0)
    file(READ "${CURRENT_BUILDTREES_DIR}/${what}.err" err)
    message(FATAL_ERROR "${what} failed (${rc}):\n${err}")
  endif()
endfunction()

# vcpkg configures with its own toolchain and these install directories.
function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE_PATH" "OPTIONS;OPTIONS_RELEASE")
  file(MAKE_DIRECTORY "${CURRENT_BUILDTREES_DIR}")
  run_or_fail(config-${TARGET_TRIPLET}-rel "${CMAKE_COMMAND}" -S "${arg_SOURCE_PATH}"
    -B "${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR}" -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_INSTALL_INCLUDEDIR=include
    -DCMAKE_INSTALL_DATAROOTDIR=share -DFETCHCONTENT_FULLY_DISCONNECTED=ON ${arg_OPTIONS} ${arg_OPTIONS_RELEASE})
endfunction()

function(vcpkg_cmake_install)
  run_or_fail(install-${TARGET_TRIPLET}-rel "${CMAKE_COMMAND}" --install "${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel")
endfunction()

# Moves the CMake package to share/<port> and rewrites the paths that climb from the
# config files to the prefix for their new depth.
function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "CONFIG_PATH;PACKAGE_NAME" "")
  if(NOT arg_PACKAGE_NAME)
    set(arg_PACKAGE_NAME ${PORT})
  endif()
  set(from "${CURRENT_PACKAGES_DIR}/${arg_CONFIG_PATH}")
  set(to "${CURRENT_PACKAGES_DIR}/share/${arg_PACKAGE_NAME}")
  if(NOT IS_DIRECTORY "${from}")
    message(FATAL_ERROR "vcpkg_cmake_config_fixup: '${arg_CONFIG_PATH}' is not in the package")
  endif()
  file(MAKE_DIRECTORY "${to}")
  file(GLOB files "${from}/*")
  foreach(f IN LISTS files)
    get_filename_component(name "${f}" NAME)
    file(RENAME "${f}" "${to}/${name}")
  endforeach()
  file(REMOVE_RECURSE "${from}")
  file(GLOB configs "${to}/*.cmake")
  foreach(f IN LISTS configs)
    file(READ "${f}" text)
    # install(EXPORT): one "go up" line per level of the original folder; share/<name> has two.
    string(REGEX REPLACE "(get_filename_component\\(_IMPORT_PREFIX \"\\\${_IMPORT_PREFIX}\" PATH\\)\n)+"
           "get_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)\nget_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)\n"
           text "${text}")
    # configure_package_config_file: PACKAGE_PREFIX_DIR from the config's own folder.
    string(REGEX REPLACE "get_filename_component\\(PACKAGE_PREFIX_DIR \"\\\${CMAKE_CURRENT_LIST_DIR}/[./]*\""
           "get_filename_component(PACKAGE_PREFIX_DIR \"\${CMAKE_CURRENT_LIST_DIR}/../../\"" text "${text}")
    file(WRITE "${f}" "${text}")
  endforeach()
endfunction()

function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "" "FILE_LIST")
  set(text "")
  foreach(f IN LISTS arg_FILE_LIST)
    file(READ "${f}" part)
    string(APPEND text "${part}")
  endforeach()
  file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" "${text}")
endfunction()

include("${PORT_DIR}/portfile.cmake")

# A subset of vcpkg's post-build checks.
foreach(required include/strata/strata.hpp share/${PORT}/copyright share/${PORT}/usage share/${PORT}/strataConfig.cmake
                 share/${PORT}/strataConfigVersion.cmake share/${PORT}/strataTargets.cmake)
  if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/${required}")
    message(FATAL_ERROR "post-build check: the package has no ${required}")
  endif()
endforeach()
foreach(forbidden lib debug bin)
  if(EXISTS "${CURRENT_PACKAGES_DIR}/${forbidden}")
    message(FATAL_ERROR "post-build check: a header-only package has ${forbidden}/")
  endif()
endforeach()
file(GLOB_RECURSE shared "${CURRENT_PACKAGES_DIR}/share/*")
get_filename_component(source "${PORT_DIR}/../../.." ABSOLUTE)
foreach(f IN LISTS shared)
  file(READ "${f}" text)
  foreach(path "${CURRENT_PACKAGES_DIR}" "${CURRENT_BUILDTREES_DIR}" "${source}")
    string(FIND "${text}" "${path}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "post-build check: ${f} names the absolute path ${path}")
    endif()
  endforeach()
endforeach()

# `vcpkg install` merges the package into the installed tree.
file(COPY "${CURRENT_PACKAGES_DIR}/" DESTINATION "${CURRENT_INSTALLED_DIR}")
list(JOIN FEATURES ", " shown)
message(STATUS "staged ${PORT}[${shown}] ${port_version} into ${CURRENT_INSTALLED_DIR}")
