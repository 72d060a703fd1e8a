#include "lpdiag/trace/event_text.hpp"

namespace lpdiag {
namespace {

constexpr std::string_view kEllipsis = "...";

bool utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

std::string fit_event_text(std::string_view text, std::size_t capacity) {
  if (capacity == 0) return {};
  const std::size_t room = capacity - 1;  // the NUL
  if (text.size() <= room) return std::string(text);
  if (room <= kEllipsis.size()) return std::string(kEllipsis.substr(0, room));
  std::size_t cut = room - kEllipsis.size();
  while (cut > 0 && utf8_continuation(text[cut])) --cut;  // never split a character
  std::size_t word = cut;
  while (word > 0 && text[word] != ' ') --word;
  if (word > 0) cut = word;
  while (cut > 0 && (text[cut - 1] == ' ' || text[cut - 1] == ',' || text[cut - 1] == ';' || text[cut - 1] == ':')) --cut;
  return std::string(text.substr(0, cut)) + std::string(kEllipsis);
}

}  // namespace lpdiag
