# Included by the strata config that Conan's CMakeDeps generates, after it has made
# strata::strata (and strata::cuda): what a header-only package of strata needs from the
# system, linked into those targets. Requirements that a [platform_requires] profile
# leaves to the system (Boost, nlohmann_json, Open MPI, libcurl) are found here too; where Conan
# provides them, their targets exist already and nothing is searched.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(OpenMP COMPONENTS CXX)
include("${CMAKE_CURRENT_LIST_DIR}/strataBlas.cmake")  # BLAS::BLAS: OpenBLAS, its OpenMP build preferred
include("${CMAKE_CURRENT_LIST_DIR}/strataSleef.cmake")  # SLEEF::sleef on x86-64
if(NOT TARGET Boost::headers)
  find_dependency(Boost 1.81)
endif()
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_dependency(nlohmann_json 3.10)
endif()
set(_strata_conan_links Boost::headers nlohmann_json::nlohmann_json OpenMP::OpenMP_CXX BLAS::BLAS Threads::Threads)
get_target_property(_strata_conan_defs strata::strata INTERFACE_COMPILE_DEFINITIONS)
if("${_strata_conan_defs}" MATCHES "STRATA_HAS_MPI=1")
  if(NOT TARGET MPI::MPI_CXX AND NOT TARGET openmpi::openmpi)
    find_dependency(MPI COMPONENTS CXX)
  endif()
  if(TARGET MPI::MPI_CXX)
    list(APPEND _strata_conan_links MPI::MPI_CXX)
  endif()
endif()
if(TARGET SLEEF::sleef)
  list(APPEND _strata_conan_links SLEEF::sleef)
endif()
target_link_libraries(strata::strata INTERFACE ${_strata_conan_links})
target_compile_features(strata::strata INTERFACE cxx_std_20)

if(TARGET strata::cuda)
  find_dependency(CUDAToolkit 12.3)
  find_dependency(CCCL CONFIG HINTS ${CUDAToolkit_LIBRARY_DIR}/cmake)
  list(APPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")
  find_dependency(NCCL)  # FindNCCL.cmake, packaged beside this file
  include("${CMAKE_CURRENT_LIST_DIR}/strataCudaUsage.cmake")
  strata_cuda_usage(strata::cuda)
endif()
if(TARGET strata::mlflow)
  if(NOT TARGET CURL::libcurl)
    find_dependency(CURL)
  endif()
  target_link_libraries(strata::mlflow INTERFACE CURL::libcurl)
endif()
unset(_strata_conan_links)
unset(_strata_conan_defs)
