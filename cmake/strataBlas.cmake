# BLAS::BLAS for strata's host space: OpenBLAS, its OpenMP build where it is installed.
# That build runs its GEMMs on the OpenMP threads of strata's own loops, one pool for
# both; the pthreads build, which Debian's alternatives prefer when both are installed,
# starts a second pool that fights the first for the cores (a gpt run took twice as
# long). Debian puts the OpenMP build in <libdir>/openblas-openmp (libopenblas-openmp-dev);
# linking it by full path puts that directory on the executable's run path, so it is also
# the one loaded. Elsewhere, FindBLAS's OpenBLAS, and space/host_threads.hpp keeps a
# pthreads build to one thread. Leaves the caller's BLA_VENDOR as it was. Sets
# STRATA_BLAS_OPENMP when the OpenMP build is used.
if(NOT TARGET BLAS::BLAS)
  find_library(STRATA_OPENBLAS_OPENMP NAMES openblas
               PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp /usr/lib64/openblas-openmp
               NO_DEFAULT_PATH)
  if(STRATA_OPENBLAS_OPENMP)
    add_library(BLAS::BLAS UNKNOWN IMPORTED)
    set_target_properties(BLAS::BLAS PROPERTIES IMPORTED_LOCATION "${STRATA_OPENBLAS_OPENMP}")
    set(BLAS_FOUND TRUE)  # what FindBLAS would say
    set(BLAS_LIBRARIES "${STRATA_OPENBLAS_OPENMP}")
  else()
    if(DEFINED BLA_VENDOR)
      set(_strata_saved_bla_vendor "${BLA_VENDOR}")
    endif()
    set(BLA_VENDOR OpenBLAS)
    find_package(BLAS REQUIRED)
    if(DEFINED _strata_saved_bla_vendor)
      set(BLA_VENDOR "${_strata_saved_bla_vendor}")
      unset(_strata_saved_bla_vendor)
    else()
      unset(BLA_VENDOR)
    endif()
  endif()
endif()
if(STRATA_OPENBLAS_OPENMP)
  set(STRATA_BLAS_OPENMP ON)
else()
  set(STRATA_BLAS_OPENMP OFF)
endif()
