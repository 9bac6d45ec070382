# SLEEF::sleef for core/math.hpp, the host's vectorized exp, tanh, erf and log on x86-64:
# Debian's libsleef-dev (libsleef.so; its headers are not needed, core/math.hpp declares
# the entry points it calls). Other processors use libm, and nothing is searched.
if(NOT TARGET SLEEF::sleef AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  find_library(STRATA_SLEEF_LIBRARY NAMES sleef)
  if(NOT STRATA_SLEEF_LIBRARY)
    message(FATAL_ERROR "strata: SLEEF not found (libsleef.so); on Debian or Ubuntu: apt-get install libsleef-dev")
  endif()
  add_library(SLEEF::sleef UNKNOWN IMPORTED)
  set_target_properties(SLEEF::sleef PROPERTIES IMPORTED_LOCATION "${STRATA_SLEEF_LIBRARY}")
endif()
