#include "record_fetch.hpp"

namespace lpdiag::hooks {

void RecordFetch::add(const torch::Tensor& t, const std::vector<double*>& d) {
  std::vector<Dst> to;
  for (double* p : d) to.push_back({p, nullptr});
  add(t, to);
}

void RecordFetch::add(const torch::Tensor& t, const std::vector<float*>& d) {
  std::vector<Dst> to;
  for (float* p : d) to.push_back({nullptr, p});
  add(t, to);
}

void RecordFetch::add(const torch::Tensor& t, const std::vector<Dst>& d) {
  values.push_back(t.detach().reshape({-1}));
  dst.insert(dst.end(), d.begin(), d.end());
}

std::vector<torch::Tensor> RecordFetch::parts() const {
  std::vector<torch::Tensor> p;
  if (!values.empty()) p.push_back(torch::cat(values).to(torch::kFloat64));
  if (counters.device_bytes.defined()) p.push_back(counters.device_bytes);
  return p;
}

std::size_t RecordFetch::parts_count() const {
  return (values.empty() ? 0 : 1) + (counters.device_bytes.defined() ? 1 : 0);
}

CountersByLayer RecordFetch::land(const std::vector<torch::Tensor>& host) {
  TORCH_CHECK(host.size() == parts_count(), "lpdiag.Monitor: ", host.size(), " parts arrived for ", parts_count());
  if (!values.empty()) {
    const torch::Tensor h = host.front().to(torch::kFloat64).contiguous();
    TORCH_CHECK(h.numel() == static_cast<int64_t>(dst.size()), "lpdiag.Monitor: ", h.numel(), " statistics for ", dst.size(),
                " fields");
    const double* a = h.data_ptr<double>();
    for (std::size_t i = 0; i < dst.size(); ++i) {
      if (dst[i].d) *dst[i].d = a[i] * dst[i].scale;
      else *dst[i].f = static_cast<float>(a[i] * dst[i].scale);
    }
  }
  return counters.resolve(counters.device_bytes.defined() ? host.back() : torch::Tensor());
}

CountersByLayer RecordFetch::land_in_line() {
  std::vector<torch::Tensor> host;
  for (const torch::Tensor& p : parts()) host.push_back(p.cpu());
  return land(host);
}

}  // namespace lpdiag::hooks
