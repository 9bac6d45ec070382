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
target_link_libraries(strata_cuda INTERFACE strata CUDA::cudart CUDA::cublas CUDA::cublasLt CCCL::CCCL NCCL::nccl)
target_compile_definitions(strata_cuda INTERFACE STRATA_HAS_CUDA=1)
target_compile_options(strata_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda>)
# --fmad=false: nvcc contracts a * b + c into one fused multiply-add by default, which
# rounds once where the host rounds twice; the update functors are shared by both
# drivers and must give the same bits on both (DESIGN §6). The updates are memory-bound,
# so the FMAs saved cost nothing measurable.
target_compile_options(strata_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
# The host half of the same promise: an offloaded optimizer state is stepped by the host
# copy of the functor, which GCC and Clang would contract into FMAs wherever the target
# has them (-march=native, say). Off in both kinds of translation unit.
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(strata_cuda INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>
                                               $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>)
endif()
# OpenMP::OpenMP_CXX adds -fopenmp to C++ compiles only ($<COMPILE_LANGUAGE:CXX>), so the
# host half of a .cu file would build the host drivers without their threads; hand the
# flag to nvcc's host compiler too, so both kinds of translation unit agree.
if(OpenMP_CXX_FLAGS)
  target_compile_options(strata_cuda INTERFACE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcompiler=${OpenMP_CXX_FLAGS}>")
endif()
install(TARGETS strata_cuda EXPORT strataCudaTargets)
install(EXPORT strataCudaTargets NAMESPACE strata:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
