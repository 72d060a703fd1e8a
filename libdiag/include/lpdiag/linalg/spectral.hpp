// Spectral quantities of weight and update matrices: sigma_1 by warm-started power iteration,
// the top singular triplet, Frobenius norm, stable rank and the similarity of two top pairs.
#pragma once
#include <Eigen/Core>

namespace lpdiag {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXd;

struct PowerIterationOptions {
  int max_iterations = 100;
  // Stop when the residual ||A^T u - sigma v|| / sigma falls below this.
  double tolerance = 1e-10;
  std::uint64_t seed = 0x5EED;  // start vector when no warm start is given
};

struct SingularTriplet {
  double sigma = 0.0;
  Vector u;          // left singular vector, unit norm
  Vector v;          // right singular vector, unit norm
  double residual = 0.0;  // ||A^T u - sigma v|| / sigma after the last iteration
  int iterations = 0;
  bool converged = false;
};

// Power iteration on A^T A. `warm_v` (size cols, non-zero) starts it from the previous record's
// right vector, which makes a per-step spectral norm cost a few matrix-vector products.
SingularTriplet top_singular_triplet(const Eigen::Ref<const Matrix>& a,
                                     const PowerIterationOptions& opt = {},
                                     const Vector* warm_v = nullptr);

inline double frobenius_norm(const Eigen::Ref<const Matrix>& a) { return a.norm(); }
// ||A||_F^2 / sigma_1^2: 1 for a rank-1 matrix, up to min(rows, cols) for an isotropic one.
double stable_rank(double frobenius, double sigma1);
// |<u, u'>| * |<v, v'>|: 1 when two records share their top singular direction, sign-blind.
double pair_similarity(const Vector& u, const Vector& v, const Vector& u_prev, const Vector& v_prev);

}  // namespace lpdiag
