#include "lpdiag/stats/error_accumulator.hpp"

#include <algorithm>
#include <cmath>

namespace lpdiag {

void ErrorAccumulator::merge(const ErrorAccumulator& o) {
  count_ += o.count_;
  pos_ += o.pos_;
  neg_ += o.neg_;
  nonfinite_ += o.nonfinite_;
  sum_.merge(o.sum_);
  sumsq_.merge(o.sumsq_);
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
}

double ErrorAccumulator::mean() const {
  return count_ ? sum() / static_cast<double>(count_) : std::nan("");
}

double ErrorAccumulator::variance() const {
  if (count_ < 2) return std::nan("");
  const double n = static_cast<double>(count_);
  // sumsq - sum^2/n with the double-double parts kept apart as long as possible.
  const double s = sum();
  const double centered = (sumsq_.hi() - s * (s / n)) + sumsq_.lo();
  return std::max(0.0, centered) / (n - 1.0);
}

}  // namespace lpdiag
