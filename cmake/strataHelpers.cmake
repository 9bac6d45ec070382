# Helpers for strata's own tests, examples and benchmarks (not installed).

option(STRATA_WERROR "Treat warnings as errors in strata's own targets" ON)

function(strata_target_defaults target)
  target_link_libraries(${target} PRIVATE strata::strata)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(STRATA_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# Build time: strata.hpp takes about 10 s to parse, and each example, benchmark and MPI test
# that includes it parsed it again. With STRATA_PRECOMPILE_HEADERS (GCC), such a target's
# C++ sources start from one precompiled strata.hpp, made once by strata_pch. GCC checks the
# macros the header tests against the target's (STRATA_HAS_CUDA, STRATA_TEST_FAULT_INJECTION)
# and will not use it where one differs: CMake's -Winvalid-pch says so, an error under
# STRATA_WERROR; otherwise the header is parsed as before. Targets with such macros (X-cuda,
# the fault-injection mlp) do not take it. The header is included ahead of each source, so
# only targets whose sources include it (directly, or through tests' mlp_run.hpp) take it.
option(STRATA_PRECOMPILE_HEADERS "Share one precompiled strata.hpp among strata's own targets (GCC)" ON)

function(strata_share_pch target)
  if(NOT STRATA_PRECOMPILE_HEADERS OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  set(includes_strata FALSE)
  foreach(src IN LISTS sources)
    if(src MATCHES "\\.cpp$")
      file(STRINGS ${src} hit REGEX "^#include [<\"](strata/strata|mlp_run)\\.hpp[>\"]" LIMIT_COUNT 1)
      if(hit)
        set(includes_strata TRUE)
      endif()
    endif()
  endforeach()
  if(NOT includes_strata)
    return()
  endif()
  if(NOT TARGET strata_pch)
    set(owner ${PROJECT_BINARY_DIR}/strata_pch.cpp)
    file(CONFIGURE OUTPUT ${owner} CONTENT "// Owns the precompiled strata.hpp (cmake/strataHelpers.cmake).\n")
    add_library(strata_pch OBJECT ${owner})
    strata_target_defaults(strata_pch)
    target_precompile_headers(strata_pch PRIVATE <strata/strata.hpp>)
  endif()
  target_precompile_headers(${target} REUSE_FROM strata_pch)
endfunction()

# The environment under which MPI tests and programs run as root, oversubscribed, in
# a container: set on ctest entries, never in the library.
set(STRATA_MPI_TEST_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_mpi_yield_when_idle=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;OMP_NUM_THREADS=1")

# The rank counts a test file asks for, from a line `// strata-ranks: 1 2 4`.
function(strata_ranks_of src default out)
  file(STRINGS ${src} line REGEX "^// strata-ranks:" LIMIT_COUNT 1)
  if(line)
    string(REGEX REPLACE "^// strata-ranks:[ ]*" "" line "${line}")
    string(REPLACE " " ";" line "${line}")
    set(${out} ${line} PARENT_SCOPE)
  else()
    set(${out} ${default} PARENT_SCOPE)
  endif()
endfunction()
