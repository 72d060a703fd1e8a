// unit (no GPU needed): parsing of the variables that choose the attention kernels
// (flash/engine_select.hpp): LPDIAG_FLASH_FORWARD / _BACKWARD and LPDIAG_FLASH_FWD_ROWS. A typo
// must be an error that names the variable, the value and what it accepts, never a silent default.
#include "flash/engine_select.hpp"

#include <string>

#include "catch_compat.hpp"

using lpdiag::Error;
using lpdiag::cuda::flash::EngineChoice;
using lpdiag::cuda::flash::parse_engine_choice;
using lpdiag::cuda::flash::parse_forward_rows;

namespace {

std::string message_of(const char* var, const char* value) {
  try {
    parse_engine_choice(var, value);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("engine choice: unset, empty and auto pick automatically; mma and wgmma force") {
  CHECK(parse_engine_choice("LPDIAG_FLASH_FORWARD", nullptr) == EngineChoice::automatic);
  CHECK(parse_engine_choice("LPDIAG_FLASH_FORWARD", "") == EngineChoice::automatic);
  CHECK(parse_engine_choice("LPDIAG_FLASH_FORWARD", "auto") == EngineChoice::automatic);
  CHECK(parse_engine_choice("LPDIAG_FLASH_BACKWARD", "mma") == EngineChoice::mma);
  CHECK(parse_engine_choice("LPDIAG_FLASH_BACKWARD", "wgmma") == EngineChoice::wgmma);
}

TEST_CASE("engine choice: anything else is an error naming the variable, the value and the choices") {
  for (const char* bad : {"WGMMA", "wgmma ", "sm90", "1", "mma.sync"}) {
    const std::string m = message_of("LPDIAG_FLASH_BACKWARD", bad);
    CHECK(m.find("LPDIAG_FLASH_BACKWARD") != std::string::npos);
    CHECK(m.find(std::string("'") + bad + "'") != std::string::npos);
    CHECK(m.find("auto, mma or wgmma") != std::string::npos);
  }
}

TEST_CASE("forward block height: 64 rows at d = 64 and 128 at d = 128 unless set to 64 or 128") {
  CHECK(parse_forward_rows(nullptr, 64) == 64);
  CHECK(parse_forward_rows(nullptr, 128) == 128);
  CHECK(parse_forward_rows("", 64) == 64);
  CHECK(parse_forward_rows("128", 64) == 128);
  CHECK(parse_forward_rows("64", 128) == 64);
  for (const char* bad : {"32", "256", "64x64", " 64", "sixty-four"}) CHECK_THROWS_AS(parse_forward_rows(bad, 64), Error);
}
