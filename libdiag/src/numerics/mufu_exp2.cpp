#include "lpdiag/numerics/mufu_exp2.hpp"

#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "lpdiag/error.hpp"

extern const unsigned char lpdiag_mufu_ex2_table[];  // zlib: 2 bits per entry, T - bits(rn(2^f)) + 2
extern const unsigned long lpdiag_mufu_ex2_table_size;

namespace lpdiag {
namespace {

constexpr std::uint32_t kEntries = 1u << 23;

const std::vector<float>& table() {
  static std::vector<float> t;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<unsigned char> packed(kEntries / 4);
    uLongf len = static_cast<uLongf>(packed.size());
    if (uncompress(packed.data(), &len, lpdiag_mufu_ex2_table, lpdiag_mufu_ex2_table_size) != Z_OK || len != packed.size())
      throw Error("mufu_exp2: the embedded ex2 table is damaged");
    t.resize(kEntries);
    for (std::uint32_t k = 0; k < kEntries; ++k) {
      const int code = (packed[k / 4] >> (6 - 2 * (k % 4))) & 3;
      const float rn = static_cast<float>(std::exp2(static_cast<double>(k) / kEntries));
      std::int32_t u;
      std::memcpy(&u, &rn, 4);
      u += code - 2;
      std::memcpy(&t[k], &u, 4);
    }
  });
  return t;
}

}  // namespace

float mufu_exp2(float x) {
  if (!(x <= 0.0f)) return static_cast<float>(std::exp2(static_cast<double>(x)));
  if (x == 0.0f) return 1.0f;
  if (x < -127.0f) return 0.0f;  // below 2^-127: flushed (and -inf)
  const double q = std::floor(-static_cast<double>(x) * kEntries);  // |x| 2^23, truncated
  const double n = std::floor(-q / kEntries);
  const auto k = static_cast<std::uint32_t>(-q - n * kEntries);     // f 2^23, exact
  const float r = std::ldexp(table()[k], static_cast<int>(n));
  return r < std::numeric_limits<float>::min() ? 0.0f : r;
}

}  // namespace lpdiag
