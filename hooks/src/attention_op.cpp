#include "lpdiag/hooks/attention_op.hpp"
#include "lpdiag/hooks/guard.hpp"

#include <torch/version.h>

#include <cmath>
#include <map>
#include <optional>

#include "lpdiag/attention/attention_spec.hpp"
#include "lpdiag/attention/engine.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/hooks/counter_sink.hpp"
#include "lpdiag/trace/capture.hpp"

#ifdef LPDIAG_HOOKS_CUDA
#include "attention_cuda.hpp"
#endif

namespace lpdiag::hooks {
namespace {

void check_tensor(const torch::Tensor& t, const char* name, const torch::Tensor& q) {
  TORCH_CHECK(t.defined(), "lpdiag::attention: ", name, " is undefined");
  TORCH_CHECK(t.dim() == 4, "lpdiag::attention: ", name, " must have shape (B, H, N, d), got ", t.sizes());
  TORCH_CHECK(t.sizes() == q.sizes(), "lpdiag::attention: ", name, " must have the shape of q ", q.sizes(), ", got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kFloat32, "lpdiag::attention: ", name,
              " must be bfloat16 (or float32), got ", t.scalar_type());
  TORCH_CHECK(t.scalar_type() == q.scalar_type(), "lpdiag::attention: ", name, " has dtype ", t.scalar_type(), " but q has ",
              q.scalar_type());
  TORCH_CHECK(t.device() == q.device(), "lpdiag::attention: ", name, " is on ", t.device(), " but q is on ", q.device());
#ifdef LPDIAG_HOOKS_CUDA
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "lpdiag::attention: ", name, " is on ", t.device(),
              "; attention runs on the CPU or on CUDA");
#else
  TORCH_CHECK(t.device().is_cpu(), "lpdiag::attention: ", name, " is on ", t.device(),
              ", but this build has no CUDA kernels (built without nvcc or against a CPU LibTorch); move the tensors to the CPU");
#endif
  TORCH_CHECK(t.numel() > 0, "lpdiag::attention: ", name, " is empty");
}

// The op's spec, its one serialized form (AttentionSpec's JSON) parsed in one place. A run calls
// with a few specs over and over: the last ones parsed are kept per thread.
AttentionSpec make_spec(c10::string_view json_sv) {
  thread_local std::map<std::string, AttentionSpec, std::less<>> parsed;
  const std::string json(json_sv);
  if (auto it = parsed.find(json); it != parsed.end()) return it->second;
  AttentionSpec spec;
  try {
    spec = attention_spec_from_json(json);
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag::attention: ", e.what(), " (the spec is AttentionSpec's JSON: torch.ops.lpdiag.attention_spec(policy, fix, "
                "level, causal) writes it)");
  }
  if (parsed.size() > 64) parsed.clear();
  parsed.emplace(json, spec);
  return spec;
}

// The kernels and the engine apply 1/sqrt(d); a spec asking for another scale is refused here,
// never silently run at 1/sqrt(d).
void check_scale(const AttentionSpec& spec, const torch::Tensor& q) {
  const double want = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  TORCH_CHECK(spec.config.scale == 0.0 || std::fabs(spec.config.scale - want) <= 1e-6 * want, "lpdiag::attention: the kernels use scale "
              "1/sqrt(d) = ", want, "; the spec asks for ", spec.config.scale, " (scale 0 in the spec means 1/sqrt(d))");
}

std::vector<float> to_floats(const torch::Tensor& t) {
  torch::Tensor f = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

AttentionInputs inputs(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                       const std::vector<float>* dout, const torch::Tensor& shape) {
  return {q.data(), k.data(), v.data(), dout ? dout->data() : nullptr, shape.size(0), shape.size(1), shape.size(2), shape.size(3)};
}

torch::Tensor from_floats(const std::vector<float>& x, const torch::Tensor& like) {
  return torch::from_blob(const_cast<float*>(x.data()), like.sizes(), torch::kFloat32).clone().to(like.scalar_type());
}

// The capture of docs/design.md's replay: the layer's inputs, dO and outputs at the requested step.
void write_capture_file(const CaptureRequest& req, int64_t layer, const AttentionSpec& spec,
                        const torch::Tensor& q, std::vector<float> qf, std::vector<float> kf, std::vector<float> vf,
                        std::vector<float> gf, std::vector<float> o, std::vector<float> lse) {
  AttentionCapture c;
  c.step = req.step;
  c.layer_index = layer;
  c.layer = "layer " + std::to_string(layer);
  c.policy = spec.policy();
  c.fix = spec.fix_json();
  c.causal = spec.config.causal;
  c.scale = 1.0 / std::sqrt(double(q.size(3)));
  c.source_dtype = q.scalar_type() == torch::kBFloat16 ? "bfloat16" : "float32";
  c.B = q.size(0), c.H = q.size(1), c.N = q.size(2), c.d = q.size(3);
  c.q = std::move(qf), c.k = std::move(kf), c.v = std::move(vf), c.dout = std::move(gf);
  c.o = std::move(o);
  c.lse = std::move(lse);
  write_capture(req.path, c);
  CaptureBoard::instance().done(req.layer, req.path);
}

torch::Tensor no_tensor(const torch::Tensor& like) { return torch::empty({0}, like.options().dtype(torch::kFloat32)); }

}  // namespace

// The forward kernel (CPU and CUDA keys): O, L (CUDA; size 0 on the CPU, whose backward
// recomputes) and, at "full" on CUDA, O_lp - O_hp (else size 0). O on CUDA is in q's layout.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_fwd(const torch::Tensor& q, const torch::Tensor& k,
                                                                      const torch::Tensor& v, c10::string_view spec_json,
                                                                      int64_t layer_index) {
  check_tensor(q, "q", q);
  check_tensor(k, "k", q);
  check_tensor(v, "v", q);
  const AttentionSpec spec = make_spec(spec_json);
  check_scale(spec, q);
  const AttentionConfig& cfg = spec.config;
  if (layer_index >= 0) CounterSink::instance().report_spec(layer_index, spec.to_json());  // what ran, for the trace
#ifdef LPDIAG_HOOKS_CUDA
  if (q.is_cuda()) {
    FlashForwardTensors f = cuda_attention_forward(q, k, v, spec, spec.level == Level::off ? -1 : layer_index);
    return {f.o, f.lse, f.residual.defined() ? f.residual : no_tensor(q)};
  }
#endif
  const auto qf = to_floats(q), kf = to_floats(k), vf = to_floats(v);
  AttentionOptions opt;
  opt.backward = false;
  opt.instrument = spec.level == Level::full;
  opt.threads = at::get_num_threads();
  const AttentionRun run = run_attention(cfg, inputs(qf, kf, vf, nullptr, q), opt);
  if (spec.level != Level::off && layer_index >= 0) {
    std::vector<HeadCounters> heads = run.heads;
    for (auto& h : heads) {
      // Errors are the backward's (delta) or "full" mode's (O) to report; zero means "none here".
      if (!opt.instrument) h.o_err_count = h.o_err_pos = h.o_err_neg = 0, h.o_err_sum = h.o_err_sumsq = 0;
      h.delta_err_count = h.delta_err_pos = h.delta_err_neg = 0, h.delta_err_sum = h.delta_err_sumsq = 0;
    }
    CounterSink::instance().add(layer_index, heads);
  }
  return {from_floats(run.o, q), no_tensor(q), no_tensor(q)};
}

