// Smoke test of the reference path through the public API; the gradient
// checks and property tests live next to it (attention_grad_test.cc etc.).
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "relpos/attention.h"

namespace relpos {
namespace {

// One query, two keys, k = 1, dk = dv = 1: small enough to do by hand.
// q = 1, keys 1 and 2 at positions 0 and 1; the query sits at position 1
// (off = Nk - Nq = 1). Distances j - i - off: -1 and 0 -> table rows 0, 1.
TEST(ReferenceForward, HandComputed) {
  std::vector<double> q = {1}, k = {1, 2}, v = {10, 20};
  std::vector<double> ak = {0.5, 0.0, -7}, av = {1, 2, 3};
  std::vector<double> out(1), lse(1);
  AttentionOptions o;
  o.max_distance = 1;
  AttentionForward<double>({.q = {q.data(), {1, 1, 1, 1}},
                            .k = {k.data(), {1, 1, 2, 1}},
                            .v = {v.data(), {1, 1, 2, 1}},
                            .ak = {ak.data(), {3, 1}},
                            .av = {av.data(), {3, 1}}},
                           {out.data(), {1, 1, 1, 1}},
                           {lse.data(), {1, 1, 1}}, o);
  // scores: (1*1 + 1*0.5) = 1.5 and (1*2 + 1*0) = 2; dk = 1 so no scaling.
  const double e0 = std::exp(1.5), e1 = std::exp(2.0);
  const double p0 = e0 / (e0 + e1), p1 = e1 / (e0 + e1);
  EXPECT_NEAR(out[0], p0 * (10 + 1) + p1 * (20 + 2), 1e-12);
  EXPECT_NEAR(lse[0], std::log(e0 + e1), 1e-12);
}

}  // namespace
}  // namespace relpos
