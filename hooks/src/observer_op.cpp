#include "lpdiag/hooks/observer.hpp"

#include <torch/version.h>

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>

#include "lpdiag/error.hpp"
#include "lpdiag/hooks/counter_sink.hpp"
#include "lpdiag/observe/observer.hpp"

#ifdef LPDIAG_HOOKS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "attention_cuda.hpp"
#include "lpdiag/cuda/observer.hpp"
#endif

namespace lpdiag::hooks {
namespace {

struct Skips {
  std::mutex mu;
  std::map<std::string, int64_t> count;
};
Skips& skips() {
  static Skips s;
  return s;
}

// Counts a skipped call; the first of each reason is said once on stderr and reported to the
// layer's Monitor (an observe_skipped event).
torch::Tensor skip(int64_t layer, const std::string& name, const std::string& reason) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(skips().mu);
    first = skips().count[reason]++ == 0;
  }
  if (first) {
    std::fprintf(stderr, "lpdiag observer: a call of %s (layer id %lld) was not observed: %s; such calls run as they are and are "
                         "counted, not observed\n",
                 name.c_str(), static_cast<long long>(layer), reason.c_str());
    if (layer >= 0) CounterSink::instance().report_skip(layer, reason);
  }
  return torch::empty({0});
}

bool half_type(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf; }

// Why the observer cannot take this call, or "" when it can.
std::string unsupported(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o) {
  for (const auto* t : {&q, &k, &v, &o})
    if (!t->defined()) return "an undefined tensor";
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || o.dim() != 4) return "q, k, v or O is not 4-D (B, H, N, d)";
  if (o.sizes() != q.sizes()) return "O's shape differs from q's (" + c10::str(o.sizes()) + " vs " + c10::str(q.sizes()) + ")";
  if (k.sizes() != v.sizes()) return "k's and v's shapes differ";
  if (k.size(0) != q.size(0) || k.size(3) != q.size(3)) return "k's batch or head dim differs from q's";
  const auto dt = q.scalar_type();
  if (k.scalar_type() != dt || v.scalar_type() != dt || o.scalar_type() != dt) return "q, k, v and O of different dtypes";
  if (k.device() != q.device() || v.device() != q.device() || o.device() != q.device()) return "q, k, v and O on different devices";
  if (q.device().is_cuda()) {
#ifdef LPDIAG_HOOKS_CUDA
    if (!half_type(q)) return std::string("dtype ") + c10::toString(dt) + " on CUDA (the CUDA observer takes bfloat16 and float16)";
    if (q.size(3) > 256) return "head dim " + std::to_string(q.size(3)) + " on CUDA (up to 256)";
#else
    return "tensors on CUDA, but this build of lpdiag has no CUDA observer";
#endif
  } else if (q.device().is_cpu()) {
    if (!half_type(q) && dt != torch::kFloat32) return std::string("dtype ") + c10::toString(dt);
  } else {
    return "device " + q.device().str();
  }
  return "";
}

ObservedCall call_shape(const torch::Tensor& q, const torch::Tensor& k, bool causal, double scale, int64_t max_rows, int64_t head_mask) {
  ObservedCall c;
  c.B = q.size(0), c.Hq = q.size(1), c.Nq = q.size(2), c.d = q.size(3), c.Hkv = k.size(1), c.Nk = k.size(2);
  c.causal = causal;
  c.scale = scale;
  c.batches = max_rows > 0 ? std::max<int64_t>(1, (max_rows + c.Nq - 1) / c.Nq) : 0;
  c.head_mask = static_cast<std::uint64_t>(head_mask);
  return c;
}

std::vector<float> floats(const torch::Tensor& t) {
  torch::Tensor f = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

std::string spec_json(const std::string& name, bool causal, double scale, int64_t max_rows) {
  nlohmann::json j{{"policy", "external:" + name}, {"fix", {{"kind", "none"}}}, {"observed", true}, {"causal", causal},
                   {"scale", scale}, {"observed_rows", max_rows}};
  return j.dump();
}


#ifdef LPDIAG_HOOKS_CUDA
lpdiag::cuda::ObservedView device_view(const torch::Tensor& t) { return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)}; }

