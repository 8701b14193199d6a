#include "train/optimizer.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "hwy/targets.h"
#include "relpos/error.h"

namespace relpos::train {
namespace {

TEST(Schedule, WarmupThenCosineToFloor) {
  ScheduleConfig c{.peak_lr = 1e-3,
                   .warmup_steps = 10,
                   .total_steps = 110,
                   .min_lr_ratio = 0.1};
  // Linear warm-up: step s uses (s + 1) / warmup of the peak.
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 4), 5e-4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 9), 1e-3);
  // Cosine: peak at the end of warm-up, the mean of peak and floor halfway,
  // the floor at the end and after it.
  EXPECT_DOUBLE_EQ(LearningRate(c, 10), 1e-3);
  EXPECT_NEAR(LearningRate(c, 60), 0.5 * (1e-3 + 1e-4), 1e-15);
  EXPECT_NEAR(LearningRate(c, 110), 1e-4, 1e-15);
  EXPECT_NEAR(LearningRate(c, 500), 1e-4, 1e-15);
  for (int64_t s = 10; s < 110; ++s) {
    EXPECT_GE(LearningRate(c, s), LearningRate(c, s + 1)) << s;
  }
}

TEST(Schedule, NoWarmup) {
  ScheduleConfig c{.peak_lr = 2e-3,
                   .warmup_steps = 0,
                   .total_steps = 4,
                   .min_lr_ratio = 0.0};
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 2e-3);
  EXPECT_NEAR(LearningRate(c, 2), 1e-3, 1e-18);
  EXPECT_NEAR(LearningRate(c, 4), 0.0, 1e-18);
}

TEST(Schedule, ValidateRejects) {
  EXPECT_THROW(Validate(ScheduleConfig{.peak_lr = 0}), InvalidArgument);
  EXPECT_THROW(Validate(ScheduleConfig{.warmup_steps = 5, .total_steps = 4}),
               InvalidArgument);
  EXPECT_THROW(Validate(ScheduleConfig{.total_steps = 0}), InvalidArgument);
  EXPECT_THROW(Validate(ScheduleConfig{.min_lr_ratio = 1.5}), InvalidArgument);
  EXPECT_NO_THROW(Validate(ScheduleConfig{}));
}

TEST(GradNorm, AndClipScale) {
  std::vector<float> v1(2), g1 = {3.0f, 0.0f}, v2(1), g2 = {4.0f};
  std::vector<ParamSlot> slots = {{v1, g1}, {v2, g2}};
  EXPECT_DOUBLE_EQ(GradNorm(slots), 5.0);
  EXPECT_DOUBLE_EQ(ClipScale(5.0, 1.0), 0.2);
  EXPECT_DOUBLE_EQ(ClipScale(5.0, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(ClipScale(5.0, 0.0), 1.0);  // 0 = no clipping
  g2[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(GradNorm(slots)));
}

// Independent double-precision transcription of Loshchilov and Hutter's
// Algorithm 2 (with PyTorch's placement of eps outside the square root).
struct RefAdamW {
  double b1, b2, eps, wd, m = 0, v = 0;
  int t = 0;
  double Step(double w, double g, double lr, bool decay) {
    ++t;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, t));
    const double vhat = v / (1 - std::pow(b2, t));
    if (decay) w -= lr * wd * w;
    return w - lr * mhat / (std::sqrt(vhat) + eps);
  }
};

