// The seed-mma kernels' exp shortcut (numerics/bf16_exp_shortcut.hpp), checked on every bf16
// input in its range: for each x, every fp32 value y within 2 ulps of e^x (computed in long
// double) that the shortcut accepts must round to the bf16 value the table holds,
// bf16(glibc expf(x)). That is the kernels' claim for any expf within its documented 2-ulp bound.
#include <cmath>
#include <cstring>

#include "catch_compat.hpp"
#include "lpdiag/numerics/bf16_exp_shortcut.hpp"
#include "lpdiag/numerics/convert.hpp"

using namespace lpdiag;

TEST_CASE("the exp shortcut gives the table's bf16 value for any expf within 2 ulps", "[numerics][seed-mma]") {
  long long checked = 0, accepted = 0, refused = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float x = bf16_to_float(static_cast<std::uint16_t>(b));
    if (!(std::fabs(x) <= kBf16ExpShortcutRange)) continue;
    const float table = round_bf16(std::exp(x));
    // The fp32 value nearest e^x, then its neighbours two ulps either way.
    const float t = static_cast<float>(std::exp(static_cast<long double>(x)));
    float y = std::nextafter(std::nextafter(t, 0.f), 0.f);
    for (int k = 0; k < 5; ++k, y = std::nextafter(y, INFINITY)) {
      ++checked;
      if (!bf16_exp_shortcut_safe(y)) {
        ++refused;
        continue;
      }
      ++accepted;
      if (round_bf16(y) != table) FAIL_CHECK("x " << x << " y " << y << ": bf16 " << round_bf16(y) << " but the table holds " << table);
    }
  }
  INFO("checked " << checked << " accepted " << accepted << " refused " << refused);
  CHECK(checked > 5 * 30000);
  // The shortcut must take nearly everything (else the kernels read the table after all).
  CHECK(refused * 1000 < checked);
}
