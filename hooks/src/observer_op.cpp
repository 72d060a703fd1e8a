#include "lpdiag/hooks/observer.hpp"

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

std::vector<float> floats(const torch::Tensor& t) {
  torch::Tensor f = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

std::string spec_json(const std::string& name, bool causal, double scale, int64_t max_rows) {
  nlohmann::json j{{"policy", "external:" + name}, {"observed", true}, {"causal", causal}, {"scale", scale}, {"observed_rows", max_rows}};
  return j.dump();
}

}  // namespace

torch::Tensor observe_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o,
                              bool causal, double scale, int64_t layer, const std::string& name, int64_t max_rows,
                              int64_t head_mask) {
  torch::NoGradGuard no_grad;
  if (layer < 0) return skip(layer, name, "no layer id (no lpdiag.Monitor runs this module, and no layer was given)");
  const std::string why = unsupported(q, k, v, o);
  if (!why.empty()) return skip(layer, name, why);
  ObservedCall c;
  c.B = q.size(0), c.Hq = q.size(1), c.Nq = q.size(2), c.d = q.size(3), c.Hkv = k.size(1), c.Nk = k.size(2);
  c.causal = causal;
  c.scale = scale;
  c.batches = max_rows > 0 ? std::max<int64_t>(1, (max_rows + c.Nq - 1) / c.Nq) : 0;
  c.head_mask = static_cast<std::uint64_t>(head_mask);
  try {
    check_observed_call(c, false);
  } catch (const Error& e) {
    return skip(layer, name, std::string(e.what()).substr(std::string("observer: ").size()));
  }
  const int64_t Bo = c.observed_batches();
  if (layer >= 0)
    CounterSink::instance().report_spec(layer, "external:" + name, R"({"kind":"none"})", spec_json(name, causal, scale, max_rows));
#ifdef LPDIAG_HOOKS_CUDA
  if (q.is_cuda()) {
    const c10::cuda::CUDAGuard guard(q.device());
    auto view = [](const torch::Tensor& t) {
      const torch::Tensor u = t.stride(3) == 1 ? t : t.contiguous();
      return std::make_pair(u, lpdiag::cuda::ObservedView{u.data_ptr(), u.stride(0), u.stride(1), u.stride(2)});
    };
    auto [qq, qv] = view(q);
    auto [kk, kv] = view(k);
    auto [vv, vview] = view(v);
    auto [oo, ov] = view(o);
    torch::Tensor err = torch::empty({Bo, c.Hq, c.Nq, c.d}, q.options().dtype(torch::kFloat32));
    torch::Tensor scratch;
    lpdiag::cuda::ObserveForwardArgs a;
    a.type = q.scalar_type() == torch::kBFloat16 ? lpdiag::cuda::ObservedType::bf16 : lpdiag::cuda::ObservedType::fp16;
    a.q = qv, a.k = kv, a.v = vview, a.o = ov;
    a.shape = c;
    a.o_error = err.data_ptr<float>();
    a.counters = device_counters_for(layer, c.Hq, q, scratch);
    a.stream = c10::cuda::getCurrentCUDAStream().stream();
    try {
      lpdiag::cuda::observe_forward(a);
    } catch (const Error& e) {
      return skip(layer, name, e.what());
    }
    return err;
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
    const c10::cuda::CUDAGuard guard(o_error.device());
    torch::Tensor g = dout.to(o_error.device());
    if (!half_type(g)) g = g.to(o_error.scalar_type() == torch::kFloat32 ? torch::kBFloat16 : o_error.scalar_type());
    if (g.stride(3) != 1) g = g.contiguous();
    torch::Tensor scratch;
    lpdiag::cuda::ObserveBackwardArgs a;
    a.type = g.scalar_type() == torch::kBFloat16 ? lpdiag::cuda::ObservedType::bf16 : lpdiag::cuda::ObservedType::fp16;
    a.dout = {g.data_ptr(), g.stride(0), g.stride(1), g.stride(2)};
    a.o_error = o_error.data_ptr<float>();
    a.batches = Bo, a.Hq = Hq, a.Nq = Nq, a.d = d;
    a.head_mask = static_cast<std::uint64_t>(head_mask);
    a.counters = device_counters_for(layer, Hq, o_error, scratch);
    a.stream = c10::cuda::getCurrentCUDAStream().stream();
    lpdiag::cuda::observe_backward(a);
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

std::map<std::string, int64_t> observer_skips() {
  std::lock_guard<std::mutex> lock(skips().mu);
  return skips().count;
}

}  // namespace lpdiag::hooks