TEST(AdamW, MatchesReferenceOnAQuadratic) {
  const AdamWConfig cfg{
      .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9, .weight_decay = 0.1};
  // Minimise f(w) = 0.5 * sum a_i (w_i - c_i)^2 from w = 0.
  const std::vector<double> a = {1.0, 10.0, 0.1}, c = {1.0, -2.0, 0.5};
  std::vector<float> w(3, 0.0f), g(3);
  AdamW opt(cfg, {3});
  std::vector<RefAdamW> ref(
      3, RefAdamW{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay});
  std::vector<double> wr(3, 0.0);
  for (int step = 0; step < 300; ++step) {
    const double lr = 0.05;
    for (int i = 0; i < 3; ++i) g[i] = static_cast<float>(a[i] * (w[i] - c[i]));
    opt.Step({{w, g, true}}, lr, 1.0);
    for (int i = 0; i < 3; ++i) {
      // The reference sees the float gradient and starts from the float
      // weight the optimiser had, so the only differences are the float
      // rounding of the stored moments (relative 2^-24, amplified at most
      // 1/(1-beta1) = 10x by the running averages) and of w: well below
      // 1e-6 for |w| <= 2, lr = 0.05.
      wr[i] = ref[i].Step(wr[i], g[i], lr, true);
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(w[i], wr[i], 1e-6) << "step " << step << " i " << i;
      wr[i] = w[i];  // re-synchronise so errors do not compound
    }
  }
  EXPECT_EQ(opt.step(), 300);
  // With decay the fixed point is slightly shrunk towards zero, but close.
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i], c[i], 0.15) << i;
}

TEST(AdamW, SimdUpdateEqualsTheScalarFormBitForBit) {
  // Tensors of awkward sizes (SIMD tails, several chunks), with and without
  // decay, at one and two threads: every element must be exactly the
  // scalar update in double, stored in float.
  const AdamWConfig cfg{
      .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9, .weight_decay = 0.01};
  const std::vector<int64_t> sizes = {1, 7, 8192 * 2 + 37, 300};
  for (const int threads : {1, 2}) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<std::vector<float>> w, g;
    for (int64_t n : sizes) {
      w.emplace_back(n);
      g.emplace_back(n);
      for (int64_t i = 0; i < n; ++i) {
        w.back()[i] = std::sin(0.37f * static_cast<float>(i)) * 0.5f;
        g.back()[i] = std::cos(1.3f * static_cast<float>(i + n)) * 1e-2f;
      }
    }
    std::vector<std::vector<float>> wr = w, mr, vr;
    for (int64_t n : sizes) {
      mr.emplace_back(n, 0.0f);
      vr.emplace_back(n, 0.0f);
    }
    AdamW opt(cfg, sizes);
    for (int step = 0; step < 3; ++step) {
      const double lr = 1e-3 * (step + 1), scale = 0.75;
      std::vector<ParamSlot> slots;
      for (size_t k = 0; k < sizes.size(); ++k) {
        slots.push_back({w[k], g[k], k % 2 == 0});
      }
      opt.Step(slots, lr, scale);
      const double t = step + 1.0;
      const double c1 = 1.0 - std::pow(cfg.beta1, t);
      const double c2 = 1.0 - std::pow(cfg.beta2, t);
      for (size_t k = 0; k < sizes.size(); ++k) {
        for (int64_t i = 0; i < sizes[k]; ++i) {
          const double gi = static_cast<double>(g[k][i]) * scale;
          const double mi = cfg.beta1 * mr[k][i] + (1.0 - cfg.beta1) * gi;
          const double vi = cfg.beta2 * vr[k][i] + (1.0 - cfg.beta2) * gi * gi;
          mr[k][i] = static_cast<float>(mi);
          vr[k][i] = static_cast<float>(vi);
          double wi = wr[k][i];
          if (k % 2 == 0) wi *= 1.0 - lr * cfg.weight_decay;
          wi -= lr * (mi / c1) / (std::sqrt(vi / c2) + cfg.eps);
          wr[k][i] = static_cast<float>(wi);
        }
        ASSERT_EQ(w[k], wr[k]) << "threads " << threads << " step " << step
                               << " tensor " << k;
        ASSERT_EQ(opt.m(k), mr[k]);
        ASSERT_EQ(opt.v(k), vr[k]);
      }
    }
    omp_set_num_threads(saved);
  }
}

