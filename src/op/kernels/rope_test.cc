// RoPE (include/relpos/rope.h): the fast path against the double reference
// on every compiled Highway target and awkward sizes; finite-difference
// gradients in double; properties (norms kept, q . k depends only on j - i,
// the two layouts are one permutation apart, backward undoes forward); known
// values; argument validation.
#include "relpos/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "base/rng.h"
#include "hwy/targets.h"
#include "kernels/rope.h"
#include "reference/rope_reference.h"
#include "relpos/error.h"
#include "support/expect_invalid.h"

namespace relpos {
namespace {

constexpr double kEpsF = std::numeric_limits<float>::epsilon();
constexpr double kEpsD = std::numeric_limits<double>::epsilon();

struct RopeCase {
  std::string name;
  int64_t outer, n, d;
  int64_t offset;
};

// d: the smallest (2), odd and even pair counts around every vector length
// (4 .. 16 floats) and just off them; n: 1, prime, just off a 64-row block;
// offsets: zero, negative, large.
std::vector<RopeCase> Cases() {
  std::vector<RopeCase> cases;
  for (int64_t d : {2, 4, 6, 8, 14, 16, 18, 30, 32, 34, 64, 66, 130})
    for (int64_t n : {1, 7, 65})
      for (int64_t offset : {int64_t{0}, int64_t{-9}, int64_t{1} << 30}) {
        std::string name = "d";
        name += std::to_string(d);
        name += "_n";
        name += std::to_string(n);
        name += "_off";
        name += std::to_string(offset);
        cases.push_back({name, n == 7 ? 3 : 1, n, d, offset});
      }
  cases.push_back({"many_rows", 2, 1031, 64, 5});  // several threads' blocks
  // Few positions, many B x H slices: the work is split over the slices.
  cases.push_back({"many_heads_short", 67, 10, 64, 3});
  return cases;
}

std::vector<double> RandomVector(int64_t size, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> v(static_cast<size_t>(size));
  for (double& x : v) x = rng.Normal();
  return v;
}

std::vector<float> ToFloat(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

RopeOptions Options(RopeLayout layout, int64_t offset, RopePath path) {
  RopeOptions o;
  o.layout = layout;
  o.position_offset = offset;
  o.path = path;
  return o;
}

const char* LayoutName(RopeLayout layout) {
  return layout == RopeLayout::kSplitHalves ? "split" : "interleaved";
}

// The error bound of a float rotation of one row against the exact one, as
// a multiple of the row's norm: each output is a two-term dot product in
// float (2 eps after the cosine / sine roundings of eps / 2 each, with
// margin: 4 eps), plus the double angle error: p * theta_t carries up to
// about 2 eps_d * |p| absolute error (theta_t <= 1), i.e. that much
// rotation.
double RowTolerance(int64_t max_abs_position) {
  return 4 * kEpsF + 4 * kEpsD * static_cast<double>(max_abs_position + 1);
}

// Fast float (forward and backward) against the double reference on the
// float-rounded inputs, row by row, normwise.
void CompareFastToReference(const RopeCase& c, RopeLayout layout, int threads) {
  SCOPED_TRACE(c.name + " " + LayoutName(layout) + " threads " +
               std::to_string(threads));
  const int64_t size = c.outer * c.n * c.d;
  const std::vector<float> xf = ToFloat(RandomVector(size, 7 + size));
  const std::vector<double> xd(xf.begin(), xf.end());
  const int64_t max_pos =
      std::max(std::abs(c.offset), std::abs(c.offset + c.n - 1));
  const double tol = RowTolerance(max_pos);
  for (bool backward : {false, true}) {
    std::vector<float> yf(static_cast<size_t>(size));
    std::vector<double> yd(static_cast<size_t>(size));
    RopeOptions fast = Options(layout, c.offset, RopePath::kFast);
    fast.num_threads = threads;
    const RopeOptions ref = Options(layout, c.offset, RopePath::kReference);
    const ConstView<float> xv(xf.data(), {c.outer, c.n, c.d});
    const TensorView<float> yv(yf.data(), {c.outer, c.n, c.d});
    const ConstView<double> xdv(xd.data(), {c.outer, c.n, c.d});
    const TensorView<double> ydv(yd.data(), {c.outer, c.n, c.d});
    if (backward) {
      RopeBackward<float>(xv, yv, fast);
      RopeBackward<double>(xdv, ydv, ref);
    } else {
      RopeForward<float>(xv, yv, fast);
      RopeForward<double>(xdv, ydv, ref);
    }
    double worst = 0;
    for (int64_t r = 0; r < c.outer * c.n; ++r) {
      double err2 = 0, norm2 = 0;
      for (int64_t u = r * c.d; u < (r + 1) * c.d; ++u) {
        err2 += (yf[u] - yd[u]) * (yf[u] - yd[u]);
        norm2 += xd[u] * xd[u];
      }
      worst = std::max(worst, std::sqrt(err2 / std::max(norm2, 1e-300)));
    }
    EXPECT_LE(worst, tol) << (backward ? "backward" : "forward");
  }
}

TEST(RopeFast, MatchesReferenceOnEveryCompiledTarget) {
  int targets = 0;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    EXPECT_STREQ(RopeTargetName(), hwy::TargetName(target));
    SCOPED_TRACE(hwy::TargetName(target));
    std::printf("RoPE target %s\n", hwy::TargetName(target));
    ++targets;
    for (const RopeCase& c : Cases())
      for (RopeLayout layout :
           {RopeLayout::kSplitHalves, RopeLayout::kInterleaved})
        CompareFastToReference(c, layout, 1);
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(targets, 1);
}

// Same inputs, 1 and 3 threads: bitwise equal (the tables depend only on
// the position block, never on the thread that computes them).
void ThreadCountsAgree(const RopeCase& c) {
  const int64_t size = c.outer * c.n * c.d;
  const std::vector<float> x = ToFloat(RandomVector(size, 3));
  std::vector<float> y1(x.size()), y3(x.size());
  for (RopeLayout layout :
       {RopeLayout::kSplitHalves, RopeLayout::kInterleaved}) {
    RopeOptions o = Options(layout, c.offset, RopePath::kFast);
    o.num_threads = 1;
    RopeForward<float>({x.data(), {c.outer, c.n, c.d}},
                       {y1.data(), {c.outer, c.n, c.d}}, o);
    o.num_threads = 3;
    RopeForward<float>({x.data(), {c.outer, c.n, c.d}},
                       {y3.data(), {c.outer, c.n, c.d}}, o);
    EXPECT_EQ(y1, y3) << LayoutName(layout);
    CompareFastToReference(c, layout, 3);
  }
}

TEST(RopeFast, ThreadCountsAgreeBitwise) {
  // Past the single-thread cutoff; split over positions, then over slices.
  for (const RopeCase& c :
       {RopeCase{"long", 4, 2053, 64, 11}, RopeCase{"short", 67, 10, 64, -1}}) {
    SCOPED_TRACE(c.name);
    ThreadCountsAgree(c);
  }
}

// float through the reference path: the same rotation in float arithmetic.
TEST(RopeReference, FloatMatchesDouble) {
  for (const RopeCase& c : Cases()) {
    if (c.d > 34) continue;
    for (RopeLayout layout :
         {RopeLayout::kSplitHalves, RopeLayout::kInterleaved}) {
      SCOPED_TRACE(c.name + " " + LayoutName(layout));
      const int64_t size = c.outer * c.n * c.d;
      const std::vector<float> xf = ToFloat(RandomVector(size, 5));
      const std::vector<double> xd(xf.begin(), xf.end());
      std::vector<float> yf(xf.size());
      std::vector<double> yd(xd.size());
      const RopeOptions o = Options(layout, c.offset, RopePath::kReference);
      RopeForward<float>({xf.data(), {size / c.d, c.d}},
                         {yf.data(), {size / c.d, c.d}}, o);
      RopeForward<double>({xd.data(), {size / c.d, c.d}},
                          {yd.data(), {size / c.d, c.d}}, o);
      double err2 = 0, norm2 = 0;
      for (size_t u = 0; u < yd.size(); ++u) {
        err2 += (yf[u] - yd[u]) * (yf[u] - yd[u]);
        norm2 += xd[u] * xd[u];
      }
      // All rows at once here (positions differ per row only through the
      // shared offset bound): the same per-row bound holds for the total.
      const int64_t max_pos =
          std::max(std::abs(c.offset), std::abs(c.offset + size / c.d - 1));
      EXPECT_LE(std::sqrt(err2 / norm2), RowTolerance(max_pos));
    }
  }
}

// Finite differences in double of L(x) = sum w . RopeForward(x) against
// RopeBackward(w) (2- and 4-point central differences), and the same for
// L(dy) = sum w . RopeBackward(dy) against RopeForward(w).
TEST(RopeGrad, FiniteDifferencesInDouble) {
  const int64_t outer = 2, n = 5;
  for (int64_t d : {2, 6, 8}) {
    for (RopeLayout layout :
         {RopeLayout::kSplitHalves, RopeLayout::kInterleaved}) {
      for (int64_t offset : {int64_t{0}, int64_t{-3}, int64_t{1000}}) {
        SCOPED_TRACE("d " + std::to_string(d) + " " + LayoutName(layout) +
                     " offset " + std::to_string(offset));
        RopeOptions o = Options(layout, offset, RopePath::kReference);
        o.base = d == 6 ? 500000.0 : 10000.0;
        const int64_t size = outer * n * d;
        const std::vector<double> x = RandomVector(size, 11);
        const std::vector<double> w = RandomVector(size, 13);
        for (bool of_backward : {false, true}) {
          auto apply = [&](const std::vector<double>& in, bool inverse) {
            std::vector<double> out(in.size());
            const ConstView<double> iv(in.data(), {outer, n, d});
            const TensorView<double> ov(out.data(), {outer, n, d});
            if (inverse) {
              RopeBackward<double>(iv, ov, o);
            } else {
              RopeForward<double>(iv, ov, o);
            }
            return out;
          };
          auto loss = [&](const std::vector<double>& in) {
            const std::vector<double> y = apply(in, of_backward);
            double s = 0;
            for (size_t u = 0; u < y.size(); ++u) s += w[u] * y[u];
            return s;
          };
          // The adjoint of the forward is the backward and vice versa.
          const std::vector<double> grad = apply(w, !of_backward);
          const double h = 1e-4;
          double worst2 = 0, worst4 = 0;
          for (int64_t u = 0; u < size; ++u) {
            std::vector<double> xp = x, xm = x, xpp = x, xmm = x;
            xp[u] += h;
            xm[u] -= h;
            xpp[u] += 2 * h;
            xmm[u] -= 2 * h;
            const double lp = loss(xp), lm = loss(xm);
            const double fd2 = (lp - lm) / (2 * h);
            const double fd4 =
                (8 * (lp - lm) - (loss(xpp) - loss(xmm))) / (12 * h);
            worst2 = std::max(worst2, std::abs(fd2 - grad[u]));
            worst4 = std::max(worst4, std::abs(fd4 - grad[u]));
          }
          // L is linear, so the differences are exact up to the rounding of
          // L (size terms of size ~1, eps_d each) divided by h.
          const double tol = 64.0 * kEpsD * static_cast<double>(size) / h;
          EXPECT_LE(worst2, tol) << (of_backward ? "of backward" : "");
          EXPECT_LE(worst4, tol) << (of_backward ? "of backward" : "");
        }
      }
    }
  }
}

// Backward undoes forward (R(-a) R(a) = I), and both keep every row's norm.
TEST(RopeProperties, NormsKeptAndBackwardInvertsForward) {
  for (RopePath path : {RopePath::kFast, RopePath::kReference}) {
    for (RopeLayout layout :
         {RopeLayout::kSplitHalves, RopeLayout::kInterleaved}) {
      const int64_t n = 33, d = 18, offset = 123456;
      const std::vector<float> x = ToFloat(RandomVector(n * d, 17));
      std::vector<float> y(x.size()), back(x.size());
      const RopeOptions o = Options(layout, offset, path);
      RopeForward<float>({x.data(), {n, d}}, {y.data(), {n, d}}, o);
      RopeBackward<float>({y.data(), {n, d}}, {back.data(), {n, d}}, o);
      const double tol = 2 * RowTolerance(offset + n);
      for (int64_t r = 0; r < n; ++r) {
        double nx = 0, ny = 0, err = 0;
        for (int64_t u = r * d; u < (r + 1) * d; ++u) {
          nx += double(x[u]) * x[u];
          ny += double(y[u]) * y[u];
          err += (double(back[u]) - x[u]) * (double(back[u]) - x[u]);
        }
        EXPECT_NEAR(std::sqrt(ny), std::sqrt(nx), tol * std::sqrt(nx)) << r;
        EXPECT_LE(std::sqrt(err), tol * std::sqrt(nx)) << r;
      }
    }
  }
}

// After rotating q at position a and k at position b, q . k depends only on
// b - a: shifting both positions by s changes nothing (up to the angle
// rounding, which grows with the positions).
TEST(RopeProperties, ScoresDependOnlyOnRelativePosition) {
  const int64_t d = 16;
  const std::vector<double> q = RandomVector(d, 19), k = RandomVector(d, 23);
  for (RopePath path : {RopePath::kFast, RopePath::kReference}) {
    for (RopeLayout layout :
         {RopeLayout::kSplitHalves, RopeLayout::kInterleaved}) {
      SCOPED_TRACE(LayoutName(layout));
      auto score = [&](int64_t a, int64_t b) {
        if (path == RopePath::kFast) {
          const std::vector<float> qf = ToFloat(q), kf = ToFloat(k);
          std::vector<float> qr(d), kr(d);
          RopeForward<float>({qf.data(), {d}}, {qr.data(), {d}},
                             Options(layout, a, path));
          RopeForward<float>({kf.data(), {d}}, {kr.data(), {d}},
                             Options(layout, b, path));
          double s = 0;
          for (int64_t u = 0; u < d; ++u) s += double(qr[u]) * kr[u];
          return s;
        }
        std::vector<double> qr(d), kr(d);
        RopeForward<double>({q.data(), {d}}, {qr.data(), {d}},
                            Options(layout, a, path));
        RopeForward<double>({k.data(), {d}}, {kr.data(), {d}},
                            Options(layout, b, path));
        double s = 0;
        for (int64_t u = 0; u < d; ++u) s += qr[u] * kr[u];
        return s;
      };
      double qn = 0, kn = 0;
      for (int64_t u = 0; u < d; ++u) qn += q[u] * q[u], kn += k[u] * k[u];
      const double scale = std::sqrt(qn * kn);
      for (int64_t rel : {-40, -1, 0, 3, 1000}) {
        const double s0 = score(0, rel);
        for (int64_t shift : {int64_t{1}, int64_t{-77}, int64_t{1} << 20}) {
          const int64_t maxpos = std::abs(shift) + std::abs(rel);
          const double tol = path == RopePath::kFast
                                 ? 4 * RowTolerance(maxpos) * scale
                                 : 16 * kEpsD * (maxpos + 1) * scale;
          EXPECT_NEAR(score(shift, shift + rel), s0, tol)
              << "rel " << rel << " shift " << shift;
        }
      }
      // And the score does change with the relative position.
      EXPECT_GT(std::abs(score(0, 1) - score(0, 0)), 1e-3 * scale);
    }
  }
}

// Interleaved rotation of x equals, after the permutation (2t, 2t+1) ->
// (t, t + d/2), the split rotation of the permuted x: the layouts differ
// only in where each pair lives.
TEST(RopeProperties, LayoutsArePermutationsOfEachOther) {
  for (RopePath path : {RopePath::kFast, RopePath::kReference}) {
    for (int64_t d : {2, 10, 32, 66}) {
      const int64_t n = 9, h = d / 2, offset = -4;
      const std::vector<float> x = ToFloat(RandomVector(n * d, 29 + d));
      std::vector<float> xs(x.size());  // x in the split layout
      for (int64_t r = 0; r < n; ++r)
        for (int64_t t = 0; t < h; ++t) {
          xs[r * d + t] = x[r * d + 2 * t];
          xs[r * d + h + t] = x[r * d + 2 * t + 1];
        }
      std::vector<float> yi(x.size()), ys(x.size());
      RopeForward<float>({x.data(), {n, d}}, {yi.data(), {n, d}},
                         Options(RopeLayout::kInterleaved, offset, path));
      RopeForward<float>({xs.data(), {n, d}}, {ys.data(), {n, d}},
                         Options(RopeLayout::kSplitHalves, offset, path));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t t = 0; t < h; ++t) {
          // Same products in the same order: equal up to FMA contraction.
          const double tol =
              4 * kEpsF *
              (std::abs(x[r * d + 2 * t]) + std::abs(x[r * d + 2 * t + 1]));
          EXPECT_NEAR(yi[r * d + 2 * t], ys[r * d + t], tol);
          EXPECT_NEAR(yi[r * d + 2 * t + 1], ys[r * d + h + t], tol);
        }
    }
  }
}

// Values by hand: d = 2 rotates by p radians (theta_0 = 1); d = 4 split
// rotates pair (1, 3) by p / sqrt(base).
TEST(RopeValues, ByHand) {
  const double x2[2] = {1.0, 0.0};
  double y2[2];
  RopeForward<double>({x2, {2}}, {y2, {2}},
                      Options(RopeLayout::kSplitHalves, 1, RopePath::kAuto));
  EXPECT_DOUBLE_EQ(y2[0], std::cos(1.0));
  EXPECT_DOUBLE_EQ(y2[1], std::sin(1.0));
  const double x4[4] = {0.0, 1.0, 0.0, 0.0};  // pair 1 = dims (1, 3)
  double y4[4];
  RopeOptions o = Options(RopeLayout::kSplitHalves, 3, RopePath::kReference);
  o.base = 100.0;
  RopeForward<double>({x4, {1, 4}}, {y4, {1, 4}}, o);
  EXPECT_NEAR(y4[1], std::cos(0.3), 1e-15);
  EXPECT_NEAR(y4[3], std::sin(0.3), 1e-15);
  EXPECT_EQ(y4[0], 0.0);
  EXPECT_EQ(y4[2], 0.0);
  // Position 0 is the identity, on both paths and layouts.
  const std::vector<float> x = ToFloat(RandomVector(12, 31));
  for (RopePath path : {RopePath::kFast, RopePath::kReference})
    for (RopeLayout layout :
         {RopeLayout::kSplitHalves, RopeLayout::kInterleaved}) {
      std::vector<float> y(12);
      RopeForward<float>({x.data(), {1, 12}}, {y.data(), {1, 12}},
                         Options(layout, 0, path));
      EXPECT_EQ(y, x);
    }
}

TEST(RopeApi, InPlaceEqualsOutOfPlace) {
  const int64_t n = 70, d = 20;
  for (RopePath path : {RopePath::kFast, RopePath::kReference})
    for (RopeLayout layout :
         {RopeLayout::kSplitHalves, RopeLayout::kInterleaved}) {
      const std::vector<float> x = ToFloat(RandomVector(n * d, 37));
      std::vector<float> y(x.size()), z = x;
      const RopeOptions o = Options(layout, 5, path);
      RopeForward<float>({x.data(), {n, d}}, {y.data(), {n, d}}, o);
      RopeForward<float>({z.data(), {n, d}}, {z.data(), {n, d}}, o);
      EXPECT_EQ(y, z);
      RopeBackward<float>({z.data(), {n, d}}, {z.data(), {n, d}}, o);
      RopeBackward<float>({y.data(), {n, d}}, {y.data(), {n, d}}, o);
      EXPECT_EQ(y, z);
    }
}

TEST(RopeApi, EmptyAndExtremePositions) {
  // No rows: nothing to do, on every path.
  float none[1] = {0};
  for (RopePath path : {RopePath::kFast, RopePath::kReference})
    EXPECT_NO_THROW(
        RopeForward<float>({none, {0, 8}}, {none, {0, 8}},
                           Options(RopeLayout::kSplitHalves, 0, path)));
  // Positions exactly at +-2^40 are accepted and stay finite.
  const int64_t edge = int64_t{1} << 40;
  std::vector<float> x(4, 1.0f), y(4);
  for (int64_t off : {edge - 1, -edge}) {
    RopeForward<float>({x.data(), {2, 2}}, {y.data(), {2, 2}},
                       Options(RopeLayout::kInterleaved, off, RopePath::kAuto));
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
  }
}

// Per-row positions: each batch item of [B, H, N, d] is rotated as its own
// [H, N, d] call at its offset, on both paths, forward and backward, in
// place too.
TEST(RopeApi, PerRowOffsetsEqualOneCallPerBatchItem) {
  const int64_t B = 3, H = 2, n = 9, d = 10, slice = H * n * d;
  const std::vector<int64_t> offsets = {0, 7, -4};
  for (RopePath path : {RopePath::kFast, RopePath::kReference})
    for (RopeLayout layout :
         {RopeLayout::kSplitHalves, RopeLayout::kInterleaved})
      for (bool backward : {false, true}) {
        const std::vector<float> x = ToFloat(RandomVector(B * slice, 41));
        std::vector<float> y(x.size()), expected(x.size()), z = x;
        RopeOptions o = Options(layout, 0, path);
        o.position_offsets = offsets;
        const auto apply = [&](ConstView<float> in, TensorView<float> out,
                               const RopeOptions& opt) {
          if (backward) {
            RopeBackward<float>(in, out, opt);
          } else {
            RopeForward<float>(in, out, opt);
          }
        };
        apply({x.data(), {B, H, n, d}}, {y.data(), {B, H, n, d}}, o);
        for (int64_t b = 0; b < B; ++b)
          apply({x.data() + b * slice, {H, n, d}},
                {expected.data() + b * slice, {H, n, d}},
                Options(layout, offsets[b], path));
        EXPECT_EQ(y, expected);
        apply({z.data(), {B, H, n, d}}, {z.data(), {B, H, n, d}}, o);
        EXPECT_EQ(z, expected);
      }
}

TEST(RopeApi, RejectsBadPerRowOffsets) {
  std::vector<float> a(64), b(64);
  RopeOptions o;
  o.position_offsets = {0, 1};
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {2, 4, 8}}, {b.data(), {2, 4, 8}}, o);
      },
      {"position_offsets", "rank 4"});
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {4, 1, 2, 8}}, {b.data(), {4, 1, 2, 8}},
                           o);
      },
      {"position_offsets", "one entry per batch item", "4"});
  o.position_offset = 3;
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {2, 1, 4, 8}}, {b.data(), {2, 1, 4, 8}},
                           o);
      },
      {"exclusive"});
  o.position_offset = 0;
  o.position_offsets = {0, (int64_t{1} << 40) - 2};
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {2, 1, 4, 8}}, {b.data(), {2, 1, 4, 8}},
                           o);
      },
      {"position_offsets[1]"});
}

