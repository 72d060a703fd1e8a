// `--thresholds NAME` for the commands that run the online alarm (alarm, watch): which of the
// alarm's named thresholds (alarm::AlarmParams::preset) to use, "default" unless given.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

#include "lpdiag/alarm/alarm_detector.hpp"

namespace lpdiag::cli {

void add_thresholds_option(CLI::App* sub, std::string& name);
// The thresholds `name` stands for (the option's check has already refused an unknown name).
alarm::AlarmParams thresholds_params(const std::string& name);

}  // namespace lpdiag::cli
