#include "power_iteration.hpp"

#include <cmath>

namespace lpdiag::hooks {

bool PowerIteration::warm_for(const torch::Tensor& w) const {
  return v.defined() && v.size(0) == w.size(0) && v.size(1) == w.size(2) && v.device() == w.device();
}

// A cold start runs 30 iterations, a warm one what the caller asks: weights move little between
// records (spectral normalization gets by with one iteration per step), updates turn more. Each
// iteration reads W twice (y = W v,
// x = W^T y) and nothing else does: the last iteration's y and x give u = y / |y| and
// sigma = |x| / |y| = |W^T u|, the better of the two estimates at hand (its error is
// (sigma_2^2 - sigma_2^4 / sigma_1^2) / (sigma_1^2 - sigma_2^2) times that of |W v|). Passes over
// the weights, not FLOPs, are what a record costs on the GPU.
void PowerIteration::run(const torch::Tensor& w, int warm_iterations) {
  const bool cold = !warm_for(w);
  if (cold) v = torch::ones({w.size(0), w.size(2), 1}, w.options()) / std::sqrt(double(w.size(2)));
  const double tiny = 1e-30;
  const torch::Tensor wt = w.transpose(1, 2);
  torch::Tensor x = v, y, xn;
  for (int it = 0, n = cold ? 30 : warm_iterations; it < n; ++it) {
    y = torch::bmm(w, x);
    x = torch::bmm(wt, y);
    xn = x.norm(2, {1, 2}, true);
    x = x / (xn + tiny);
  }
  v.copy_(x);  // in place: a captured graph's next replay starts from it
  const torch::Tensor yn = y.norm(2, {1, 2}, true);
  u = y / (yn + tiny);
  sigma = (xn / (yn + tiny)).reshape({-1});
}

}  // namespace lpdiag::hooks
