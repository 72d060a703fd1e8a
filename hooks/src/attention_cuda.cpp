#include "attention_cuda.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAStream.h>

#include <cstring>
#include <mutex>

#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::hooks {
namespace {

// Per layer: H DeviceHeadCounters in a uint8 tensor on the layer's device, and whether a kernel
// was given it since the last copy. A record copies and zeroes only the slots written since: an
// observer that looks every 50 steps costs the 49 others no copy (each copy and zeroing is a few
// launches per layer, 0.17 ms of record()'s host time per step at GPT-2 small's 12 layers on the
// H200). A slot handed out during a CUDA graph capture is written on every replay, unseen here:
// it is copied at every record from then on.
struct CounterSlot {
  torch::Tensor bytes;
  bool written = false, captured = false;
};
struct DeviceCounterBoard {
  std::mutex mu;
  std::map<std::int64_t, CounterSlot> slots;
};
DeviceCounterBoard& board() {
  static DeviceCounterBoard b;
  return b;
}

}  // namespace

lc::DeviceHeadCounters* device_counters_for(std::int64_t layer, std::int64_t H, const torch::Tensor& like, torch::Tensor& scratch) {
  const std::int64_t bytes = H * static_cast<std::int64_t>(sizeof(lc::DeviceHeadCounters));
  if (layer < 0) {  // nobody will read them: a scratch buffer for this call
    scratch = torch::zeros({bytes}, like.options().dtype(torch::kUInt8));
    return reinterpret_cast<lc::DeviceHeadCounters*>(scratch.data_ptr());
  }
  std::lock_guard<std::mutex> lock(board().mu);
  CounterSlot& slot = board().slots[layer];
  torch::Tensor& t = slot.bytes;
  if (!t.defined() || t.numel() != bytes || t.device() != like.device())
    t = torch::zeros({bytes}, like.options().dtype(torch::kUInt8));
  slot.written = true;
  if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) slot.captured = true;
  return reinterpret_cast<lc::DeviceHeadCounters*>(t.data_ptr());
}

namespace {

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
  try {
    lc::check_kernel_numerics(lc::kernel_numerics(cfg));
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag::attention: ", e.what());
  }
}

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

}  // namespace

FlashForwardTensors cuda_attention_forward(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in,
                                           const AttentionSpec& spec, int64_t layer) {
  const AttentionConfig& cfg = spec.config;
  check_cuda_args(q_in, cfg);
  const c10::cuda::CUDAGuard guard(q_in.device());
  const torch::Tensor q = kernel_layout(q_in), k = kernel_layout(k_in), v = kernel_layout(v_in);
  const lc::Instrument level = spec.level;
  FlashForwardTensors out = allocate_forward(q_in, level);  // O in the caller's layout, whatever kernel_layout copied
  torch::Tensor scratch;
  lc::DeviceHeadCounters* counters = level == lc::Instrument::off ? nullptr : device_counters_for(layer, q.size(1), q, scratch);
  try {
    lc::FlashForwardArgs a = forward_args(q, k, v, out, cfg.causal, cfg.fix, level, counters, stream());
    a.numerics = lc::kernel_numerics(cfg);
    lc::flash_forward(a);
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag::attention: ", e.what());
  }
  return out;
}

std::vector<torch::Tensor> cuda_attention_backward(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                   const torch::Tensor& v_in, const FlashForwardTensors& fwd,
                                                   const torch::Tensor& dout, const AttentionSpec& spec, int64_t layer) {
  const AttentionConfig& cfg = spec.config;
  const c10::cuda::CUDAGuard guard(q_in.device());
  const torch::Tensor q = kernel_layout(q_in), k = kernel_layout(k_in), v = kernel_layout(v_in);
  const torch::Tensor g = kernel_layout(dout.to(torch::kBFloat16));
  // Only "full" has backward work to report (the delta errors); other levels run the plain kernels.
  const lc::Instrument level = spec.level == Level::full ? Level::full : Level::off;
  const FlashBackwardTensors out = allocate_backward(q_in, k_in, v_in);
  torch::Tensor scratch;
  lc::DeviceHeadCounters* counters = level == lc::Instrument::full ? device_counters_for(layer, q.size(1), q, scratch) : nullptr;
  try {
    lc::FlashBackwardArgs a = backward_args(q, k, v, g, fwd, out, cfg.causal, level, counters, stream());
    a.numerics = lc::kernel_numerics(cfg);
    a.fix = cfg.fix;
    lc::flash_backward(a);
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag::attention (backward): ", e.what());
  }
  return {out.dq, out.dk, out.dv};
}

std::vector<DeviceCounterCopy> copy_device_counters(std::int64_t lo, std::int64_t hi) {
  std::lock_guard<std::mutex> lock(board().mu);
  std::map<std::string, DeviceCounterCopy> by_device;
  std::map<std::string, std::vector<torch::Tensor>> parts;
  for (auto& [layer, slot] : board().slots) {
    if (layer < lo || layer >= hi || !(slot.written || slot.captured)) continue;
    slot.written = false;
    const torch::Tensor& t = slot.bytes;
    const std::string dev = t.device().str();
    by_device[dev].layers.emplace_back(layer, t.numel() / static_cast<std::int64_t>(sizeof(lc::DeviceHeadCounters)));
    parts[dev].push_back(t);
  }
  std::vector<DeviceCounterCopy> out;
  for (auto& [dev, copy] : by_device) {
    const c10::cuda::CUDAGuard guard(parts[dev].front().device());
    copy.bytes = torch::cat(parts[dev]);  // a copy, on the current stream
    for (torch::Tensor& t : parts[dev]) t.zero_();
    out.push_back(std::move(copy));
  }
  return out;
}

std::map<std::int64_t, std::vector<HeadCounters>> decode_device_counters(
    const std::vector<std::pair<std::int64_t, std::int64_t>>& layers, const torch::Tensor& host_bytes) {
  std::int64_t total = 0;
  for (const auto& [layer, H] : layers) total += H;
  TORCH_CHECK(host_bytes.device().is_cpu() && host_bytes.scalar_type() == torch::kUInt8 &&
                  host_bytes.numel() == total * static_cast<std::int64_t>(sizeof(lc::DeviceHeadCounters)),
              "lpdiag: device counters arrived with ", host_bytes.numel(), " bytes for ", total, " heads");
  const torch::Tensor h = host_bytes.contiguous();
  const auto* bytes = h.data_ptr<std::uint8_t>();
  std::map<std::int64_t, std::vector<HeadCounters>> out;
  for (const auto& [layer, H] : layers) {
    std::vector<HeadCounters> heads;
    bool any = false;
    for (std::int64_t i = 0; i < H; ++i, bytes += sizeof(lc::DeviceHeadCounters)) {
      lc::DeviceHeadCounters raw;
      std::memcpy(&raw, bytes, sizeof raw);
      heads.push_back(lc::to_head_counters(raw));
      any = any || heads.back().rows > 0 || heads.back().delta_err_count > 0;
    }
    if (any) out[layer] = std::move(heads);
  }
  return out;
}

}  // namespace lpdiag::hooks
