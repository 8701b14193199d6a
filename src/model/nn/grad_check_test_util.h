// Test-only helpers: central finite differences in double precision.
//
// Why double and these tolerances: for a smooth loss L, the central
// difference (L(x+h) - L(x-h)) / 2h has truncation error ~ h^2 |L'''| / 6
// and rounding error ~ eps_double |L| / h. With h = 1e-5 and |L|, |L'''| of
// order 1-10 (the test losses are small random contractions), that is about
// 1e-10 + 1e-10, so a tolerance of 1e-7 (relative to max(1, |gradient|)) sits
// three orders of magnitude above the noise and many orders below any real
// mistake (a wrong term changes a gradient by O(|gradient|)).
#ifndef RELPOS_SRC_MODEL_NN_GRAD_CHECK_TEST_UTIL_H_
#define RELPOS_SRC_MODEL_NN_GRAD_CHECK_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/rng.h"

namespace relpos::nn::testing {

inline std::vector<double> RandomVector(int64_t n, Rng& rng,
                                        double scale = 1.0) {
  std::vector<double> v(n);
  for (double& x : v) x = scale * rng.Normal();
  return v;
}

inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` (d loss / d x) with central differences of `loss`,
// which must read the current contents of `x`. Checks at most `max_checks`
// entries (spread evenly, always including the first and last) so that large
// tensors stay fast. Returns the number of entries checked.
inline int CheckGradient(const std::string& what, std::vector<double>* x,
                         const std::vector<double>& analytic,
                         const std::function<double()>& loss,
                         int max_checks = 64, double h = 1e-5,
                         double tol = 1e-7) {
  EXPECT_EQ(x->size(), analytic.size()) << what;
  const int64_t n = static_cast<int64_t>(x->size());
  const int64_t stride = std::max<int64_t>(1, n / max_checks);
  int checked = 0;
  for (int64_t i = 0; i < n; i += stride) {
    const int64_t idx = (i + stride >= n) ? n - 1 : i;
    const double saved = (*x)[idx];
    (*x)[idx] = saved + h;
    const double up = loss();
    (*x)[idx] = saved - h;
    const double down = loss();
    (*x)[idx] = saved;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(analytic[idx], numeric, tol * std::max(1.0, std::abs(numeric)))
        << what << "[" << idx << "]";
    ++checked;
    if (idx == n - 1) break;
  }
  return checked;
}

}  // namespace relpos::nn::testing

#endif  // RELPOS_SRC_MODEL_NN_GRAD_CHECK_TEST_UTIL_H_
