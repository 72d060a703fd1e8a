// The Monitor's statistics beside training, on CUDA: a side stream that starts after the work the
// training loop queued so far, and a pinned host buffer the results land in without a sync.
// record() of step s queues the statistics and returns; record() of step s + 1 (or close())
// collects them, by then long finished. Tensors made on the training stream and read on the side
// stream are announced with keep(), so the caching allocator does not hand their memory out
// while the side stream still reads it. Without CUDA support, for_device() returns nullptr and
// the Monitor computes in line.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace lpdiag::hooks {

class StatsStream {
 public:
  virtual ~StatsStream() = default;
  // nullptr unless `device` is CUDA and this build has the CUDA path.
  static std::unique_ptr<StatsStream> for_device(const torch::Device& device);

  // While the returned object lives, work goes to the side stream, ordered after everything
  // queued on the training stream so far.
  class Scope {
   public:
    virtual ~Scope() = default;
  };
  virtual std::unique_ptr<Scope> enter() = 0;
  virtual void keep(const torch::Tensor& t) = 0;
  // Inside a scope: copy `parts` (device tensors) to pinned host memory, asynchronously.
  virtual void fetch(const std::vector<torch::Tensor>& parts) = 0;
  // Blocks until the last fetch() has landed; its host copies, in order, dtypes kept.
  virtual std::vector<torch::Tensor> wait() = 0;
  // Whether the last fetch() has landed (never blocks).
  virtual bool ready() = 0;

  // The kernels `work` launches, captured once (on the side stream, nothing runs) and replayed
  // on whatever stream is current. Tensors `work` reads must keep their addresses; what it
  // allocates lives in the graph's own memory and is rewritten by every replay.
  class Graph {
   public:
    virtual ~Graph() = default;
    virtual void replay() = 0;
  };
  virtual std::unique_ptr<Graph> capture(const std::function<void()>& work) = 0;
};

}  // namespace lpdiag::hooks
