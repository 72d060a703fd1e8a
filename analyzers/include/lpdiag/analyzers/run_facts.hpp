// What a trace holds about the run that wrote it, beyond its signals: the attention numerics
// each layer recorded, the model's shape, the learning-rate and loss schedules, the steps it
// covers and its run_config. `lpdiag analyze --reference` compares these to decide whether RUN
// and REF differ in the attention numerics and in nothing else, the only case in which REF is a
// counterfactual of RUN.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lpdiag::analysis {

struct RunFacts {
  std::string path;
  std::string run_config;                   // JSON, or empty / not JSON
  std::vector<std::string> layer_numerics;  // per attention layer, by layer index: "policy fix-json" as recorded
  std::vector<std::string> layer_specs;     // the same layers' whole spec less the level ("" where not recorded)
  std::string shape;                        // attention layers, heads, head dim and tracked matrix shapes; empty: unknown
  std::vector<std::int64_t> steps;          // every record's step (the first file's)
  std::vector<double> lr, loss;             // at those steps; empty when the trace has no such series
  std::int64_t first_step = 0, last_step = -1;

  static RunFacts from_config(std::string run_config);  // facts known only from a config (tests, callers without a trace)
};

// Reads the facts of one trace (the first rank file of a run). Throws InputError as the reader does.
RunFacts read_run_facts(const std::string& path);

// The ways RUN and REF differ beyond the attention numerics, each "what: RUN's vs REF's": the
// run_config keys other than those naming the numerics or the instrumentation, the model shape,
// the learning rate at the steps both recorded, the loss at the first step both recorded (same
// model, initialisation and data give the same first loss whatever the attention numerics).
std::vector<std::string> differences_beyond_numerics(const RunFacts& run, const RunFacts& ref);

// The attention numerics both runs ran, described, when they ran the same ones (the per-layer
// record where both traces have one, else the run_config keys that name them); empty when they
// differ or neither says.
std::string same_numerics(const RunFacts& run, const RunFacts& ref);

}  // namespace lpdiag::analysis
