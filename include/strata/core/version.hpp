// strata's version: the one place it is kept (CMakeLists.txt, the Conan recipe and the
// vcpkg staging read it from here; <strata/version.hpp> includes it).
// Until 1.0 a minor version may change the API; a patch version never does.
#pragma once

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0
#define STRATA_VERSION_STRING "0.1.0"
// One number that orders versions: 10000 * major + 100 * minor + patch.
#define STRATA_VERSION (STRATA_VERSION_MAJOR * 10000 + STRATA_VERSION_MINOR * 100 + STRATA_VERSION_PATCH)
