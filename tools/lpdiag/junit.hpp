// Minimal JUnit XML for CI systems (one testsuite, one testcase per check).
#pragma once
#include <string>
#include <vector>

namespace lpdiag::cli {

struct JunitCase {
  std::string classname;
  std::string name;
  bool failed = false;
  std::string message;   // failure message
  std::string details;   // system-out
};

// Throws WriteError when the file cannot be written.
void write_junit(const std::string& path, const std::string& suite, const std::vector<JunitCase>& cases);

}  // namespace lpdiag::cli
