#include <string>

#include "catch_compat.hpp"
#include "lpdiag/trace/event_text.hpp"

using lpdiag::fit_event_text;

TEST_CASE("an event text that fits its field is kept as it is", "[trace]") {
  CHECK(fit_event_text("growth: layer 1 head 2", 128) == "growth: layer 1 head 2");
  const std::string full(127, 'x');  // 127 bytes and the NUL fill 128
  CHECK(fit_event_text(full, 128) == full);
  CHECK(fit_event_text("", 128).empty());
}

TEST_CASE("a long event text is cut at a word boundary and marked", "[trace]") {
  // The growth alarm's evidence, as the detector writes it: longer than the 128-byte field.
  const std::string evidence =
      "growth: layer 1 head 2: sigma_1 of its W_Q slice grew 1.34x over steps 2450..2950 while the median head "
      "grew 1.03x, and its repeated-maximum rows rose 2.1x";
  const std::string cut = fit_event_text(evidence, 128);
  CHECK(cut.size() <= 127);
  CHECK(cut == "growth: layer 1 head 2: sigma_1 of its W_Q slice grew 1.34x over steps 2450..2950 while the median head "
               "grew 1.03x, and its...");
  CHECK(evidence.rfind(cut.substr(0, cut.size() - 3), 0) == 0);
  CHECK(fit_event_text("abc, defghij", 9) == "abc...");  // a separator left before the cut goes with it
}

TEST_CASE("a cut never splits a UTF-8 character", "[trace]") {
  // "σ₁" is 2 + 3 bytes; a field of 10 bytes leaves 6 before "...": "aσ₁" is 6 bytes, "aσ" 3.
  CHECK(fit_event_text("aσ₁σ₁σ₁", 10) == "aσ₁...");
  CHECK(fit_event_text("aaσ₁σ₁σ₁", 10) == "aaσ...");  // 7 bytes would end inside ₁
}

TEST_CASE("a field too small for a marker keeps what fits of it", "[trace]") {
  CHECK(fit_event_text("abcdef", 3) == "..");
  CHECK(fit_event_text("abcdef", 0).empty());
}
