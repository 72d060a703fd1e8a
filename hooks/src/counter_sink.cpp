#include "lpdiag/hooks/counter_sink.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "pending_counters.hpp"

namespace lpdiag::hooks {

CounterSink& CounterSink::instance() {
  static CounterSink s;
  return s;
}

void CounterSink::add(std::int64_t layer, const std::vector<HeadCounters>& heads) {
  std::lock_guard<std::mutex> lock(mu_);
  add_heads(pending_[layer], heads);
}

std::map<std::int64_t, std::vector<HeadCounters>> CounterSink::drain() {
  // Calls on CUDA keep their counters on the device; copied now, they join the host ones.
  return PendingCounters::take(nullptr).resolve({});
}

std::map<std::int64_t, std::vector<HeadCounters>> CounterSink::drain_host() {
  std::lock_guard<std::mutex> lock(mu_);
  auto out = std::move(pending_);
  pending_.clear();
  return out;
}

std::map<std::int64_t, std::vector<HeadCounters>> CounterSink::drain_host(std::int64_t lo, std::int64_t hi) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::int64_t, std::vector<HeadCounters>> out;
  for (auto it = pending_.lower_bound(lo); it != pending_.end() && it->first < hi;) {
    out.insert(*it);
    it = pending_.erase(it);
  }
  return out;
}

std::vector<std::int64_t> CounterSink::drain_orphans() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::int64_t> out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (layer_has_session(it->first)) {
      ++it;
      continue;
    }
    out.push_back(it->first);
    it = pending_.erase(it);
  }
  return out;
}

void CounterSink::report_spec(std::int64_t layer, const std::string& json) {
  std::lock_guard<std::mutex> lock(mu_);
  Spec& s = specs_[layer];
  if (s.json == json) return;
  s.json = json;
  const auto j = nlohmann::json::parse(json, nullptr, false);
  s.policy = j.is_object() && j.contains("policy") && j["policy"].is_string() ? j["policy"].get<std::string>() : std::string("unknown");
  s.fix_json = j.is_object() && j.contains("fix") ? (j["fix"].is_string() ? j["fix"].get<std::string>() : j["fix"].dump())
                                                   : std::string(R"({"kind":"none"})");
}

bool CounterSink::reported_spec(std::int64_t layer, Spec& out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = specs_.find(layer);
  if (it == specs_.end()) return false;
  out = it->second;
  return true;
}

void CounterSink::report_skip(std::int64_t layer, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  skips_.emplace_back(layer, reason);
}

std::vector<std::pair<std::int64_t, std::string>> CounterSink::drain_skips(std::int64_t lo, std::int64_t hi) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::int64_t, std::string>> out, keep;
  for (auto& s : skips_) (s.first >= lo && s.first < hi ? out : keep).push_back(std::move(s));
  skips_ = std::move(keep);
  return out;
}

void CounterSink::clear_range(std::int64_t lo, std::int64_t hi) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(pending_.lower_bound(lo), pending_.lower_bound(hi));
  specs_.erase(specs_.lower_bound(lo), specs_.lower_bound(hi));
}

namespace {
struct Sessions {
  std::mutex mu;
  std::set<std::int64_t> held;
};
Sessions& sessions() {
  static Sessions s;
  return s;
}
}  // namespace

std::int64_t acquire_session() {
  std::lock_guard<std::mutex> lock(sessions().mu);
  std::int64_t base = 0;
  while (sessions().held.count(base)) base += kSessionLayers;
  sessions().held.insert(base);
  CounterSink::instance().clear_range(base, base + kSessionLayers);
  return base;
}

void release_session(std::int64_t base) {
  std::lock_guard<std::mutex> lock(sessions().mu);
  sessions().held.erase(base);
}

bool layer_has_session(std::int64_t layer) {
  if (layer < 0) return false;
  std::lock_guard<std::mutex> lock(sessions().mu);
  return sessions().held.count(layer / kSessionLayers * kSessionLayers) > 0;
}

CaptureBoard& CaptureBoard::instance() {
  static CaptureBoard b;
  return b;
}

void CaptureBoard::request(const CaptureRequest& r) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_[r.layer] = r;
}

namespace {
std::int64_t session_of(std::int64_t layer) { return layer < 0 ? -1 : layer / kSessionLayers * kSessionLayers; }
}  // namespace

bool CaptureBoard::take(std::int64_t layer, CaptureRequest& out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(layer);
  if (it == pending_.end()) return false;
  const auto st = step_.find(session_of(layer));
  const std::int64_t step = st == step_.end() ? -1 : st->second;
  if (step >= 0 && it->second.step >= 0 && it->second.step != step) {
    if (it->second.step > step) return false;  // not yet
    std::fprintf(stderr, "lpdiag: capture of layer %lld at step %lld dropped: that step has already run (now at step %lld)\n",
                 (long long)layer, (long long)it->second.step, (long long)step);
    pending_.erase(it);
    return false;
  }
  out = it->second;
  pending_.erase(it);
  return true;
}

void CaptureBoard::set_step(std::int64_t session, std::int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_[session] = step;
}

void CaptureBoard::done(std::int64_t layer, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  done_[session_of(layer)].push_back(path);
}

std::vector<std::string> CaptureBoard::drain_done(std::int64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = done_.find(session);
  if (it == done_.end()) return {};
  auto out = std::move(it->second);
  done_.erase(it);
  return out;
}

void CaptureBoard::forget(std::int64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  step_.erase(session);
  done_.erase(session);
  for (auto it = pending_.begin(); it != pending_.end();) it = session_of(it->first) == session ? pending_.erase(it) : std::next(it);
}

}  // namespace lpdiag::hooks
