// strata's version (STRATA_VERSION_MAJOR/MINOR/PATCH, STRATA_VERSION_STRING,
// STRATA_VERSION), kept in core/version.hpp, which every strata header has through
// core/config.hpp.
#pragma once
#include "core/version.hpp"
