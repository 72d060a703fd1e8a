// What the seed forward's and backward's launchers share: the checks, the q/k/v views, the
// shape, the key tile, the scale, the exp/log tables of the current device, the fix's parameters.
#pragma once
#include "../flash/launch_common.hpp"
#include "seed_params.cuh"
#include "seed_tables.hpp"

namespace lpdiag::cuda::seed {

template <class Params, class Args>
void set_common(Params& p, const Args& a) {
  check_kernel_numerics(a.numerics);
  flash::check_shape(a.shape);
  p.q = view_of(a.q, "q");
  p.k = view_of(a.k, "k");
  p.v = view_of(a.v, "v");
  p.H = static_cast<int>(a.shape.H);
  p.N = static_cast<int>(a.shape.N);
  p.key_tile = a.numerics.key_tile;
  p.scale = flash::scale_of(a.shape);
  p.tables = tables_for_current_device();
}

// The fix as the kernels take it (none 0, paper 1, safe 2, sr 3: the enum's order).
inline FixParams fix_params(const FixConfig& f) {
  return {static_cast<int>(f.kind), static_cast<float>(f.tol), static_cast<float>(f.beta), static_cast<float>(f.offset), f.seed};
}

}  // namespace lpdiag::cuda::seed
