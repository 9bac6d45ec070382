# What a translation unit that uses strata's device space needs, added to an interface
# target: the CUDA libraries, NCCL and the flags that keep host and device bits equal.
# Used by strataCuda.cmake (strata::cuda of a CMake build and install) and by the Conan
# package's strata-conan.cmake, so both give a consumer the same flags.
function(strata_cuda_usage target)
  target_link_libraries(${target} INTERFACE CUDA::cudart CUDA::cublas CUDA::cublasLt CCCL::CCCL NCCL::nccl)
  # dlopen, for NVML's reading of the CUDA context's bytes (space/detail/cuda_context_bytes.hpp):
  # in libc from glibc 2.34, in libdl before.
  target_link_libraries(${target} INTERFACE ${CMAKE_DL_LIBS})
  target_compile_definitions(${target} INTERFACE STRATA_HAS_CUDA=1)
  target_compile_options(${target} INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda>)
  # --fmad=false: nvcc contracts a * b + c into one fused multiply-add by default, which
  # rounds once where the host rounds twice; the update functors are shared by both
  # drivers and must give the same bits on both (DESIGN §6). The updates are memory-bound,
  # so the FMAs saved cost nothing measurable.
  target_compile_options(${target} INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
  # The host half of the same promise: an offloaded optimizer state is stepped by the host
  # copy of the functor, which GCC and Clang would contract into FMAs wherever the target
  # has them (-march=native, say). Off in both kinds of translation unit.
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>
                                                 $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>)
  endif()
  # OpenMP::OpenMP_CXX adds -fopenmp to C++ compiles only ($<COMPILE_LANGUAGE:CXX>), so the
  # host half of a .cu file would build the host drivers without their threads; hand the
  # flag to nvcc's host compiler too, so both kinds of translation unit agree.
  if(OpenMP_CXX_FLAGS)
    target_compile_options(${target} INTERFACE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcompiler=${OpenMP_CXX_FLAGS}>")
  endif()
endfunction()
