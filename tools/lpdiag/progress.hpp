// A progress bar on stderr, only when stderr is a terminal.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <string>

namespace lpdiag::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), on_(isatty(STDERR_FILENO) == 1) {}
  ~ProgressBar() {
    if (on_ && shown_) std::fprintf(stderr, "\r%*s\r", 60, "");
  }
  void operator()(double fraction) {
    if (!on_) return;
    const int pct = static_cast<int>(fraction * 100);
    if (pct == last_) return;
    last_ = pct;
    shown_ = true;
    const int w = 30, fill = pct * w / 100;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), fill, "##############################", w - fill, "", pct);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool on_;
  bool shown_ = false;
  int last_ = -1;
};

}  // namespace lpdiag::cli
