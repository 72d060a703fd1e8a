#include "lpdiag/linalg/spectral.hpp"

#include <cmath>
#include <random>

#include "lpdiag/error.hpp"

namespace lpdiag {

SingularTriplet top_singular_triplet(const Eigen::Ref<const Matrix>& a,
                                     const PowerIterationOptions& opt, const Vector* warm_v) {
  if (a.rows() == 0 || a.cols() == 0) throw InvalidArgument("top_singular_triplet: empty matrix");
  if (!a.allFinite()) throw InvalidArgument("top_singular_triplet: matrix has NaN or Inf entries");
  SingularTriplet t;
  Vector v(a.cols());
  if (warm_v && warm_v->size() == a.cols() && warm_v->norm() > 0) {
    v = *warm_v;
  } else {
    std::mt19937_64 rng(opt.seed);
    std::normal_distribution<double> g;
    for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = g(rng);
  }
  v.normalize();
  Vector u(a.rows());
  for (int it = 1; it <= opt.max_iterations; ++it) {
    u.noalias() = a * v;
    const double su = u.norm();
    if (su == 0.0) {  // A v = 0: A is zero or v is in its null space
      t.sigma = 0.0;
      t.u = Vector::Zero(a.rows());
      t.v = v;
      t.iterations = it;
      t.converged = a.squaredNorm() == 0.0;
      return t;
    }
    u /= su;
    Vector w = a.transpose() * u;
    const double sigma = w.norm();
    t.residual = (w - sigma * v).norm() / sigma;
    v = w / sigma;
    t.sigma = sigma;
    t.iterations = it;
    if (t.residual < opt.tolerance) {
      t.converged = true;
      break;
    }
  }
  t.u = a * v;
  const double n = t.u.norm();
  if (n > 0) t.u /= n;
  t.v = v;
  return t;
}

double stable_rank(double frobenius, double sigma1) {
  if (sigma1 == 0.0) return std::nan("");
  return (frobenius * frobenius) / (sigma1 * sigma1);
}

double pair_similarity(const Vector& u, const Vector& v, const Vector& u_prev, const Vector& v_prev) {
  if (u.size() != u_prev.size() || v.size() != v_prev.size())
    throw InvalidArgument("pair_similarity: vectors of different sizes");
  return std::fabs(u.dot(u_prev)) * std::fabs(v.dot(v_prev));
}

}  // namespace lpdiag
