// A per-process scratch directory under the system temp dir, for tests that write files.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace lpdiag_test {
inline std::string temp_path(const std::string& suite, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("lpdiag-" + suite + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}
}  // namespace lpdiag_test
