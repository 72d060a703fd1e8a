#include "change_point.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "series_tools.hpp"

namespace lpdiag::analysis::cp {
namespace {

// Least squares of x on the columns 1, b (with `drift`) and g(b) (with `with_g`) over the finite
// bins. coef = {intercept, drift slope, g coefficient}, 0 for a column left out; returns the SSE.
template <class G>
double lsq3(const std::vector<double>& x, G g, bool with_g, double coef[3], bool drift = true) {
  int cols[3], k = 0;  // which of (1, b, g) are in the model
  cols[k++] = 0;
  if (drift) cols[k++] = 1;
  if (with_g) cols[k++] = 2;
  auto value = [&](int col, int b) { return col == 0 ? 1.0 : col == 1 ? double(b) : g(b); };
  double a[3][4] = {};
  int n = 0;
  for (int b = 0; b < static_cast<int>(x.size()); ++b) {
    if (!std::isfinite(x[b])) continue;
    double v[3];
    for (int i = 0; i < k; ++i) v[i] = value(cols[i], b);
    for (int i = 0; i < k; ++i) {
      a[i][k] += v[i] * x[b];
      for (int j = 0; j < k; ++j) a[i][j] += v[i] * v[j];
    }
    ++n;
  }
  coef[0] = coef[1] = coef[2] = 0;
  if (n < k) return INFINITY;
  // Gauss-Jordan with partial pivoting on the k x k system (k <= 3).
  for (int c = 0; c < k; ++c) {
    int p = c;
    for (int i = c + 1; i < k; ++i)
      if (std::fabs(a[i][c]) > std::fabs(a[p][c])) p = i;
    if (std::fabs(a[p][c]) < 1e-12) return INFINITY;
    for (int j = 0; j <= k; ++j) std::swap(a[c][j], a[p][j]);
    for (int i = 0; i < k; ++i) {
      if (i == c) continue;
      const double f = a[i][c] / a[c][c];
      for (int j = c; j <= k; ++j) a[i][j] -= f * a[c][j];
    }
  }
  for (int i = 0; i < k; ++i) coef[cols[i]] = a[i][k] / a[i][i];
  double sse = 0;
  for (int b = 0; b < static_cast<int>(x.size()); ++b) {
    if (!std::isfinite(x[b])) continue;
    const double e = x[b] - coef[0] - coef[1] * b - (with_g ? coef[2] * g(b) : 0.0);
    sse += e * e;
  }
  return sse;
}

// tau on a coarse grid, then every bin around the best.
template <class Basis>
Fit best_fit(const std::vector<double>& x, int min_pre, int min_post, Basis basis, bool drift = true, double sign = 0) {
  Fit best;
  const int K = static_cast<int>(x.size());
  std::vector<int> before(static_cast<std::size_t>(K) + 1, 0);  // finite bins in [0, b)
  for (int b = 0; b < K; ++b) before[b + 1] = before[b] + (std::isfinite(x[b]) ? 1 : 0);
  best.n = before[K];
  double c0[3];
  best.sse_null = lsq3(x, [](int) { return 0.0; }, false, c0, drift);
  best.sse = INFINITY;
  auto at = [&](int tau) {
    if (tau < 1 || tau >= K || before[tau] < min_pre || best.n - before[tau] < min_post) return;
    double c[3];
    const double sse = lsq3(x, [&](int b) { return basis(b, tau); }, true, c, drift);
    if (sign != 0 && !(c[2] * sign > 0)) return;  // a change in the other direction is no rise
    if (sse < best.sse) {
      best.ok = true, best.tau = tau, best.a = c[0], best.s = c[1], best.change = c[2], best.sse = sse;
    }
  };
  const int stride = std::max(1, K / 128);
  for (int tau = 1; tau < K; tau += stride) at(tau);
  if (best.ok && stride > 1) {
    const int c = best.tau;
    for (int tau = c - stride; tau <= c + stride; ++tau) at(tau);
  }
  return best;
}

}  // namespace

std::vector<double> running_median(const std::vector<double>& x, int w) {
  const int K = static_cast<int>(x.size());
  std::vector<double> out(x.size(), tools::nan());
  for (int b = 0; b < K; ++b) {
    if (!std::isfinite(x[b])) continue;
    out[b] = tools::median(tools::finite_values(x, b - w, b + w + 1));
  }
  return out;
}

double diff_noise_sd(const std::vector<double>& x) {
  std::vector<double> d;
  double prev = tools::nan();
  for (double v : x) {
    if (!std::isfinite(v)) continue;
    if (std::isfinite(prev)) d.push_back(v - prev);
    prev = v;
  }
  if (d.size() < 3) return 0.0;
  return tools::robust_sd(d) / std::sqrt(2.0);
}

Fit fit_ramp(const std::vector<double>& x, int min_pre, int min_post, bool drift, double sign) {
  const int K = static_cast<int>(x.size());
  Fit best = best_fit(x, min_pre, min_post, [](int b, int tau) { return b >= tau ? 1.0 : 0.0; }, drift, sign);
  for (int w : {K / 50, K / 20, K / 10, K / 5, K / 3}) {
    if (w < 2) continue;
    Fit f = best_fit(x, min_pre, min_post, [w](int b, int tau) { return b < tau ? 0.0 : std::min(1.0, double(b - tau) / w); }, drift, sign);
    f.width = w;
    if (f.ok && (!best.ok || f.sse < best.sse)) best = f;
  }
  Fit h = best_fit(x, min_pre, min_post, [](int b, int tau) { return b >= tau ? double(b - tau) : 0.0; }, drift, sign);
  h.width = -1;
  // A hinge must beat the ramps clearly: growth that levels off is a ramp.
  if (h.ok && (!best.ok || h.sse < 0.9 * best.sse)) best = h;
  return best;
}

double effect_at(const Fit& f, int b) {
  if (b < f.tau) return 0.0;
  if (f.width < 0) return f.change * (b - f.tau);
  if (f.width == 0) return f.change;
  return f.change * std::min(1.0, double(b - f.tau) / f.width);
}

double step_effect(const Fit& f) { return f.width < 0 ? f.change * std::max(0, f.n - 1 - f.tau) : f.change; }


int walk_back_onset(const std::vector<double>& x, const Fit& f, double margin, double sign) {
  if (!f.ok) return -1;
  int onset = f.tau;
  for (int b = f.tau - 1; b >= 0; --b) {
    if (!std::isfinite(x[b])) continue;
    if (sign * (x[b] - f.a - f.s * b) < margin) break;
    onset = b;
  }
  return onset;
}

Rise sustained_rise(const std::vector<double>& x, double noise_sds, double min_change) {
  Rise r;
  const int K = static_cast<int>(x.size());
  if (tools::finite_values(x, 0, K).size() < 6) return r;
  const int smooth = std::max(1, K / 200), min_post = std::max(3, K / 25);
  const auto xs = running_median(x, smooth);
  const Fit f = fit_ramp(xs, 2, min_post, false, +1);
  if (!f.ok) return r;
  r.noise = diff_noise_sd(x);
  r.margin = std::max(noise_sds * r.noise, min_change);
  r.d = step_effect(f);
  if (!(r.d > r.margin)) return r;
  int n = 0, up = 0;
  for (int b = std::min(f.tau + std::max(0, f.width), std::max(f.tau, K - min_post)); b < K; ++b)
    if (std::isfinite(xs[b])) ++n, up += xs[b] - f.a - f.s * b > effect_at(f, b) / 2;
  if (n == 0 || up < 0.7 * n) return r;
  r.onset = walk_back_onset(xs, f, std::max(3 * r.noise / std::sqrt(2.0 * smooth + 1), r.d / 10), +1);
  r.before = f.a + f.s * r.onset;
  r.after = tools::mean_of(x, f.tau, K);
  r.ok = true;
  return r;
}

}  // namespace lpdiag::analysis::cp
