# Helpers for strata's own tests, examples and benchmarks (not installed).

option(STRATA_WERROR "Treat warnings as errors in strata's own targets" ON)

function(strata_target_defaults target)
  target_link_libraries(${target} PRIVATE strata::strata)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(STRATA_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# Sets the optimization level (-O0, -O1...) of the build type's flags for the languages
# given, in the calling directory and those below it only: for targets CI compiles but
# does not measure (tests/, bench/). Sets `strata_build_type_level` to the level replaced.
macro(strata_directory_optimization level)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" _strata_config)
  string(REGEX MATCH "-O[0-9s]" strata_build_type_level "${CMAKE_CXX_FLAGS_${_strata_config}}")
  foreach(_strata_lang ${ARGN})
    string(REGEX REPLACE "-O[0-9s]" "${level}" CMAKE_${_strata_lang}_FLAGS_${_strata_config}
                         "${CMAKE_${_strata_lang}_FLAGS_${_strata_config}}")
  endforeach()
endmacro()

# The environment under which MPI tests and programs run as root, oversubscribed, in
# a container: set on ctest entries, never in the library. Open MPI 4 takes
# oversubscription from OMPI_MCA_rmaps_base_oversubscribe; Open MPI 5 (Debian 13) only
# from PRRTE's mapping policy (each ignores the other's).
set(STRATA_MPI_TEST_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe;OMPI_MCA_mpi_yield_when_idle=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;OMP_NUM_THREADS=1")

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
