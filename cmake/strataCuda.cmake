# CUDA support: enables the language, finds cudart / cuBLAS / CCCL / NCCL and defines
# strata::cuda, the interface target for translation units that use the device space.
if(CMAKE_VERSION VERSION_LESS 3.26)
  # CMake 3.25 does not know nvcc's C++20 flag.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # one cudart for .cu and .cpp objects alike
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
find_package(CCCL CONFIG REQUIRED HINTS ${CUDAToolkit_LIBRARY_DIR}/cmake)
find_package(NCCL REQUIRED)

add_library(strata_cuda INTERFACE)
add_library(strata::cuda ALIAS strata_cuda)
set_target_properties(strata_cuda PROPERTIES EXPORT_NAME cuda)
target_link_libraries(strata_cuda INTERFACE strata)
include(strataCudaUsage)
strata_cuda_usage(strata_cuda)
install(TARGETS strata_cuda EXPORT strataCudaTargets)
install(EXPORT strataCudaTargets NAMESPACE strata:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
include(strataCudnn)
