#include "attention_cuda.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstring>
#include <mutex>

#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::hooks {
namespace {

// Per layer: H DeviceHeadCounters in a uint8 tensor on the layer's device.
struct DeviceCounterBoard {
  std::mutex mu;
  std::map<std::int64_t, torch::Tensor> slots;
};
DeviceCounterBoard& board() {
  static DeviceCounterBoard b;
  return b;
}

lc::DeviceHeadCounters* counters_for(std::int64_t layer, std::int64_t H, const torch::Tensor& like, torch::Tensor& scratch) {
  const std::int64_t bytes = H * static_cast<std::int64_t>(sizeof(lc::DeviceHeadCounters));
  if (layer < 0) {  // nobody will read them: a scratch buffer for this call
    scratch = torch::zeros({bytes}, like.options().dtype(torch::kUInt8));
    return reinterpret_cast<lc::DeviceHeadCounters*>(scratch.data_ptr());
  }
  std::lock_guard<std::mutex> lock(board().mu);
  torch::Tensor& t = board().slots[layer];
  if (!t.defined() || t.numel() != bytes || t.device() != like.device())
    t = torch::zeros({bytes}, like.options().dtype(torch::kUInt8));
  return reinterpret_cast<lc::DeviceHeadCounters*>(t.data_ptr());
}

// The kernels need d contiguous, 16-byte aligned rows: anything else is copied once.
torch::Tensor kernel_layout(const torch::Tensor& t) {
  const bool ok = t.stride(3) == 1 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 && t.stride(2) % 8 == 0 &&
                  reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
  return ok ? t : t.contiguous();
}

void check_cuda_args(const torch::Tensor& q, const AttentionConfig& cfg) {
  TORCH_CHECK(q.scalar_type() == torch::kBFloat16, "lpdiag::attention: q must be bfloat16 on CUDA, got ", q.scalar_type(),
              " (float32 is accepted on the CPU only)");
  TORCH_CHECK(q.size(3) == 64 || q.size(3) == 128, "lpdiag::attention: the CUDA kernels take head dim 64 or 128; q has ",
              q.size(3));
  TORCH_CHECK(cfg.policy == Policy::fa2, "lpdiag::attention: policy '", policy_name(cfg.policy),
              "' runs on the CPU only; the CUDA kernels implement fa2");
}

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

}  // namespace

FlashForwardTensors cuda_attention_forward(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in,
                                           const AttentionConfig& cfg, const std::string& instrument, int64_t layer) {
  check_cuda_args(q_in, cfg);
  const c10::cuda::CUDAGuard guard(q_in.device());
  const torch::Tensor q = kernel_layout(q_in), k = kernel_layout(k_in), v = kernel_layout(v_in);
  const lc::Instrument level = lc::parse_instrument(instrument.c_str());
  FlashForwardTensors out = allocate_forward(q, level);
  torch::Tensor scratch;
  lc::DeviceHeadCounters* counters = level == lc::Instrument::off ? nullptr : counters_for(layer, q.size(1), q, scratch);
  try {
    lc::flash_forward(forward_args(q, k, v, out, cfg.causal, cfg.fix, level, counters, stream()));
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag::attention: ", e.what());
  }
  return out;
}

std::vector<torch::Tensor> cuda_attention_backward(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                   const torch::Tensor& v_in, const FlashForwardTensors& fwd,
                                                   const torch::Tensor& dout, const AttentionConfig& cfg,
                                                   const std::string& instrument, int64_t layer) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  const torch::Tensor q = kernel_layout(q_in), k = kernel_layout(k_in), v = kernel_layout(v_in);
  const torch::Tensor g = kernel_layout(dout.to(torch::kBFloat16));
  // Only "full" has backward work to report (the delta errors); other levels run the plain kernels.
  const lc::Instrument level =
      lc::parse_instrument(instrument.c_str()) == lc::Instrument::full ? lc::Instrument::full : lc::Instrument::off;
  const FlashBackwardTensors out = allocate_backward(q);
  torch::Tensor scratch;
  lc::DeviceHeadCounters* counters = level == lc::Instrument::full ? counters_for(layer, q.size(1), q, scratch) : nullptr;
  try {
    lc::flash_backward(backward_args(q, k, v, g, fwd, out, cfg.causal, level, counters, stream()));
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag::attention (backward): ", e.what());
  }
  return {out.dq, out.dk, out.dv};
}

std::map<std::int64_t, std::vector<HeadCounters>> drain_device_counters() {
  std::lock_guard<std::mutex> lock(board().mu);
  std::map<std::int64_t, std::vector<HeadCounters>> out;
  // One device-to-host copy per device for all layers, then the slots are zeroed on the device.
  std::map<std::string, std::vector<std::int64_t>> by_device;
  for (auto& [layer, t] : board().slots) by_device[t.device().str()].push_back(layer);
  for (const auto& [dev, layers] : by_device) {
    std::vector<torch::Tensor> parts;
    for (std::int64_t l : layers) parts.push_back(board().slots[l]);
    const torch::Tensor host = torch::cat(parts).cpu();
    const auto* bytes = host.data_ptr<std::uint8_t>();
    for (std::int64_t l : layers) {
      torch::Tensor& t = board().slots[l];
      const std::int64_t H = t.numel() / static_cast<std::int64_t>(sizeof(lc::DeviceHeadCounters));
      std::vector<HeadCounters> heads;
      bool any = false;
      for (std::int64_t h = 0; h < H; ++h, bytes += sizeof(lc::DeviceHeadCounters)) {
        lc::DeviceHeadCounters raw;
        std::memcpy(&raw, bytes, sizeof raw);
        heads.push_back(lc::to_head_counters(raw));
        any = any || heads.back().rows > 0 || heads.back().delta_err_count > 0;
      }
      if (any) out[l] = std::move(heads);  // a layer with no call since the last drain stays unmeasured
      t.zero_();
    }
  }
  return out;
}

}  // namespace lpdiag::hooks
