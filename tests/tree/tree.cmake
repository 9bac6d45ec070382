# Checks of the source tree itself (no compiler): the folder map of include/strata, the
# public API in examples/ and bench/, and the README's program being examples/hello.
add_test(NAME tree.layers COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -P ${CMAKE_CURRENT_LIST_DIR}/layers.cmake)
add_test(NAME tree.public_api COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/public_api.sh ${PROJECT_SOURCE_DIR})
add_test(NAME tree.readme_hello COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/readme_hello.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(tree.layers tree.public_api tree.readme_hello PROPERTIES TIMEOUT 60 LABELS tree)
# The commands in scripts/: --help and a bad option, answered before anything runs.
add_test(NAME tree.scripts_cli COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/scripts_cli.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(tree.scripts_cli PROPERTIES TIMEOUT 60 LABELS tree)
