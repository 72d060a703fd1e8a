#include "alarm_thresholds_option.hpp"

#include <vector>

#include "lpdiag/error.hpp"

namespace lpdiag::cli {

void add_thresholds_option(CLI::App* sub, std::string& name) {
  sub->add_option("--thresholds", name,
                  "The alarm's thresholds: default (the frozen fit), slow-trigger (the first fit, which also warns when a "
                  "growing head's repeated maxima rise slowly), or odds-trigger (the default's, with the repeated maxima's rise "
                  "measured in odds: also warns when they were already common; docs/reference/analyzers.md)")
      ->capture_default_str()
      ->check(CLI::IsMember(alarm::alarm_preset_names()));
}

alarm::AlarmParams thresholds_params(const std::string& name) {
  const auto p = alarm::AlarmParams::preset(name);
  if (!p) throw InputError("unknown alarm thresholds '" + name + "'; use one of: " + alarm::alarm_preset_list());
  return *p;
}

}  // namespace lpdiag::cli