TEST(RopeApi, RejectsBadArguments) {
  std::vector<float> a(64), b(64);
  const RopeOptions ok;
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {3, 7}}, {b.data(), {3, 7}}, ok);
      },
      {"d", "even", "7"});
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {4, 0}}, {b.data(), {4, 0}}, ok);
      },
      {"d", "0"});
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {4, 8}}, {b.data(), {8, 4}}, ok);
      },
      {"y", "[4, 8]", "[8, 4]"});
  ExpectInvalid(
      [&] {
        RopeBackward<float>({a.data(), {4, 8}}, {b.data(), {32}}, ok);
      },
      {"dx", "dy"});
  ExpectInvalid(
      [&] {
        RopeForward<float>(ConstView<float>(), {b.data(), {4}}, ok);
      },
      {"x", "rank"});
  for (double base :
       {0.0, -2.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    RopeOptions o;
    o.base = base;
    ExpectInvalid(
        [&] {
          RopeForward<float>({a.data(), {8}}, {b.data(), {8}}, o);
        },
        {"base"});
  }
  RopeOptions far;
  far.position_offset = (int64_t{1} << 40) + 1;
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {8}}, {b.data(), {8}}, far);
      },
      {"position_offset", std::to_string(far.position_offset)});
  far.position_offset = (int64_t{1} << 40) - 2;  // the 4th row is past 2^40
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {4, 2}}, {b.data(), {4, 2}}, far);
      },
      {"last position"});
  RopeOptions threads;
  threads.num_threads = -1;
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {8}}, {b.data(), {8}}, threads);
      },
      {"num_threads", "-1"});
  RopeOptions layout;
  layout.layout = static_cast<RopeLayout>(7);
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {8}}, {b.data(), {8}}, layout);
      },
      {"layout", "7"});
  // Partial overlap (shifted by one pair) is refused; identity is allowed.
  ExpectInvalid(
      [&] {
        RopeForward<float>({a.data(), {4, 8}}, {a.data() + 2, {4, 8}}, ok);
      },
      {"overlaps"});
  std::vector<double> ad(8), bd(8);
  RopeOptions fast;
  fast.path = RopePath::kFast;
  ExpectInvalid(
      [&] {
        RopeForward<double>({ad.data(), {8}}, {bd.data(), {8}}, fast);
      },
      {"float only"});
}

}  // namespace
}  // namespace relpos
