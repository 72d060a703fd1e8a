#include "matrix_group.hpp"

namespace lpdiag::hooks {

bool MatrixGroup::refresh_views() {
  bool stale = views_.size() != members.size();
  for (std::size_t x = 0; !stale && x < members.size(); ++x) stale = bases_[x] != members[x].rows->weight.data_ptr();
  if (!stale) return false;
  views_.clear(), bases_.clear();
  for (const Member& m : members) {
    const RowSlice& r = *m.rows;
    views_.push_back(r.weight.detach().narrow(0, r.row0, r.row1 - r.row0));
    bases_.push_back(r.weight.data_ptr());
  }
  const auto& f = views_.front();
  const std::int64_t rows = f.size(0) * static_cast<std::int64_t>(views_.size());
  if (!bufs_[0].defined() || bufs_[0].device() != f.device() || bufs_[0].size(0) != rows) {
    for (auto& b : bufs_) b = torch::empty({rows, f.size(1)}, f.options().dtype(torch::kFloat32));
    prev_ = -1;
  }
  return true;
}

void MatrixGroup::stack() {
  bool fp32 = true;
  for (const auto& v : views_) fp32 = fp32 && v.scalar_type() == torch::kFloat32;
  torch::Tensor& buf = bufs_[target()];
  if (fp32) torch::cat_out(buf, views_, 0);
  else buf.copy_(torch::cat(views_, 0));
}

torch::Tensor MatrixGroup::as_matrices(const torch::Tensor& buf) const {
  return buf.view({static_cast<std::int64_t>(members.size()), views_.front().size(0), views_.front().size(1)});
}

torch::Tensor MatrixGroup::stacked() const { return as_matrices(bufs_[target()]); }

torch::Tensor MatrixGroup::previous() const { return prev_ < 0 ? torch::Tensor() : as_matrices(bufs_[prev_]); }

bool MatrixGroup::steady(bool weights, bool updates) const {
  const torch::Tensor w = stacked();
  if (weights && !whole.warm_for(w)) return false;
  if (weights && headed > 0 && !heads.v.defined()) return false;
  if (updates && !(prev_ >= 0 && prev_u.defined() && delta.warm_for(w))) return false;
  return true;
}

}  // namespace lpdiag::hooks
