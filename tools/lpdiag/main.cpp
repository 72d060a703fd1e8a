// The `lpdiag` command line: parses, dispatches to one subcommand, maps errors to exit codes.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "lpdiag/command.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag_version.hpp"
#ifdef LPDIAG_HAVE_CUDA
#include "lpdiag/cuda/device.hpp"
#endif

namespace {

std::string version_text() {
  std::string s = fmt::format("lpdiag {}", LPDIAG_VERSION_STRING);
#ifdef LPDIAG_HAVE_CUDA
  s += " (cuda kernels built";
  s += lpdiag::cuda::device_count() > 0 ? ", GPU present)" : ", no GPU visible)";
#else
  s += " (cuda kernels not built)";
#endif
  return s;
}

// CLI11 messages can span lines; the contract is one line on stderr.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace lpdiag::cli;
  CLI::App app{
      "lpdiag: explains why low-precision (BF16/FP16/FP8) transformer training blows up.\n"
      "Records attention numerics to HDF5 traces, replays captured inputs under other numerics\n"
      "and rebuilds the causal chain from biased rounding to loss explosion.",
      "lpdiag"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  app.footer("Exit codes: 0 success, 1 finding (a failed run, bias, a chain or an alarm), 2 unusable input or failure.");

  std::vector<Registration> commands;
  commands.push_back(register_info(app));
  commands.push_back(register_analyze(app));
  commands.push_back(register_check(app));
  commands.push_back(register_report(app));
  commands.push_back(register_watch(app));
  commands.push_back(register_alarm(app));
  commands.push_back(register_repair(app));
  commands.push_back(register_synth(app));
  commands.push_back(register_replay(app));
  commands.push_back(register_probe(app));
  commands.push_back(register_round(app));

  // CLI11 reports an unknown first word as "a subcommand is required"; say what was typed.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const auto& c : commands) {
      known = known || c.sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + c.sub->get_name();
    }
    if (!known) {
      std::cerr << "lpdiag: unknown command '" << argv[1] << "'; commands are: " << names << "\n";
      return kUnusable;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "lpdiag: " << one_line(e.what()) << " (see 'lpdiag --help')\n";
    return kUnusable;
  }

  for (auto& c : commands) {
    if (!c.sub->parsed()) continue;
    try {
      return c.run();
    } catch (const lpdiag::Error& e) {
      std::cerr << "lpdiag " << c.sub->get_name() << ": " << one_line(e.what()) << "\n";
      return kUnusable;
    } catch (const std::exception& e) {
      std::cerr << "lpdiag " << c.sub->get_name() << ": internal error: " << one_line(e.what()) << "\n";
      return kUnusable;
    }
  }
  std::cerr << "lpdiag: no command given (see 'lpdiag --help')\n";
  return kUnusable;
}
