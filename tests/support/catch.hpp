// One include for Catch2 v2 (Debian) or v3 (where found), chosen by the build.
#pragma once
#if STRATA_CATCH3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
