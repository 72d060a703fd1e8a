// Catch2 2.x needs one translation unit to define main; 3.x links Catch2::Catch2WithMain instead.
#if !__has_include(<catch2/catch_all.hpp>)
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
