# strata::cudnn: causal attention fused by cuDNN on GPUs (nn/detail/cudnn_attention.hpp).
# A build needs cuDNN's headers (9.0 or newer) and cudnn-frontend's; the library is loaded
# when a program first runs attention on a GPU, so nothing links against it. Both header
# sets come from PyPI: nvidia-cudnn-cu13 (nvidia/cudnn/include, with the library beside it
# in nvidia/cudnn/lib) and nvidia-cudnn-frontend (include/). scripts/cudnn-headers fetches
# them. Where CUDNN_INCLUDE_DIR / CUDNN_FRONTEND_INCLUDE_DIR (or the environment variables
# of those names) are unset, the CUDA toolkit's and the system's include directories are
# searched.
find_path(CUDNN_INCLUDE_DIR cudnn_version.h HINTS ENV CUDNN_INCLUDE_DIR ${CUDAToolkit_INCLUDE_DIRS}
          DOC "cuDNN's headers (cudnn.h), 9.0 or newer")
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ENV CUDNN_FRONTEND_INCLUDE_DIR
          ${CUDAToolkit_INCLUDE_DIRS} DOC "cudnn-frontend's headers (cudnn_frontend.h)")
set(_strata_cudnn_found OFF)
if(CUDNN_INCLUDE_DIR AND CUDNN_FRONTEND_INCLUDE_DIR)
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _strata_cudnn_major REGEX "#define CUDNN_MAJOR +[0-9]+")
  string(REGEX MATCH "[0-9]+$" _strata_cudnn_major "${_strata_cudnn_major}")
  if(_strata_cudnn_major AND _strata_cudnn_major GREATER_EQUAL 9)
    set(_strata_cudnn_found ON)
  else()
    message(STATUS "strata: cuDNN at ${CUDNN_INCLUDE_DIR} is major version ${_strata_cudnn_major}; fused attention needs 9")
  endif()
endif()
option(STRATA_ENABLE_CUDNN "Build strata::cudnn, attention fused by cuDNN on GPUs" ${_strata_cudnn_found})
if(STRATA_ENABLE_CUDNN)
  if(NOT _strata_cudnn_found)
    message(FATAL_ERROR "STRATA_ENABLE_CUDNN is ON but cuDNN 9's headers (CUDNN_INCLUDE_DIR: ${CUDNN_INCLUDE_DIR}) or "
                        "cudnn-frontend's (CUDNN_FRONTEND_INCLUDE_DIR: ${CUDNN_FRONTEND_INCLUDE_DIR}) were not found; "
                        "scripts/cudnn-headers fetches both")
  endif()
  message(STATUS "strata: fused attention with cuDNN ${_strata_cudnn_major} headers at ${CUDNN_INCLUDE_DIR}, "
                 "cudnn-frontend at ${CUDNN_FRONTEND_INCLUDE_DIR}")
  add_library(strata_cudnn INTERFACE)
  add_library(strata::cudnn ALIAS strata_cudnn)
  set_target_properties(strata_cudnn PROPERTIES EXPORT_NAME cudnn)
  target_link_libraries(strata_cudnn INTERFACE strata_cuda ${CMAKE_DL_LIBS})
  target_include_directories(strata_cudnn SYSTEM INTERFACE ${CUDNN_FRONTEND_INCLUDE_DIR} ${CUDNN_INCLUDE_DIR})
  target_compile_definitions(strata_cudnn INTERFACE STRATA_HAS_CUDNN=1)
  install(TARGETS strata_cudnn EXPORT strataCudnnTargets)
  install(EXPORT strataCudnnTargets NAMESPACE strata:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
endif()
# What the examples, tests and benchmarks link for the device space: strata::cudnn where
# it is built (it brings strata::cuda), strata::cuda otherwise.
if(STRATA_ENABLE_CUDNN)
  set(STRATA_CUDA_TARGET strata::cudnn)
else()
  set(STRATA_CUDA_TARGET strata::cuda)
endif()