// The backward kernel (CPU and CUDA keys): dQ, dK, dV in q's, k's, v's dtype (CUDA: layout).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_bwd(const torch::Tensor& dout, const torch::Tensor& q,
                                                                      const torch::Tensor& k, const torch::Tensor& v,
                                                                      const torch::Tensor& o, const torch::Tensor& lse,
                                                                      const torch::Tensor& residual, c10::string_view spec_json,
                                                                      int64_t layer) {
  const AttentionSpec spec = make_spec(spec_json);
  const AttentionConfig& cfg = spec.config;
  torch::Tensor g = dout.to(q.scalar_type());  // dO arrives in the output's dtype
#ifdef LPDIAG_HOOKS_CUDA
  if (q.is_cuda()) {
    const torch::Tensor res = residual.numel() ? residual : torch::Tensor();
    auto d = cuda_attention_backward(q, k, v, {o, lse, res}, g, spec, layer);
    CaptureRequest req;
    if (layer >= 0 && CaptureBoard::instance().take(layer, req))
      write_capture_file(req, layer, spec, q, to_floats(q), to_floats(k), to_floats(v), to_floats(g), to_floats(o),
                         to_floats(lse));
    return {d[0], d[1], d[2]};
  }
#endif
  const auto qf = to_floats(q), kf = to_floats(k), vf = to_floats(v), gf = to_floats(g);
  AttentionOptions opt;
  opt.backward = true;
  opt.instrument = spec.level == Level::full;
  opt.threads = at::get_num_threads();
  const AttentionRun run = run_attention(cfg, inputs(qf, kf, vf, &gf, q), opt);
  if (spec.level == Level::full && layer >= 0) {
    // The forward already reported the forward counters; add only what needs dO.
    std::vector<HeadCounters> d(run.heads.size());
    for (std::size_t h = 0; h < d.size(); ++h) {
      d[h].logit_max = -INFINITY;
      d[h].delta_err_count = run.heads[h].delta_err_count;
      d[h].delta_err_pos = run.heads[h].delta_err_pos;
      d[h].delta_err_neg = run.heads[h].delta_err_neg;
      d[h].delta_err_sum = run.heads[h].delta_err_sum;
      d[h].delta_err_sumsq = run.heads[h].delta_err_sumsq;
    }
    CounterSink::instance().add(layer, d);
  }
  CaptureRequest req;
  if (layer >= 0 && CaptureBoard::instance().take(layer, req))
    write_capture_file(req, layer, spec, q, qf, kf, vf, gf, run.o, run.lse);
  return {from_floats(run.dq, q), from_floats(run.dk, k), from_floats(run.dv, v)};
}

