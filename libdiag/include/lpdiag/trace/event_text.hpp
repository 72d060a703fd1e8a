// The text of an event kept within its fixed-size field (docs/reference/trace-format.md: `kind`
// char[32], `message` char[128], each NUL-terminated). A message that does not fit is cut at the
// last word boundary that leaves room for "...", never inside a UTF-8 character, so a reader sees
// where the text stops instead of half a word.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace lpdiag {

// `text` if it fits in `capacity` bytes with its NUL; otherwise its longest word-bounded prefix
// (falling back to a character boundary when one word fills the field) followed by "...".
std::string fit_event_text(std::string_view text, std::size_t capacity);

}  // namespace lpdiag