TEST(AdamW, EverySimdTargetGivesTheSameBits) {
  // No fused multiply-adds in the update (optimizer.cc is compiled without
  // contraction), so every target this CPU has gives the same bits.
  const int64_t n = 1000;
  std::vector<std::vector<float>> results;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::vector<float> w(n), g(n);
    for (int64_t i = 0; i < n; ++i) {
      w[i] = std::sin(0.1f * static_cast<float>(i));
      g[i] = std::cos(0.7f * static_cast<float>(i)) * 1e-3f;
    }
    AdamW opt(AdamWConfig{.weight_decay = 0.1}, {n});
    for (int step = 0; step < 3; ++step) opt.Step({{w, g, true}}, 1e-3, 0.5);
    results.push_back(w);
  }
  hwy::SetSupportedTargetsForTest(0);
  ASSERT_FALSE(results.empty());
  for (const std::vector<float>& r : results) EXPECT_EQ(r, results[0]);
}

TEST(AdamW, FirstStepIsSignTimesLr) {
  // Bias correction makes the first update exactly lr * g / (|g| + eps).
  std::vector<float> w = {1.0f, 1.0f}, g = {0.5f, -3.0f};
  AdamW opt(AdamWConfig{.weight_decay = 0.0}, {2});
  opt.Step({{w, g, false}}, 0.01, 1.0);
  EXPECT_NEAR(w[0], 0.99f, 1e-7);
  EXPECT_NEAR(w[1], 1.01f, 1e-7);
}

TEST(AdamW, DecayOnlyWhereMarkedAndClipScaleApplied) {
  std::vector<float> w1 = {2.0f}, w2 = {2.0f}, zero = {0.0f};
  AdamW opt(AdamWConfig{.weight_decay = 0.5}, {1, 1});
  // Zero gradient: moments stay 0, so only the decoupled decay moves w.
  opt.Step({{w1, zero, true}, {w2, zero, false}}, 0.1, 1.0);
  EXPECT_FLOAT_EQ(w1[0], 2.0f * (1.0f - 0.1f * 0.5f));
  EXPECT_FLOAT_EQ(w2[0], 2.0f);

  // The clip factor scales the gradient before the moments: scaling g by s
  // scales m by s and v by s^2.
  std::vector<float> a = {0.0f}, ga = {2.0f};
  AdamW o2(AdamWConfig{.weight_decay = 0.0}, {1});
  o2.Step({{a, ga, false}}, 0.1, 0.25);
  EXPECT_FLOAT_EQ(o2.m(0)[0], 0.1f * 0.5f);
  EXPECT_FLOAT_EQ(o2.v(0)[0], 0.02f * 0.25f);
}

TEST(AdamW, StateRoundTripGivesIdenticalSteps) {
  std::vector<float> w1 = {0.3f, -0.7f}, w2;
  std::vector<float> g = {0.1f, 0.2f};
  AdamW a(AdamWConfig{}, {2});
  for (int s = 0; s < 5; ++s) a.Step({{w1, g, true}}, 1e-2, 1.0);
  w2 = w1;
  AdamW b(AdamWConfig{}, {2});
  b.SetState(a.step(), {a.m(0)}, {a.v(0)});
  for (int s = 0; s < 5; ++s) {
    g = {0.1f * s, -0.05f * s};
    a.Step({{w1, g, true}}, 1e-2, 1.0);
    b.Step({{w2, g, true}}, 1e-2, 1.0);
    ASSERT_EQ(w1, w2);  // bitwise
  }
  EXPECT_THROW(b.SetState(1, {{1.0f}}, {{1.0f}}), InvalidArgument);
  EXPECT_THROW(b.SetState(-1, {a.m(0)}, {a.v(0)}), InvalidArgument);
}

TEST(AdamW, RejectsBadConfigAndMismatchedSlots) {
  EXPECT_THROW(AdamW(AdamWConfig{.beta1 = 1.0}, {1}), InvalidArgument);
  EXPECT_THROW(AdamW(AdamWConfig{.eps = 0.0}, {1}), InvalidArgument);
  AdamW opt(AdamWConfig{}, {2});
  std::vector<float> w = {1.0f}, g = {1.0f};
  EXPECT_THROW(opt.Step({{w, g, false}}, 0.1, 1.0), InvalidArgument);
  EXPECT_THROW(opt.Step({}, 0.1, 1.0), InvalidArgument);
}

}  // namespace
}  // namespace relpos::train
