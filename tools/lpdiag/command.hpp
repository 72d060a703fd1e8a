// Each subcommand registers itself on the CLI11 app and returns the action to run after parsing.
// Exit codes shared by every command: 0 success, 1 a finding (bias, chain), 2 unusable input or
// a failure, with one line on stderr naming the cause.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace lpdiag::cli {

enum ExitCode : int { kOk = 0, kFinding = 1, kUnusable = 2 };

using Action = std::function<int()>;

// Adds the subcommand to `app`; the returned action is run only when that subcommand was chosen.
struct Registration {
  CLI::App* sub;
  Action run;
};

Registration register_round(CLI::App& app);
Registration register_info(CLI::App& app);
Registration register_replay(CLI::App& app);
Registration register_probe(CLI::App& app);
Registration register_analyze(CLI::App& app);
Registration register_check(CLI::App& app);
Registration register_synth(CLI::App& app);
Registration register_report(CLI::App& app);
Registration register_watch(CLI::App& app);
Registration register_repair(CLI::App& app);
Registration register_alarm(CLI::App& app);

}  // namespace lpdiag::cli
