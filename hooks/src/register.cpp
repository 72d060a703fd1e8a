// The operator and the Monitor class, registered once for C++ and Python.
#include <torch/custom_class.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "lpdiag/attention/attention_spec.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/hooks/attention_op.hpp"
#include "lpdiag/hooks/monitor.hpp"
#include "lpdiag/hooks/observer.hpp"
#include "probe_ops.hpp"

namespace {
// The spec's one serialized form from its text forms (policy, fix, level), or an error naming the bad part.
std::string attention_spec_op(c10::string_view policy, c10::string_view fix, c10::string_view level, bool causal, double scale) {
  try {
    return lpdiag::parse_attention_spec(std::string(policy), std::string(fix), std::string(level), causal, scale).to_json();
  } catch (const lpdiag::Error& e) {
    TORCH_CHECK(false, "lpdiag::attention_spec: ", e.what());
  }
  return {};
}

// The observer's entries as ops: string arguments arrive as views.
torch::Tensor observe_forward_op(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o,
                                 bool causal, double scale, int64_t layer, c10::string_view name, int64_t max_rows, int64_t head_mask) {
  return lpdiag::hooks::observe_forward(q, k, v, o, causal, scale, layer, std::string(name), max_rows, head_mask);
}
std::vector<std::string> observer_skips_op() {
  std::vector<std::string> out;
  for (const auto& [why, n] : lpdiag::hooks::observer_skips()) out.push_back(std::to_string(n) + " " + why);
  return out;
}

torch::Tensor scalar_argument(const c10::IValue& v, const char* name) {
  if (v.isTensor()) return v.toTensor();
  TORCH_CHECK(v.isDouble() || v.isInt(), "lpdiag.Monitor.record: ", name, " must be a float or a scalar tensor, got ",
              v.tagKind());
  return torch::scalar_tensor(v.isDouble() ? v.to<double>() : static_cast<double>(v.to<int64_t>()), torch::kFloat64);
}
}  // namespace

TORCH_LIBRARY(lpdiag, m) {
  // The attention spec crosses this edge in one serialized form, AttentionSpec's JSON
  // ({"policy", "fix", "level", "causal", "scale"}; attention_spec gives it from the text forms).
  m.def("attention(Tensor q, Tensor k, Tensor v, str spec, int layer_index=-1) -> Tensor");
  m.def("attention_fwd(Tensor q, Tensor k, Tensor v, str spec, int layer_index) -> (Tensor, Tensor, Tensor)");
  m.def("attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor residual, str spec, "
        "int layer_index) -> (Tensor, Tensor, Tensor)");
  m.def("attention_spec(str policy='fa2', str fix='none', str level='counters', bool causal=False, float scale=0.0) -> str",
        &attention_spec_op);
  // The observer: reads a call's q, k, v, O (and dO) and writes nothing of the caller's.
  m.def("observe_forward(Tensor q, Tensor k, Tensor v, Tensor o, bool causal, float scale, int layer_index, str name, "
        "int max_rows, int head_mask) -> Tensor",
        &observe_forward_op);
  m.def("observe_backward(Tensor dout, Tensor o_error, int layer_index, int head_mask) -> ()", &lpdiag::hooks::observe_backward);
  m.def("observer_skips() -> str[]", &observer_skips_op);
  m.def("observe_stats(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, bool causal, float scale) -> Tensor",
        &lpdiag::hooks::observe_stats);
  m.def("observe_stat_columns() -> str", [] { return std::string(lpdiag::hooks::kObservedStatColumns); });
  m.def("probe_families() -> str[]", &lpdiag::hooks::probe_families);
  m.def("alarm_thresholds() -> str[]", &lpdiag::alarm::alarm_preset_names);
  m.def("probe_case(str family, bool causal, int seed=0) -> (Tensor, Tensor, Tensor, Tensor, str)", &lpdiag::hooks::probe_case);
  m.def("judge_outputs(Tensor q, Tensor k, Tensor v, Tensor dout, bool causal, Tensor[] outputs, str[] names, "
        "Tensor[] grads) -> str",
        &lpdiag::hooks::judge_outputs);
  using lpdiag::hooks::Monitor;
  m.class_<Monitor>("Monitor")
      .def(torch::init<std::string, int64_t, int64_t, int64_t, std::string, int64_t, int64_t, bool>())
      .def("add_matrix", &Monitor::add_matrix)
      .def("add_fused_qkv", &Monitor::add_fused_qkv)
      .def("add_activation", &Monitor::add_activation)
      .def("observe_activation", &Monitor::observe_activation)
      .def("set_cadence", &Monitor::set_cadence)
      .def("set_flush_every", &Monitor::set_flush_every)
      .def("set_compression", &Monitor::set_compression)
      .def("set_stop_on_nan", &Monitor::set_stop_on_nan)
      .def("set_cuda_graphs", &Monitor::set_cuda_graphs)
      .def("set_attention_numerics", &Monitor::set_attention_numerics)
      .def("set_capture_trigger", &Monitor::set_capture_trigger)
      .def("request_capture", &Monitor::request_capture)
      .def("set_start_step", &Monitor::set_start_step)
      .def("set_observe_every", &Monitor::set_observe_every)
      // loss and grad_norm: Python floats, or scalar tensors that may stay on the device.
      .def("record",
           [](const c10::intrusive_ptr<Monitor>& self, int64_t step, const c10::IValue& loss, double lr,
              const c10::IValue& grad_norm) {
             return self->record(step, scalar_argument(loss, "loss"), lr, scalar_argument(grad_norm, "grad_norm"));
           })
      .def("close", &Monitor::close)
      .def("trace_path", &Monitor::trace_path)
      .def("trace_error", &Monitor::trace_error)
      .def("layer_base", &Monitor::layer_base)
      .def("records", &Monitor::records)
      .def("host_cost_json", &Monitor::host_cost_json)
      .def("set_alarm", &Monitor::set_alarm)
      .def("set_alarm_thresholds", &Monitor::set_alarm_thresholds)
      .def("set_guard", &Monitor::set_guard)
      .def("alarms_json", &Monitor::alarms_json)
      .def("alarm_count", &Monitor::alarm_count)
      .def("readings_json", &Monitor::readings_json)
      .def("guarded_layers", &Monitor::guarded_layers)
      .def("guard_layer", &Monitor::guard_layer);
}

// lpdiag::attention: autograd over the forward and backward kernels; those run on the CPU (the
// engine) and on CUDA (the kernels). Without autograd (inference below the autograd key, as a
// compiled graph calls it) attention is its forward kernel's O.
namespace {
torch::Tensor attention_below_autograd(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, c10::string_view spec,
                                       int64_t layer_index) {
  return std::get<0>(lpdiag::hooks::attention_fwd(q, k, v, spec, layer_index));
}
}  // namespace

TORCH_LIBRARY_IMPL(lpdiag, Autograd, m) { m.impl("attention", &lpdiag::hooks::attention_autograd); }
TORCH_LIBRARY_IMPL(lpdiag, CPU, m) {
  m.impl("attention", &attention_below_autograd);
  m.impl("attention_fwd", &lpdiag::hooks::attention_fwd);
  m.impl("attention_bwd", &lpdiag::hooks::attention_bwd);
}
#ifdef LPDIAG_HOOKS_CUDA
TORCH_LIBRARY_IMPL(lpdiag, CUDA, m) {
  m.impl("attention", &attention_below_autograd);
  m.impl("attention_fwd", &lpdiag::hooks::attention_fwd);
  m.impl("attention_bwd", &lpdiag::hooks::attention_bwd);
}
#endif
