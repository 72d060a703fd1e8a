// One include for Catch2 2.13 (Debian 12) and Catch2 3.x (GPU machine).
#pragma once
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
namespace Catch {
using Detail::Approx;  // 3.x spells it Catch::Approx
}
#endif
