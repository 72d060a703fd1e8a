// A small trace with one planted causal chain, for the chain-placement tests: 2 layers of 4 heads,
// 1,000 records of 4,000 rows, the loss falling until record 930 and exploding from there. What
// each head and layer does is given per record; the noise (binomial counts, Gaussian errors and
// norms) comes from `seed`, drawn in a fixed order so that a seed gives one trace.
#pragma once
#include <functional>
#include <string>

#include "lpdiag/analyzers/chain.hpp"

namespace lpdiag_test {

struct PlantedRun {
  static constexpr int kLayers = 2, kHeads = 4, kRecords = 1000, kRows = 4000, kExplodesAt = 930;
  // The repeated-max row rate of head (layer, head) at record r.
  std::function<double(int layer, int head, int r)> repeated_rate;
  // Whether the head's delta error is biased at record r (z about 8, wandering with an AR(1)
  // process shared by the run, as a real bias does).
  std::function<bool(int layer, int head, int r)> biased;
  // The increment of log sigma_1 of the head's W_Q slice at record r, given its bias z there.
  std::function<double(int layer, int head, int r, double z)> growth;
  // Whether the layer's W_Q updates are aligned at record r, and the similarity of their top
  // singular pair then (concentration 0.8 aligned, 0.15 not; similarity 0.2 not aligned).
  std::function<bool(int layer, int r)> aligned;
  std::function<double(int layer)> aligned_similarity = [](int) { return 0.9; };
};

// Writes the run to `path` and reconstructs its chain.
lpdiag::analysis::ChainResult chain_of(const std::string& path, unsigned seed, const PlantedRun& run);

// Prints each link and finding (the test's log says what the analyzer saw).
void print_chain(const char* what, const lpdiag::analysis::ChainResult& c);

}  // namespace lpdiag_test
