// The alarm detector's readings (alarm_detector.hpp) as JSON, one shape for the Monitor
// (Monitor.readings() in Python) and `lpdiag alarm --readings`: an unmeasured value is null.
#pragma once
#include <nlohmann/json.hpp>

#include "lpdiag/alarm/alarm_detector.hpp"

namespace lpdiag::alarm {

// {"step", "loss_over_best", "median_growth", "layers": [{"layer_index", "head", "excess_growth",
//  "repeated_rate", "repeated_rate_before", "logit_max"}, ...]}
nlohmann::json readings_json(const Readings& r);

}  // namespace lpdiag::alarm
