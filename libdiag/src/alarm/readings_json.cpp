// The detector's readings as JSON (readings_json.hpp).
#include "lpdiag/alarm/readings_json.hpp"

#include <cmath>

namespace lpdiag::alarm {
namespace {

nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

nlohmann::json readings_json(const Readings& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : r.layers)
    layers.push_back({{"layer_index", l.layer_index},
                      {"head", l.head >= 0 ? nlohmann::json(l.head) : nlohmann::json(nullptr)},
                      {"excess_growth", number(l.excess_growth)},
                      {"repeated_rate", number(l.repeated_rate)},
                      {"repeated_rate_before", number(l.repeated_rate_before)},
                      {"logit_max", number(l.logit_max)}});
  return {{"step", r.step >= 0 ? nlohmann::json(r.step) : nlohmann::json(nullptr)},
          {"loss_over_best", number(r.loss_over_best)},
          {"median_growth", number(r.median_growth)},
          {"layers", std::move(layers)}};
}

}  // namespace lpdiag::alarm
