// Binning in worker processes. A cold trace is read one chunk at a time, and a single reader
// waits for every chunk in turn; several readers keep several reads in flight. HDF5 is the
// serial build (not thread-safe), so the readers are forked processes. They inherit the
// parent's open, validated readers (copy-on-write; HDF5's sec2 driver reads with pread, so a
// shared descriptor has no shared offset), bin their share of the row ranges, copy their bins
// into shared memory and leave with _exit, closing nothing. The parent does not touch the
// files meanwhile; it shows progress, then adds the shares in worker order.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

#include "binning_steps.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::analysis::detail {
namespace {

static_assert(std::is_trivially_copyable_v<StepBin> && std::is_trivially_copyable_v<HeadBin> &&
              std::is_trivially_copyable_v<LayerBin>);
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "progress counters are shared between processes");

// The head of one worker's slot in the shared mapping; its bins follow.
struct SlotHeader {
  std::atomic<std::int64_t> rows_done{0};
  std::uint8_t has_head_sigma = 0, has_updates = 0, has_logits = 0;
  std::int64_t rates_above_one = 0, negative_norms = 0, other_impossible = 0;
  char message[1024] = {};
};

class SharedMapping {
 public:
  explicit SharedMapping(std::size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~SharedMapping() {
    if (base_) munmap(base_, bytes_);
  }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  char* get() const { return base_; }

 private:
  char* base_ = nullptr;
  std::size_t bytes_;
};

template <class T>
std::size_t bytes_of(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

std::size_t slot_bytes(const BinnedTrace& bt) {
  const std::size_t raw = sizeof(SlotHeader) + bytes_of(bt.steps) + bytes_of(bt.head_bins) + bytes_of(bt.layer_bins);
  return (raw + 63) / 64 * 64;
}

void save_bins(const BinnedTrace& part, char* slot) {
  auto* head = reinterpret_cast<SlotHeader*>(slot);
  head->has_head_sigma = part.has_head_sigma, head->has_updates = part.has_updates, head->has_logits = part.has_logits;
  head->rates_above_one = part.rates_above_one, head->negative_norms = part.negative_norms;
  head->other_impossible = part.other_impossible;
  char* p = slot + sizeof(SlotHeader);
  std::memcpy(p, part.steps.data(), bytes_of(part.steps)), p += bytes_of(part.steps);
  std::memcpy(p, part.head_bins.data(), bytes_of(part.head_bins)), p += bytes_of(part.head_bins);
  std::memcpy(p, part.layer_bins.data(), bytes_of(part.layer_bins));
}

void load_bins(const char* slot, BinnedTrace& part) {
  const auto* head = reinterpret_cast<const SlotHeader*>(slot);
  part.has_head_sigma = head->has_head_sigma, part.has_updates = head->has_updates, part.has_logits = head->has_logits;
  part.rates_above_one = head->rates_above_one, part.negative_norms = head->negative_norms;
  part.other_impossible = head->other_impossible;
  const char* p = slot + sizeof(SlotHeader);
  std::memcpy(part.steps.data(), p, bytes_of(part.steps)), p += bytes_of(part.steps);
  std::memcpy(part.head_bins.data(), p, bytes_of(part.head_bins)), p += bytes_of(part.head_bins);
  std::memcpy(part.layer_bins.data(), p, bytes_of(part.layer_bins));
}

// In the child: bin [begin, end) of the ranges, write the result or the error, never return.
[[noreturn]] void run_worker(const std::vector<TraceReader>& readers, const std::vector<RowRange>& ranges, std::size_t begin,
                             std::size_t end, BinnedTrace part, char* slot) {
  auto* head = reinterpret_cast<SlotHeader*>(slot);
  int code = 0;
  try {
    bin_ranges(readers, ranges, begin, end, part, [&](std::int64_t n) { head->rows_done.fetch_add(n, std::memory_order_relaxed); });
    save_bins(part, slot);
  } catch (const std::exception& e) {
    std::strncpy(head->message, e.what(), sizeof(head->message) - 1);
    code = 3;
  } catch (...) {
    std::strncpy(head->message, "unknown error in a binning worker", sizeof(head->message) - 1);
    code = 3;
  }
  _exit(code);  // no atexit handlers, no flushing the parent's stdio buffers a second time
}

}  // namespace

bool bin_in_workers(const std::vector<TraceReader>& readers, const std::vector<RowRange>& ranges, int workers, BinnedTrace& bt,
                    const Progress& progress) {
  const auto W = static_cast<std::size_t>(workers);
  const std::size_t slot = slot_bytes(bt);
  SharedMapping shared(W * slot);
  if (!shared.get()) return false;
  for (std::size_t w = 0; w < W; ++w) new (shared.get() + w * slot) SlotHeader();

  std::vector<pid_t> pids;
  const auto kill_all = [&] {
    for (pid_t p : pids) kill(p, SIGKILL);
    for (pid_t p : pids) waitpid(p, nullptr, 0);
  };
  for (std::size_t w = 0; w < W; ++w) {
    const std::size_t begin = ranges.size() * w / W, end = ranges.size() * (w + 1) / W;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      // A worker outliving a killed parent would read on for nothing.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(4);
    }
    if (pid == 0) run_worker(readers, ranges, begin, end, bt, shared.get() + w * slot);
    if (pid < 0) {
      kill_all();
      return false;
    }
    pids.push_back(pid);
  }

  std::vector<int> status(W, -1);
  std::size_t running = W;
  while (running > 0) {
    for (std::size_t w = 0; w < W; ++w) {
      if (status[w] != -1) continue;
      int st = 0;
      const pid_t r = waitpid(pids[w], &st, WNOHANG);
      if (r == pids[w] || (r < 0 && errno != EINTR)) status[w] = r == pids[w] ? st : 0x7f00, --running;
    }
    if (progress && bt.records > 0) {
      std::int64_t done = 0;
      for (std::size_t w = 0; w < W; ++w) done += reinterpret_cast<SlotHeader*>(shared.get() + w * slot)->rows_done.load();
      try {
        progress(double(done) / double(bt.records));
      } catch (...) {
        kill_all();
        throw;
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  for (std::size_t w = 0; w < W; ++w) {
    const auto* head = reinterpret_cast<const SlotHeader*>(shared.get() + w * slot);
    if (WIFEXITED(status[w]) && WEXITSTATUS(status[w]) == 0) continue;
    if (WIFEXITED(status[w]) && WEXITSTATUS(status[w]) == 3) throw InputError(head->message);
    throw Error("a trace-reading worker process died (" +
                (WIFSIGNALED(status[w]) ? "signal " + std::to_string(WTERMSIG(status[w])) : "status " + std::to_string(status[w])) +
                "); rerun with one worker to see the error in-process");
  }
  BinnedTrace part = bt;
  for (std::size_t w = 0; w < W; ++w) {
    load_bins(shared.get() + w * slot, part);
    merge_bins(bt, part);
  }
  return true;
}

}  // namespace lpdiag::analysis::detail
