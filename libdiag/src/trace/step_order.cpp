#include "lpdiag/trace/step_order.hpp"

#include "lpdiag/error.hpp"

namespace lpdiag {

void check_step_order(const std::string& path, std::int64_t row0, const std::int64_t* steps, std::size_t n, std::int64_t& prev) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t row = row0 + static_cast<std::int64_t>(i);
    if (steps[i] < 0) throw InputError(path + ": /step[" + std::to_string(row) + "] = " + std::to_string(steps[i]) + " is negative");
    if (steps[i] <= prev)
      throw InputError(path + ": /step is not strictly increasing: row " + std::to_string(row) + " has step " + std::to_string(steps[i]) +
                       " after step " + std::to_string(prev) + " (a trace written by two runs, or rows out of order); " +
                       "the rows cannot be placed in time");
    prev = steps[i];
  }
}

}  // namespace lpdiag
