#include "change_point.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "series_tools.hpp"

namespace lpdiag::analysis::cp {
namespace {

// Prefix sums over the finite bins of x (centred on its mean, which leaves every SSE as it is and
// keeps Sxx small against the fitted part): count, b, b^2, x, b x, x^2. Every candidate change is
// then solved in O(1) instead of two passes over the series (fit_ramp tries ~1,000 of them on each
// of ~150 series: this was 87% of `analyze`).
struct Moments {
  std::vector<double> n, b, bb, x, bx, xx;
  double mean = 0;
  explicit Moments(const std::vector<double>& v) {
    const std::size_t K = v.size();
    double sum = 0;
    int cnt = 0;
    for (double y : v)
      if (std::isfinite(y)) sum += y, ++cnt;
    mean = cnt ? sum / cnt : 0.0;
    for (auto* p : {&n, &b, &bb, &x, &bx, &xx}) p->assign(K + 1, 0.0);
    for (std::size_t i = 0; i < K; ++i) {
      const bool f = std::isfinite(v[i]);
      const double y = f ? v[i] - mean : 0.0, bi = f ? double(i) : 0.0;
      n[i + 1] = n[i] + (f ? 1 : 0), b[i + 1] = b[i] + bi, bb[i + 1] = bb[i] + bi * bi;
      x[i + 1] = x[i] + y, bx[i + 1] = bx[i] + bi * y, xx[i + 1] = xx[i] + y * y;
    }
  }
  int K() const { return static_cast<int>(n.size()) - 1; }
  static double range(const std::vector<double>& p, int lo, int hi) { return hi > lo ? p[hi] - p[lo] : 0.0; }
};

// The change regressor: 0 before tau, alpha (b - tau) on [tau, end), c from end on.
//   step: end = tau, c = 1;  ramp of w bins: end = tau + w, alpha = 1/w, c = 1;  hinge: end = K, alpha = 1.
struct Shape {
  int tau = 0, end = 0;
  double alpha = 0, c = 0;
};

// Least squares of x on the columns 1, b (with `drift`) and the shape (with `with_g`) over the
// finite bins. coef = {intercept, drift slope, shape coefficient}, 0 for a column left out (the
// intercept in x's own units); returns the SSE.
double lsq3(const Moments& m, const Shape* g, double coef[3], bool drift) {
  const int K = m.K();
  auto R = [&](const std::vector<double>& p, int lo, int hi) { return Moments::range(p, std::clamp(lo, 0, K), std::clamp(hi, 0, K)); };
  const double N = m.n[K], Sb = m.b[K], Sbb = m.bb[K], Sx = m.x[K], Sbx = m.bx[K], Sxx = m.xx[K];
  double Sg = 0, Sgb = 0, Sgg = 0, Sgx = 0;
  if (g) {
    const int t = g->tau, e = std::clamp(g->end, g->tau, K);
    const double a = g->alpha, c = g->c, tt = double(t);
    Sg = a * (R(m.b, t, e) - tt * R(m.n, t, e)) + c * R(m.n, e, K);
    Sgb = a * (R(m.bb, t, e) - tt * R(m.b, t, e)) + c * R(m.b, e, K);
    Sgg = a * a * (R(m.bb, t, e) - 2 * tt * R(m.b, t, e) + tt * tt * R(m.n, t, e)) + c * c * R(m.n, e, K);
    Sgx = a * (R(m.bx, t, e) - tt * R(m.x, t, e)) + c * R(m.x, e, K);
  }
  // Normal equations over the columns in the model, in the order (1, b, g).
  const double full[3][4] = {{N, Sb, Sg, Sx}, {Sb, Sbb, Sgb, Sbx}, {Sg, Sgb, Sgg, Sgx}};
  int cols[3], k = 0;
  cols[k++] = 0;
  if (drift) cols[k++] = 1;
  if (g) cols[k++] = 2;
  double a[3][4] = {};
  for (int i = 0; i < k; ++i) {
    for (int j = 0; j < k; ++j) a[i][j] = full[cols[i]][cols[j]];
    a[i][k] = full[cols[i]][3];
  }
  coef[0] = coef[1] = coef[2] = 0;
  if (N < k) return INFINITY;
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
  double fitted = 0;  // coef . rhs: the part of Sxx the model explains
  for (int i = 0; i < k; ++i) {
    coef[cols[i]] = a[i][k] / a[i][i];
    fitted += coef[cols[i]] * full[cols[i]][3];
  }
  coef[0] += m.mean;
  return std::max(0.0, Sxx - fitted);
}

// tau on a coarse grid, then every bin around the best. shape_at(tau) gives the regressor.
template <class ShapeAt>
Fit best_fit(const Moments& m, int min_pre, int min_post, ShapeAt shape_at, bool drift = true, double sign = 0) {
  Fit best;
  const int K = m.K();
  best.n = static_cast<int>(m.n[K]);
  best.bins = K;
  double c0[3];
  best.sse_null = lsq3(m, nullptr, c0, drift);
  best.sse = INFINITY;
  auto at = [&](int tau) {
    if (tau < 1 || tau >= K || m.n[tau] < min_pre || best.n - m.n[tau] < min_post) return;
    double c[3];
    const Shape g = shape_at(tau);
    const double sse = lsq3(m, &g, c, drift);
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
  const Moments m(x);
  Fit best = best_fit(m, min_pre, min_post, [](int tau) { return Shape{tau, tau, 0.0, 1.0}; }, drift, sign);
  for (int w : {K / 50, K / 20, K / 10, K / 5, K / 3}) {
    if (w < 2) continue;
    Fit f = best_fit(m, min_pre, min_post, [w](int tau) { return Shape{tau, tau + w, 1.0 / w, 1.0}; }, drift, sign);
    f.width = w;
    if (f.ok && (!best.ok || f.sse < best.sse)) best = f;
  }
  Fit h = best_fit(m, min_pre, min_post, [K](int tau) { return Shape{tau, K, 1.0, 0.0}; }, drift, sign);
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

// formerly a ramp's whole change counted, even one whose end lay past the data: a
// repeated-max rate that rose 0.001 over the last 6 bins before a NaN was fitted with a 29-bin ramp
// and reported as a step of 0.011 (gen2 seed 42041). A hinge counted bins with data (n), not bins.
double step_effect(const Fit& f) { return effect_at(f, f.bins - 1); }


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

int departure_within_ramp(const std::vector<double>& x, const Fit& f, double margin, double sign) {
  if (!f.ok || f.width <= 0) return f.tau;
  const int K = static_cast<int>(x.size());
  auto beyond = [&](int b) { return sign * (x[b] - f.a - f.s * b) >= margin; };
  for (int b = f.tau; b < std::min(K, f.tau + f.width); ++b) {
    if (!std::isfinite(x[b]) || !beyond(b)) continue;
    int next = b + 1;
    while (next < K && !std::isfinite(x[next])) ++next;
    if (next == K || beyond(next)) return b;
  }
  return f.tau;
}

int min_bins_after_change(int K) { return std::max(3, K / 25); }

Rise sustained_rise(const std::vector<double>& x, double noise_sds, double min_change, bool on_mean) {
  Rise r;
  const int K = static_cast<int>(x.size());
  if (tools::finite_values(x, 0, K).size() < 6) return r;
  const int smooth = std::max(1, K / 200), min_post = min_bins_after_change(K);
  const auto xs = running_median(x, smooth);
  const Fit f = fit_ramp(xs, 2, min_post, false, +1);
  if (!f.ok) return r;
  r.noise = diff_noise_sd(x);
  const double after = on_mean ? static_cast<double>(tools::finite_values(x, std::max(0, f.tau), K).size()) : 1.0;
  r.margin = std::max(noise_sds * r.noise / std::sqrt(std::max(1.0, after)), min_change);
  r.d = step_effect(f);
  // A step in the first bins: the smoothing window reaches across it, so the few smoothed bins
  // before it carry part of the step and the fitted level before it is too high (gen2 seed 31058:
  // a trigger at 1% of the run, 0.003 -> 0.040, fitted from 0.010). There the raw bins decide: the
  // median before the step against the median of the bins after it.
  double raw_before = tools::nan();
  if (f.width <= 0 && f.tau >= 1 && f.tau <= 2 * smooth + 1) {
    const auto pre = tools::finite_values(x, 0, f.tau), post = tools::finite_values(x, f.tau, std::min(K, f.tau + std::max(min_post, K / 10)));
    if (!pre.empty() && post.size() >= 3) {
      const double before = tools::median(pre), change = tools::median(post) - before;
      if (change > r.d) raw_before = before, r.d = change;
    }
  }
  if (!(r.d > r.margin)) return r;
  int n = 0, up = 0;
  for (int b = std::min(f.tau + std::max(0, f.width), std::max(f.tau, K - min_post)); b < K; ++b)
    if (std::isfinite(xs[b]))  // sustained: the later bins hold at least half the change
      ++n, up += std::isfinite(raw_before) ? xs[b] - raw_before > r.d / 2 : xs[b] - f.a - f.s * b > effect_at(f, b) / 2;
  if (n == 0 || up < 0.7 * n) return r;
  const double leave = std::max(3 * r.noise / std::sqrt(2.0 * smooth + 1), r.d / 10);
  r.onset = walk_back_onset(xs, f, leave, +1);
  if (r.onset == f.tau) r.onset = departure_within_ramp(xs, f, leave, +1);
  r.before = std::isfinite(raw_before) ? raw_before : f.a + f.s * r.onset;
  r.after = tools::mean_of(x, f.tau, K);
  r.ok = true;
  return r;
}

}  // namespace lpdiag::analysis::cp
