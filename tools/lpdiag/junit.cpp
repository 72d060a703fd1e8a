#include "junit.hpp"

#include <fstream>

#include "lpdiag/error.hpp"

namespace lpdiag::cli {
namespace {
std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default: o += c;
    }
  }
  return o;
}
}  // namespace

void write_junit(const std::string& path, const std::string& suite, const std::vector<JunitCase>& cases) {
  std::ofstream f(path);
  if (!f) throw WriteError(path + ": cannot write the JUnit file");
  int failures = 0, skipped = 0;
  for (const auto& c : cases) failures += c.failed, skipped += c.skipped;
  f << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  f << "<testsuite name=\"" << escape(suite) << "\" tests=\"" << cases.size() << "\" failures=\"" << failures << "\" skipped=\"" << skipped << "\">\n";
  for (const auto& c : cases) {
    f << "  <testcase classname=\"" << escape(c.classname) << "\" name=\"" << escape(c.name) << "\">";
    if (c.failed) f << "<failure message=\"" << escape(c.message) << "\"/>";
    else if (c.skipped) f << "<skipped message=\"" << escape(c.message) << "\"/>";
    if (!c.details.empty()) f << "<system-out>" << escape(c.details) << "</system-out>";
    f << "</testcase>\n";
  }
  f << "</testsuite>\n";
  if (!f) throw WriteError(path + ": writing the JUnit file failed");
}

}  // namespace lpdiag::cli
