// Top singular value and vectors of a batch of matrices by power iteration on W^T W, on the
// matrices' own device, warm-started from the previous run. It never synchronizes: sigma stays
// a device tensor until the record's values are fetched together. The state it carries between
// runs (v) is updated in place, so a run can be captured in a CUDA graph and replayed.
#pragma once
#include <torch/torch.h>

namespace lpdiag::hooks {

struct PowerIteration {
  torch::Tensor v;      // (batch, cols, 1), unit columns: the warm start, kept between runs
  torch::Tensor u;      // (batch, rows, 1): the last run's left vectors
  torch::Tensor sigma;  // (batch): the last run's estimates, 0 for a zero matrix

  // Whether the next run on matrices like `w` starts warm rather than cold (30 iterations).
  bool warm_for(const torch::Tensor& w) const;
  // w: (batch, rows, cols).
  void run(const torch::Tensor& w, int warm_iterations);
};

}  // namespace lpdiag::hooks
