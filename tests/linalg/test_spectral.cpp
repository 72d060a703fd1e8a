#include <Eigen/SVD>
#include <cmath>
#include <random>

#include "catch_compat.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/linalg/spectral.hpp"

using namespace lpdiag;

namespace {

Matrix random_matrix(int r, int c, std::mt19937_64& rng) {
  std::normal_distribution<double> g;
  Matrix a(r, c);
  for (int i = 0; i < r; ++i)
    for (int j = 0; j < c; ++j) a(i, j) = g(rng);
  return a;
}

// A = U diag(s) V^T with random orthogonal U, V and the given singular values.
Matrix with_spectrum(int r, int c, const Eigen::VectorXd& s, std::mt19937_64& rng) {
  Eigen::HouseholderQR<Matrix> qu(random_matrix(r, r, rng)), qv(random_matrix(c, c, rng));
  const Matrix U = qu.householderQ(), V = qv.householderQ();
  Matrix S = Matrix::Zero(r, c);
  for (int i = 0; i < s.size(); ++i) S(i, i) = s[i];
  return U * S * V.transpose();
}

}  // namespace

TEST_CASE("power iteration matches Eigen's SVD on random matrices", "[linalg]") {
  // Gaussian noise plus one planted direction of strength 2 (sqrt(r) + sqrt(c)), which keeps
  // sigma2 / sigma1 under ~0.6. Pure gaussian matrices sometimes have sigma2 / sigma1 > 0.999,
  // where 5000 iterations do not reach 1e-12 (1 failure in ~25 runs); the near-degenerate case
  // has a test of its own below.
  std::mt19937_64 rng(std::random_device{}());
  for (auto [r, c] : {std::pair{64, 48}, std::pair{48, 64}, std::pair{192, 64}, std::pair{1, 7}}) {
    Matrix a = random_matrix(r, c, rng);
    const Eigen::VectorXd x = random_matrix(r, 1, rng).col(0).normalized(), y = random_matrix(c, 1, rng).col(0).normalized();
    a += 2.0 * (std::sqrt(double(r)) + std::sqrt(double(c))) * x * y.transpose();
    Eigen::JacobiSVD<Matrix> svd(a, Eigen::ComputeThinU | Eigen::ComputeThinV);
    PowerIterationOptions opt;
    opt.max_iterations = 5000;
    opt.tolerance = 1e-12;
    const SingularTriplet t = top_singular_triplet(a, opt);
    INFO(r << "x" << c << " iterations " << t.iterations << " residual " << t.residual);
    CHECK(t.converged);
    // sigma error is second order in the vector error: residual 1e-12 gives ~1e-20, so 1e-12
    // relative only absorbs the SVD's own rounding.
    CHECK(t.sigma == Catch::Approx(svd.singularValues()[0]).epsilon(1e-12));
    CHECK(std::fabs(t.v.dot(svd.matrixV().col(0))) == Catch::Approx(1.0).epsilon(1e-9));
    CHECK(std::fabs(t.u.dot(svd.matrixU().col(0))) == Catch::Approx(1.0).epsilon(1e-9));
    const double fro = frobenius_norm(a);
    CHECK(fro == Catch::Approx(svd.singularValues().norm()).epsilon(1e-13));
    CHECK(stable_rank(fro, t.sigma) ==
          Catch::Approx(svd.singularValues().squaredNorm() / std::pow(svd.singularValues()[0], 2)).epsilon(1e-11));
  }
}

TEST_CASE("near-degenerate sigma1 ~ sigma2: sigma is still exact, the vector lies in the top pair's span",
          "[linalg]") {
  std::mt19937_64 rng(std::random_device{}());
  Eigen::VectorXd s(6);
  s << 10.0, 10.0 * (1 - 1e-6), 5.0, 2.0, 1.0, 0.5;
  const Matrix a = with_spectrum(40, 30, s, rng);
  Eigen::JacobiSVD<Matrix> svd(a, Eigen::ComputeThinU | Eigen::ComputeThinV);
  PowerIterationOptions opt;
  opt.max_iterations = 60;  // (5/10)^(2*60) ~ 1e-36: the third direction is gone; the first two never separate
  opt.tolerance = 0.0;
  const SingularTriplet t = top_singular_triplet(a, opt);
  CHECK(t.iterations == 60);
  // Rayleigh quotient bound: sigma lies in [sigma2, sigma1], so relative error <= 1e-6 by
  // construction; the check is 1e-6 + rounding.
  CHECK(t.sigma <= svd.singularValues()[0] * (1 + 1e-13));
  CHECK(t.sigma >= svd.singularValues()[1] * (1 - 1e-13));
  const Matrix V2 = svd.matrixV().leftCols(2);
  CHECK((V2.transpose() * t.v).norm() == Catch::Approx(1.0).epsilon(1e-10));
}

TEST_CASE("a warm start converges in fewer iterations and reports its residual", "[linalg]") {
  std::mt19937_64 rng(11);
  Eigen::VectorXd s(5);
  s << 3.0, 2.7, 1.0, 0.5, 0.1;
  const Matrix a = with_spectrum(50, 40, s, rng);
  PowerIterationOptions opt;
  opt.max_iterations = 2000;
  opt.tolerance = 1e-10;
  const SingularTriplet cold = top_singular_triplet(a, opt);
  std::normal_distribution<double> g(0.0, 1e-4);
  Matrix a2 = a;  // the next training step: a small update
  for (Eigen::Index i = 0; i < a2.size(); ++i) a2.data()[i] += g(rng);
  const SingularTriplet warm = top_singular_triplet(a2, opt, &cold.v);
  const SingularTriplet cold2 = top_singular_triplet(a2, opt);
  INFO("cold " << cold2.iterations << " warm " << warm.iterations);
  CHECK(warm.converged);
  CHECK(warm.residual < 1e-10);
  CHECK(warm.iterations < cold2.iterations);
  CHECK(warm.sigma == Catch::Approx(cold2.sigma).epsilon(1e-12));
}

TEST_CASE("similarity of top pairs and degenerate inputs", "[linalg]") {
  Vector u(3), v(2), u2(3), v2(2);
  u << 1, 0, 0;
  v << 0, 1;
  u2 << -1, 0, 0;
  v2 << 0, 1;
  CHECK(pair_similarity(u, v, u2, v2) == 1.0);  // sign-blind
  u2 << 0, 1, 0;
  CHECK(pair_similarity(u, v, u2, v2) == 0.0);
  CHECK(stable_rank(2.0, 1.0) == 4.0);
  CHECK_THROWS_AS(top_singular_triplet(Matrix(0, 3)), InvalidArgument);
  Matrix bad = Matrix::Ones(2, 2);
  bad(0, 0) = NAN;
  CHECK_THROWS_AS(top_singular_triplet(bad), InvalidArgument);
  const SingularTriplet z = top_singular_triplet(Matrix::Zero(3, 3));
  CHECK(z.sigma == 0.0);
}
