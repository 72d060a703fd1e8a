// Streaming statistics of a signed error (lp - hp), mergeable across threads, heads and steps.
//
// Sums are double-double (hi + lo via TwoSum), so adding 1e8 small errors loses no more than the
// final rounding, and merging two accumulators is itself a compensated addition: the order in
// which parallel partial accumulators are combined changes the result by at most one rounding.
#pragma once
#include <cstdint>
#include <limits>

namespace lpdiag {

// A compensated fp64 sum (Neumaier / TwoSum). value() is hi + lo rounded once.
class CompensatedSum {
 public:
  void add(double x) {
    const double s = hi_ + x;
    const double bp = s - hi_;
    lo_ += (hi_ - (s - bp)) + (x - bp);  // exact error of hi_ + x
    hi_ = s;
  }
  void merge(const CompensatedSum& o) {
    add(o.hi_);
    lo_ += o.lo_;
  }
  double value() const { return hi_ + lo_; }
  double hi() const { return hi_; }
  double lo() const { return lo_; }

 private:
  double hi_ = 0.0;
  double lo_ = 0.0;
};

class ErrorAccumulator {
 public:
  // Non-finite errors are counted apart and do not enter the sums, so one NaN does not erase
  // the evidence of a whole step.
  void add(double err) {
    if (!(err - err == 0.0)) {
      ++nonfinite_;
      return;
    }
    ++count_;
    sum_.add(err);
    sumsq_.add(err * err);
    if (err > 0) ++pos_;
    if (err < 0) ++neg_;
    if (err < min_) min_ = err;
    if (err > max_) max_ = err;
  }
  void merge(const ErrorAccumulator& o);

  std::int64_t count() const { return count_; }
  std::int64_t positive() const { return pos_; }
  std::int64_t negative() const { return neg_; }
  std::int64_t nonfinite() const { return nonfinite_; }
  double sum() const { return sum_.value(); }
  double sumsq() const { return sumsq_.value(); }
  double min() const { return count_ ? min_ : std::numeric_limits<double>::quiet_NaN(); }
  double max() const { return count_ ? max_ : std::numeric_limits<double>::quiet_NaN(); }
  double mean() const;
  double variance() const;  // unbiased sample variance; NaN for fewer than 2 values

 private:
  std::int64_t count_ = 0, pos_ = 0, neg_ = 0, nonfinite_ = 0;
  CompensatedSum sum_, sumsq_;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
};

}  // namespace lpdiag
