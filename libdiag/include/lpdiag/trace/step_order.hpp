// `/step` must increase strictly (docs/reference/trace-format.md); rows out of order would be placed at the
// wrong time and read as false evidence. One check for every reader of the rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lpdiag {

// Rows [row0, row0 + n) hold `steps`; `prev` is the step of row row0 - 1 (INT64_MIN before row 0)
// and is left at the last step checked. Throws InputError naming the row and both steps.
void check_step_order(const std::string& path, std::int64_t row0, const std::int64_t* steps, std::size_t n, std::int64_t& prev);

}  // namespace lpdiag