// The CUDA observer's forward into `counters` (Hq entries); returns O - O_exact of the observed rows.
torch::Tensor cuda_forward(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in, const torch::Tensor& o_in,
                           const ObservedCall& c, lpdiag::cuda::DeviceHeadCounters* counters) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  auto last_contiguous = [](const torch::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); };
  const torch::Tensor q = last_contiguous(q_in), k = last_contiguous(k_in), v = last_contiguous(v_in), o = last_contiguous(o_in);
  torch::Tensor err = torch::empty({c.observed_batches(), c.Hq, c.Nq, c.d}, q.options().dtype(torch::kFloat32));
  lpdiag::cuda::ObserveForwardArgs a;
  a.type = q.scalar_type() == torch::kBFloat16 ? lpdiag::cuda::ObservedType::bf16 : lpdiag::cuda::ObservedType::fp16;
  a.q = device_view(q), a.k = device_view(k), a.v = device_view(v), a.o = device_view(o);
  a.shape = c;
  a.o_error = err.data_ptr<float>();
  a.counters = counters;
  a.stream = c10::cuda::getCurrentCUDAStream().stream();
  lpdiag::cuda::observe_forward(a);
  return err;
}

void cuda_backward(const torch::Tensor& dout, const torch::Tensor& o_error, std::int64_t head_mask,
                   lpdiag::cuda::DeviceHeadCounters* counters) {
  const c10::cuda::CUDAGuard guard(o_error.device());
  torch::Tensor g = dout.to(o_error.device());
  if (!half_type(g)) g = g.to(torch::kBFloat16);
  if (g.stride(3) != 1) g = g.contiguous();
  lpdiag::cuda::ObserveBackwardArgs a;
  a.type = g.scalar_type() == torch::kBFloat16 ? lpdiag::cuda::ObservedType::bf16 : lpdiag::cuda::ObservedType::fp16;
  a.dout = device_view(g);
  a.o_error = o_error.data_ptr<float>();
  a.batches = o_error.size(0), a.Hq = o_error.size(1), a.Nq = o_error.size(2), a.d = o_error.size(3);
  a.head_mask = static_cast<std::uint64_t>(head_mask);
  a.counters = counters;
  a.stream = c10::cuda::getCurrentCUDAStream().stream();
  lpdiag::cuda::observe_backward(a);
}
#endif

}  // namespace

torch::Tensor observe_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o,
                              bool causal, double scale, int64_t layer, const std::string& name, int64_t max_rows,
                              int64_t head_mask) {
  torch::NoGradGuard no_grad;
  if (layer < 0) return skip(layer, name, "no layer id (no lpdiag.Monitor runs this module, and no layer was given)");
  const std::string why = unsupported(q, k, v, o);
  if (!why.empty()) return skip(layer, name, why);
  ObservedCall c = call_shape(q, k, causal, scale, max_rows, head_mask);
  try {
    check_observed_call(c, false);
  } catch (const Error& e) {
    return skip(layer, name, std::string(e.what()).substr(std::string("observer: ").size()));
  }
  const int64_t Bo = c.observed_batches();
  if (layer >= 0)
    CounterSink::instance().report_spec(layer, spec_json(name, causal, scale, max_rows));
#ifdef LPDIAG_HOOKS_CUDA
  if (q.is_cuda()) {
    torch::Tensor scratch;
    try {
      return cuda_forward(q, k, v, o, c, device_counters_for(layer, c.Hq, q, scratch));
    } catch (const Error& e) {
      return skip(layer, name, e.what());
    }
  }
#endif
  const torch::Tensor qb = q.narrow(0, 0, Bo), kb = k.narrow(0, 0, Bo), vb = v.narrow(0, 0, Bo), ob = o.narrow(0, 0, Bo);
  const auto qf = floats(qb), kf = floats(kb), vf = floats(vb), of = floats(ob);
  c.q = qf.data(), c.k = kf.data(), c.v = vf.data(), c.o = of.data();
  c.B = Bo, c.batches = 0;
  ObservedForward f = lpdiag::observe_forward(c, at::get_num_threads());
  if (layer >= 0) CounterSink::instance().add(layer, f.heads);
  return torch::from_blob(f.o_error.data(), {Bo, c.Hq, c.Nq, c.d}, torch::kFloat32).clone();
}

void observe_backward(const torch::Tensor& dout, const torch::Tensor& o_error, int64_t layer, int64_t head_mask) {
  if (!o_error.defined() || o_error.numel() == 0 || !dout.defined()) return;
  torch::NoGradGuard no_grad;
  const int64_t Bo = o_error.size(0), Hq = o_error.size(1), Nq = o_error.size(2), d = o_error.size(3);
  if (dout.dim() != 4 || dout.size(0) < Bo || dout.size(1) != Hq || dout.size(2) != Nq || dout.size(3) != d) {
    skip(layer, "the backward", "dO's shape " + c10::str(dout.sizes()) + " does not match the forward's");
    return;
  }
#ifdef LPDIAG_HOOKS_CUDA
  if (o_error.is_cuda()) {
    torch::Tensor scratch;
    cuda_backward(dout, o_error, head_mask, device_counters_for(layer, Hq, o_error, scratch));
    return;
  }
#endif
  const auto gf = floats(dout.narrow(0, 0, Bo));
  const torch::Tensor e = o_error.contiguous();
  const std::vector<float> ef(e.data_ptr<float>(), e.data_ptr<float>() + e.numel());
  const auto heads = lpdiag::observe_backward(gf.data(), ef, Bo, Hq, Nq, d, static_cast<std::uint64_t>(head_mask));
  if (layer >= 0) CounterSink::instance().add(layer, heads);
}

