// Matrices of one shape and device whose statistics run as one batch (48 of GPT-2 small's 61
// matrices are 768 x 768), so a record costs a few dozen kernel launches, not thousands. The
// members with heads (one head count per group) come first and also get per-head norms.
// Every tensor a record reads or carries to the next one lives in a buffer made once and
// updated in place, so the statistics can be captured in a CUDA graph and replayed.
#pragma once
#include <torch/torch.h>

#include <cstddef>
#include <vector>

#include "power_iteration.hpp"

namespace lpdiag::hooks {

// Rows [row0, row1) of a parameter: one tracked matrix. The Monitor owns it; groups point at it.
struct RowSlice {
  torch::Tensor weight;
  std::int64_t row0 = 0, row1 = 0;
};

struct MatrixGroup {
  struct Member {
    std::size_t index;     // into the Monitor's matrices (and the layout's)
    const RowSlice* rows;  // owned by the Monitor, which outlives the group
  };
  std::vector<Member> members;  // the first `headed` have heads
  std::int64_t headed = 0;      // how many members have heads
  std::int64_t n_heads = 0;     // their head count
  PowerIteration whole, delta, heads;
  torch::Tensor prev_u, prev_v;  // (G, rows), (G, cols): the previous update's top singular pair

  // Remakes the members' row views if a parameter's storage moved (model.to(...)) or on first
  // use; returns whether it did (a captured graph then reads stale addresses).
  bool refresh_views();
  // Two stack buffers take turns: one holds W at the last update record (the previous one),
  // the other this record's copy, so no record copies W a second time to keep it.
  // Copies the members' rows, in fp32, into this record's buffer, on the current stream.
  void stack();
  // This record's buffer (which of the two: target()), (G, rows, cols); valid after stack().
  torch::Tensor stacked() const;
  // W at the last update record, (G, rows, cols); undefined before the first.
  torch::Tensor previous() const;
  int target() const { return prev_ == 0 ? 1 : 0; }
  // After an update record: this record's buffer becomes the previous one.
  void keep_as_previous() { prev_ = target(); }
  // Whether every state the due statistics read exists: a run is then the same every record.
  bool steady(bool weights, bool updates) const;

 private:
  torch::Tensor as_matrices(const torch::Tensor& buf) const;
  std::vector<torch::Tensor> views_;
  std::vector<const void*> bases_;
  torch::Tensor bufs_[2];
  int prev_ = -1;  // which buffer holds W at the last update record
};

}  // namespace lpdiag::hooks
