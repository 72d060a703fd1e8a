// One include for Catch2 2.13 (Debian 12) and Catch2 3.x (GPU machine).
#pragma once
#include <string>
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
namespace lpdiag_test {
inline auto contains(const std::string& s) { return Catch::Matchers::ContainsSubstring(s); }
}
#else
#include <catch2/catch.hpp>
namespace Catch {
using Detail::Approx;  // 3.x spells it Catch::Approx
}
namespace lpdiag_test {
inline auto contains(const std::string& s) { return Catch::Matchers::Contains(s); }
}
#endif