void observe_call(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o, bool causal,
                  double scale, int64_t layer, const std::string& name, int64_t max_rows, int64_t head_mask) {
  const torch::Tensor err = observe_forward(q.detach(), k.detach(), v.detach(), o.detach(), causal, scale, layer, name, max_rows,
                                            head_mask);
  if (!err.defined() || !o.requires_grad()) return;
  torch::Tensor out = o;  // the hook reads dO and returns nothing: the gradient goes on unchanged
  out.register_hook([err, layer, head_mask](torch::Tensor g) { observe_backward(g, err, layer, head_mask); });
}

torch::Tensor observe_stats(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o,
                            const torch::Tensor& dout, bool causal, double scale) {
  torch::NoGradGuard no_grad;
  const std::string why = unsupported(q, k, v, o);
  TORCH_CHECK(why.empty(), "lpdiag.observe.measure: cannot observe this call: ", why);
  ObservedCall c = call_shape(q, k, causal, scale, 0, 0);
  try {
    check_observed_call(c, false);
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag.observe.measure: ", e.what());
  }
  const bool backward = dout.defined() && dout.numel() > 0;
  if (backward)
    TORCH_CHECK(dout.sizes() == q.sizes(), "lpdiag.observe.measure: dout must have q's shape ", q.sizes(), ", got ", dout.sizes());
  std::vector<HeadCounters> heads;
#ifdef LPDIAG_HOOKS_CUDA
  if (q.is_cuda()) {
    torch::Tensor buf = torch::zeros({c.Hq * static_cast<int64_t>(sizeof(lpdiag::cuda::DeviceHeadCounters))}, q.options().dtype(torch::kUInt8));
    auto* counters = reinterpret_cast<lpdiag::cuda::DeviceHeadCounters*>(buf.data_ptr());
    const torch::Tensor err = cuda_forward(q, k, v, o, c, counters);
    if (backward) cuda_backward(dout, err, 0, counters);
    heads = lpdiag::cuda::read_counters(counters, c.Hq, c10::cuda::getCurrentCUDAStream().stream());
  }
#endif
  if (!q.is_cuda()) {
    const auto qf = floats(q), kf = floats(k), vf = floats(v), of = floats(o);
    c.q = qf.data(), c.k = kf.data(), c.v = vf.data(), c.o = of.data();
    ObservedForward f = lpdiag::observe_forward(c, at::get_num_threads());
    heads = f.heads;
    if (backward) {
      const auto gf = floats(dout);
      const auto d = lpdiag::observe_backward(gf.data(), f.o_error, c.B, c.Hq, c.Nq, c.d);
      for (std::size_t h = 0; h < heads.size(); ++h) heads[h] += d[h];
    }
  }
  torch::Tensor out = torch::empty({c.Hq, 14}, torch::kFloat64);
  auto a = out.accessor<double, 2>();
  for (int64_t h = 0; h < c.Hq; ++h) {
    const HeadCounters& x = heads[static_cast<std::size_t>(h)];
    const double row[14] = {double(x.rows), double(x.repeated_max_rows), double(x.zero_max_repeated_rows), double(x.logit_max),
                            double(x.o_err_count), x.o_err_sum, x.o_err_sumsq, double(x.o_err_pos), double(x.o_err_neg),
                            double(x.delta_err_count), x.delta_err_sum, x.delta_err_sumsq, double(x.delta_err_pos), double(x.delta_err_neg)};
    for (int i = 0; i < 14; ++i) a[h][i] = row[i];
  }
  return out;
}

std::string sdpa_backend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
#if TORCH_VERSION_MAJOR >= 2
  try {
    // ATen's sdp::SDPBackend: math 0, flash_attention 1, efficient_attention 2, cudnn_attention 3.
    switch (at::_fused_sdp_choice(q, k, v, {}, 0.0, causal)) {
      case 0: return "math";
      case 1: return "flash";
      case 2: return "efficient";
      case 3: return "cudnn";
      default: return "sdpa";
    }
  } catch (const std::exception&) {
    return "sdpa";
  }
#else
  (void)q, (void)k, (void)v, (void)causal;
  return "sdpa";
#endif
}

std::map<std::string, int64_t> observer_skips() {
  std::lock_guard<std::mutex> lock(skips().mu);
  return skips().count;
}

}  // namespace lpdiag::hooks
