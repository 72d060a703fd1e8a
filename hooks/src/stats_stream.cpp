#include "stats_stream.hpp"

#ifdef LPDIAG_HOOKS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lpdiag::hooks {

#ifdef LPDIAG_HOOKS_CUDA
namespace {

class CudaStatsStream final : public StatsStream {
 public:
  explicit CudaStatsStream(c10::DeviceIndex device) : device_(device), side_(c10::cuda::getStreamFromPool(false, device)) {}

  class CudaScope final : public Scope {
   public:
    explicit CudaScope(c10::cuda::CUDAStream side) : guard_(side) {}

   private:
    c10::cuda::CUDAStreamGuard guard_;
  };

  std::unique_ptr<Scope> enter() override {
    queued_.record(c10::cuda::getCurrentCUDAStream(device_));  // re-recording an event is allowed
    queued_.block(side_);
    return std::make_unique<CudaScope>(side_);
  }
  void keep(const torch::Tensor& t) override {
    if (t.defined() && t.is_cuda()) t.record_stream(side_);
  }
  void fetch(const std::vector<torch::Tensor>& parts) override {
    host_.clear();
    for (const torch::Tensor& p : parts) {
      host_.push_back(torch::empty(p.sizes(), p.options().device(torch::kCPU).pinned_memory(true)));
      host_.back().copy_(p, /*non_blocking=*/true);
    }
    done_.record(side_);
  }
  class CudaGraph final : public Graph {
   public:
    void replay() override { graph.replay(); }
    at::cuda::CUDAGraph graph;
  };
  std::unique_ptr<Graph> capture(const std::function<void()>& work) override {
    auto g = std::make_unique<CudaGraph>();
    const c10::cuda::CUDAStreamGuard guard(side_);  // capture needs a stream other than the default
    g->graph.capture_begin();
    try {
      work();
    } catch (...) {
      try {
        g->graph.capture_end();
      } catch (...) {
      }
      throw;
    }
    g->graph.capture_end();
    return g;
  }
  std::vector<torch::Tensor> wait() override {
    done_.synchronize();
    return host_;
  }
  bool ready() override { return done_.query(); }

 private:
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream side_;
  at::cuda::CUDAEvent queued_, done_;
  std::vector<torch::Tensor> host_;
};

}  // namespace
#endif

std::unique_ptr<StatsStream> StatsStream::for_device(const torch::Device& device) {
#ifdef LPDIAG_HOOKS_CUDA
  if (device.is_cuda()) return std::make_unique<CudaStatsStream>(device.index() < 0 ? c10::cuda::current_device() : device.index());
#else
  (void)device;
#endif
  return nullptr;
}

}  // namespace lpdiag::hooks
