// What the seed forward's and backward's launchers share: the checks, the q/k/v views, the
// shape, the key tile, the scale and the exp/log tables of the current device.
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

}  // namespace lpdiag::cuda::seed
