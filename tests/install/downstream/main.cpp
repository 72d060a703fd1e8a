#include <cstdio>

#include "lpdiag/numerics/convert.hpp"

int main() {
  const double r = lpdiag::round_to(-4.703990459442139, lpdiag::format(lpdiag::FormatId::bf16));
  std::printf("bf16(-4.703990459442139) = %.17g\n", r);
  return 0;
}
