// What the seed forward's and backward's launchers share: the checks, the q/k/v views, the
// shape, the key tile, the scale, the exp/log tables of the current device, the fix's parameters.
#pragma once
#include <cmath>
#include <cstdlib>
#include <string>

#include "../flash/launch_common.hpp"
#include "seed_params.cuh"
#include "seed_tables.hpp"

namespace lpdiag::cuda::seed {

// LPDIAG_SEED_EXP=global makes the seed-mma kernels read every exp from global memory, the
// benchmark's A/B of the shared-memory window; anything else (or unset) keeps the window.
inline unsigned exp_window_entries() {
  static const bool global = [] {
    const char* e = std::getenv("LPDIAG_SEED_EXP");
    return e && std::string(e) == "global";
  }();
  return global ? 0u : kExpWindow;
}

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
  p.tables.exp_window = exp_window_entries();
}

// The seed-mma kernels copy rows with cp.async: 16-byte aligned rows (throws naming the input).
inline void check_copyable(const BF16View& x, const char* name) { flash::view(x, name); }

// The fix as the kernels take it (declared first: the fills below use it).
using flash::fix_params;

// A forward launch's parameters from its arguments: the checks, inputs, outputs and fix.
inline FwdParams forward_params(const FlashForwardArgs& a) {
  FwdParams p{};
  set_common(p, a);
  flash::require(a.lse, "lse");
  if (a.instrument != Instrument::off) flash::require(a.counters, "counters (instrumentation is on)");
  if (a.instrument == Instrument::full) flash::require(a.o_residual, "o_residual (instrumentation is full)");
  p.o = flash::out_view(a.o, a.o_strides, a.shape, "o");
  p.lse = a.lse;
  p.residual = a.o_residual;
  p.counters = a.counters;
  p.scale_hp = a.shape.scale != 0.f ? double(a.shape.scale) : 1.0 / std::sqrt(static_cast<double>(a.shape.d));
  p.fix = fix_params(a.fix);
  return p;
}

// A backward launch's parameters from its arguments.
inline BwdParams backward_params(const FlashBackwardArgs& a) {
  BwdParams p{};
  set_common(p, a);
  p.o = view_of(a.o, "o");
  p.dout = view_of(a.dout, "dout");
  flash::require(a.lse, "lse");
  flash::require(a.delta, "delta");
  if (a.instrument == Instrument::full)
    flash::require(a.o_residual, "o_residual (instrumentation is full)"), flash::require(a.counters, "counters");
  p.lse = a.lse;
  p.residual = a.o_residual;
  p.delta = a.delta;
  p.dq = flash::out_view(a.dq, a.dq_strides, a.shape, "dq");
  p.dk = flash::out_view(a.dk, a.dk_strides, a.shape, "dk");
  p.dv = flash::out_view(a.dv, a.dv_strides, a.shape, "dv");
  p.counters = a.counters;
  p.query_tile = a.numerics.query_tile;
  p.fix = fix_params(a.fix);
  return p;
}


}  // namespace lpdiag::cuda::seed
