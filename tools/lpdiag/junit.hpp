// Minimal JUnit XML for CI systems (one testsuite, one testcase per check).
#pragma once
#include <string>
#include <vector>

namespace lpdiag::cli {

struct JunitCase {
  std::string classname;
  std::string name;
  bool failed = false;
  bool skipped = false;  // could not run here (the message says why); never counted as passed
  std::string message;   // failure or skip message
  std::string details;   // system-out
};

// Throws WriteError when the file cannot be written.
void write_junit(const std::string& path, const std::string& suite, const std::vector<JunitCase>& cases);

}  // namespace lpdiag::cli
