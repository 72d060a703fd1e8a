// `lpdiag repair TRACE…`: clears the status flags a killed writer left, so that any HDF5 reader
// opens the trace (docs/reference/trace-io.md, "A killed writer"). Exit 0 repaired or nothing to do, 2 when a
// file is not a trace or a live writer holds it.
#include <iostream>

#include "lpdiag/command.hpp"
#include "lpdiag/trace/preflight.hpp"
#include "lpdiag/trace/repair.hpp"

namespace lpdiag::cli {

Registration register_repair(CLI::App& app) {
  auto paths = std::make_shared<std::vector<std::string>>();
  CLI::App* sub = app.add_subcommand("repair", "Clear the status flags a killed writer left, so h5py and h5ls can open the trace");
  sub->add_option("traces", *paths, "Trace files")->required();
  return {sub, [paths] {
            for (const auto& p : *paths) {
              preflight_trace(p);
              std::cout << repair_trace(p).message << "\n";
            }
            return static_cast<int>(kOk);
          }};
}

}  // namespace lpdiag::cli