namespace {

using FwdSig = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(const torch::Tensor&, const torch::Tensor&,
                                                                      const torch::Tensor&, c10::string_view, int64_t);
using BwdSig = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
    const torch::Tensor&, const torch::Tensor&, c10::string_view, int64_t);

// lpdiag::attention's autograd: the forward and backward kernels through the dispatcher (below
// autograd), so that fake-tensor tracing (torch.compile) reaches their fake implementations
// (python/lpdiag/compile_support.py) instead of this code touching data.
class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const std::string& spec, int64_t layer_index) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("lpdiag::attention_fwd", "").typed<FwdSig>();
    // A layer the guard switched runs under the guard's spec, its backward too.
    const std::string run = GuardBoard::instance().resolve(layer_index, spec);
    ctx->saved_data["spec"] = run;
    ctx->saved_data["layer"] = layer_index;
    at::AutoDispatchBelowADInplaceOrView below;
    auto [o, lse, residual] = op.call(q, k, v, run, layer_index);
    ctx->save_for_backward({q, k, v, o, lse, residual});
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("lpdiag::attention_bwd", "").typed<BwdSig>();
    const auto saved = ctx->get_saved_variables();
    const std::string spec = ctx->saved_data["spec"].toStringRef();
    auto [dq, dk, dv] = op.call(grads[0], saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], spec,
                                ctx->saved_data["layer"].toInt());
    return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
  }
};

// A layer the guard switched to fp32, on the GPU: PyTorch's own fp32 attention of the same
// inputs, with autograd, returned in q's dtype. lpdiag's fp32 CUDA kernels are the counters'
// CUDA-core reference and far too slow for a training step (on the H100, one GPT-2-small layer in
// them took the step from 72.8 to 137 ms). The guarded layer's counters stop at the switch, which
// the trace's guard_switch event records. Empty where the call is not a GPU layer guarded to fp32.
std::optional<torch::Tensor> guarded_fp32_on_gpu(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                 const std::string& spec, int64_t layer_index) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  if (!q.defined() || !q.is_cuda() || layer_index < 0) return std::nullopt;
  const std::string run = GuardBoard::instance().resolve(layer_index, spec);
  if (run == spec) return std::nullopt;
  const AttentionSpec s = attention_spec_from_json(run);
  if (s.policy() != "fp32") return std::nullopt;
  check_tensor(q, "q", q), check_tensor(k, "k", q), check_tensor(v, "v", q);
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // fp32 stays fp32
  const double scale = s.config.scale > 0 ? s.config.scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const torch::Tensor o = at::scaled_dot_product_attention(q.to(torch::kFloat32), k.to(torch::kFloat32), v.to(torch::kFloat32), {},
                                                           0.0, s.config.causal, scale);
  return o.to(q.scalar_type());
#else
  (void)q, (void)k, (void)v, (void)spec, (void)layer_index;
  return std::nullopt;  // LibTorch before 2.1 has no SDPA with a scale: the guarded layer runs lpdiag's fp32 kernels
#endif
}

torch::Tensor apply_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const std::string& spec,
                              int64_t layer_index) {
  if (auto o = guarded_fp32_on_gpu(q, k, v, spec, layer_index)) return *o;
  return AttentionFunction::apply(q, k, v, spec, layer_index);
}

}  // namespace

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const AttentionSpec& spec,
                        int64_t layer_index) {
  return apply_attention(q, k, v, spec.to_json(), layer_index);
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                        const std::string& policy, const std::string& fix, const std::string& level, int64_t layer_index) {
  AttentionSpec spec;
  try {
    spec = parse_attention_spec(policy, fix, level, causal);
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag::attention: ", e.what());
  }
  return attention(q, k, v, spec, layer_index);
}

torch::Tensor attention_autograd(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, c10::string_view spec,
                                 int64_t layer_index) {
  return apply_attention(q, k, v, std::string(spec), layer_index);
}

}  // namespace lpdiag::hooks
