# io tests outside the unit/ convention, included from tests/CMakeLists.txt:
#   io.safetensors_interop   strata's safetensors files vs the Python `safetensors` package
#   io.qwen2_export          a Qwen2 directory exported by strata, read by that package
#   fuzz.io_mutate           seeded random mutations (10^5 inputs) over the safetensors
#                            header and config parsers, under ASan + UBSan (any compiler)
#   fuzz.io_libfuzzer_*      the same targets under libFuzzer, where the compiler has it (clang)

set(_io_dir ${CMAKE_CURRENT_LIST_DIR})

# ---- safetensors interop with the Python package ------------------------------------
add_executable(safetensors_tool ${_io_dir}/tools/safetensors_tool.cpp)
strata_target_defaults(safetensors_tool)
# The python3 on PATH, the one scripts/deps installs numpy and safetensors into.
find_program(STRATA_PYTHON3 python3)
if(STRATA_PYTHON3)
  add_test(NAME io.safetensors_interop
           COMMAND ${STRATA_PYTHON3} ${_io_dir}/tools/safetensors_interop.py --tool $<TARGET_FILE:safetensors_tool>)
  set_tests_properties(io.safetensors_interop PROPERTIES TIMEOUT 120 LABELS io)
else()
  message(WARNING "python3 not found: io.safetensors_interop is not registered")
endif()

# ---- a Qwen2 export read by the Python package ---------------------------------------
add_executable(qwen2_export ${_io_dir}/tools/qwen2_export.cpp)
strata_target_defaults(qwen2_export)
if(STRATA_PYTHON3)
  add_test(NAME io.qwen2_export
           COMMAND ${STRATA_PYTHON3} ${_io_dir}/tools/check_hf_export.py --tool $<TARGET_FILE:qwen2_export>
                   --fixture ${_io_dir}/data/qwen2_tiny)
  set_tests_properties(io.qwen2_export PROPERTIES TIMEOUT 120 LABELS io ENVIRONMENT "${STRATA_MPI_TEST_ENV}")
endif()

# ---- fuzzing -------------------------------------------------------------------------
set(_io_sanitize -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer)
set(_io_sanitize_env "ASAN_OPTIONS=abort_on_error=1:detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")

add_executable(fuzz_io_mutate ${_io_dir}/fuzz/mutate_main.cpp)
strata_target_defaults(fuzz_io_mutate)
# -O1, as AddressSanitizer's documentation advises: the -O3 of a Release build took this
# one file 85-100 s to compile under both sanitizers, for 10^5 inputs that run in seconds.
target_compile_options(fuzz_io_mutate PRIVATE ${_io_sanitize} -O1)
target_link_options(fuzz_io_mutate PRIVATE ${_io_sanitize})
target_compile_definitions(fuzz_io_mutate PRIVATE STRATA_TEST_DATA_DIR="${_io_dir}/data")
add_test(NAME fuzz.io_mutate COMMAND fuzz_io_mutate --inputs 100000 --seed 1)
set_tests_properties(fuzz.io_mutate PROPERTIES TIMEOUT 300 LABELS fuzz ENVIRONMENT "${_io_sanitize_env}")

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
check_cxx_source_compiles(
  "#include <cstddef>\nextern \"C\" int LLVMFuzzerTestOneInput(const unsigned char*, std::size_t) { return 0; }"
  STRATA_HAS_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
if(STRATA_HAS_LIBFUZZER)
  set(_io_artifacts ${CMAKE_CURRENT_BINARY_DIR}/fuzz_artifacts)
  file(MAKE_DIRECTORY ${_io_artifacts})
  file(GLOB _st_seeds ${_io_dir}/fuzz/corpus/safetensors/*)
  file(GLOB _cfg_seeds ${_io_dir}/data/configs/*.json)
  foreach(target safetensors config)
    set(exe fuzz_io_libfuzzer_${target})
    add_executable(${exe} ${_io_dir}/fuzz/libfuzzer_${target}.cpp)
    strata_target_defaults(${exe})
    target_compile_options(${exe} PRIVATE -fsanitize=fuzzer ${_io_sanitize})
    target_link_options(${exe} PRIVATE -fsanitize=fuzzer ${_io_sanitize})
    if(target STREQUAL "safetensors")
      string(REPLACE ";" "," seeds "${_st_seeds}")
    else()
      string(REPLACE ";" "," seeds "${_cfg_seeds}")
    endif()
    # Seeds are passed as files, not a corpus directory, so the source tree is never written.
    add_test(NAME fuzz.io_libfuzzer_${target}
             COMMAND ${exe} -runs=100000 -seed=1 -max_len=4096 -seed_inputs=${seeds}
                     -artifact_prefix=${_io_artifacts}/${target}-)
    set_tests_properties(fuzz.io_libfuzzer_${target} PROPERTIES TIMEOUT 300 LABELS fuzz
                                                                   ENVIRONMENT "${_io_sanitize_env}")
  endforeach()
endif()
