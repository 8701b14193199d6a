// AdamW's update is element-wise in double. The loop is a SIMD loop
// (Highway dynamic dispatch, as in nn/gelu.cc) over chunks shared by the
// threads: the scalar loop was 4% of a seq2seq training step. Each lane
// makes the scalar form's operations in its order (multiplies, adds, one
// division, one square root; the file is compiled without contraction into
// fused multiply-adds), so every SIMD target, every thread count and the
// scalar tail give the same bits.
#include "train/optimizer.h"

// foreach_target.h must come first: it re-includes this file once per SIMD
// target.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "train/optimizer.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#ifndef RELPOS_TRAIN_ADAMW_CONSTANTS_
#define RELPOS_TRAIN_ADAMW_CONSTANTS_
namespace relpos::train {
// The constants of one AdamW update (Step computes them).
struct AdamWStepConstants {
  double b1, b2, one_minus_b1, one_minus_b2, c1, c2, lr, eps, decay,
      grad_scale;
  bool apply_decay;
};
}  // namespace relpos::train
#endif

HWY_BEFORE_NAMESPACE();
namespace relpos::train {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Elements [0, floor(n / lanes) * lanes) of the update; returns how many.
int64_t AdamWUpdate(float* value, const float* grad, float* m, float* v,
                    int64_t n, const AdamWStepConstants& k) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  const auto b1 = hn::Set(dd, k.b1), b2 = hn::Set(dd, k.b2),
             ob1 = hn::Set(dd, k.one_minus_b1),
             ob2 = hn::Set(dd, k.one_minus_b2), c1 = hn::Set(dd, k.c1),
             c2 = hn::Set(dd, k.c2), lr = hn::Set(dd, k.lr),
             eps = hn::Set(dd, k.eps), decay = hn::Set(dd, k.decay),
             scale = hn::Set(dd, k.grad_scale);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = hn::Mul(hn::PromoteTo(dd, hn::LoadU(df, grad + i)), scale);
    const auto mi = hn::Add(hn::Mul(b1, hn::PromoteTo(dd, hn::LoadU(df, m + i))),
                            hn::Mul(ob1, g));
    const auto vi =
        hn::Add(hn::Mul(b2, hn::PromoteTo(dd, hn::LoadU(df, v + i))),
                hn::Mul(hn::Mul(ob2, g), g));
    hn::StoreU(hn::DemoteTo(df, mi), df, m + i);
    hn::StoreU(hn::DemoteTo(df, vi), df, v + i);
    auto w = hn::PromoteTo(dd, hn::LoadU(df, value + i));
    if (k.apply_decay) w = hn::Mul(w, decay);
    const auto step = hn::Div(hn::Mul(lr, hn::Div(mi, c1)),
                              hn::Add(hn::Sqrt(hn::Div(vi, c2)), eps));
    hn::StoreU(hn::DemoteTo(df, hn::Sub(w, step)), df, value + i);
  }
  return i;
}

}  // namespace HWY_NAMESPACE
}  // namespace relpos::train
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/check.h"

namespace relpos::train {

HWY_EXPORT(AdamWUpdate);

namespace {

// Elements [begin, n) in scalar form: what each SIMD lane computes.
void AdamWUpdateScalar(float* value, const float* grad, float* m, float* v,
                       int64_t begin, int64_t n, const AdamWStepConstants& k) {
  for (int64_t i = begin; i < n; ++i) {
    const double g = static_cast<double>(grad[i]) * k.grad_scale;
    const double mi = k.b1 * m[i] + k.one_minus_b1 * g;
    const double vi = k.b2 * v[i] + k.one_minus_b2 * g * g;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    double w = value[i];
    if (k.apply_decay) w *= k.decay;  // decoupled decay (AdamW), before the step
    w -= k.lr * (mi / k.c1) / (std::sqrt(vi / k.c2) + k.eps);
    value[i] = static_cast<float>(w);
  }
}

// Chunks the threads share: element-wise, so any split gives the same bits.
constexpr int64_t kChunk = 8192;

}  // namespace


void Validate(const AdamWConfig& c) {
  RELPOS_CHECK_ARG(c.beta1 >= 0.0 && c.beta1 < 1.0,
                   "beta1 must be in [0, 1) (got " << c.beta1 << ")");
  RELPOS_CHECK_ARG(c.beta2 >= 0.0 && c.beta2 < 1.0,
                   "beta2 must be in [0, 1) (got " << c.beta2 << ")");
  RELPOS_CHECK_ARG(c.eps > 0.0 && std::isfinite(c.eps),
                   "eps must be > 0 (got " << c.eps << ")");
  RELPOS_CHECK_ARG(
      c.weight_decay >= 0.0 && c.weight_decay < 1.0,
      "weight_decay must be in [0, 1) (got " << c.weight_decay << ")");
}

void Validate(const ScheduleConfig& c) {
  RELPOS_CHECK_ARG(c.peak_lr > 0.0 && c.peak_lr <= 10.0,
                   "lr must be in (0, 10] (got " << c.peak_lr << ")");
  RELPOS_CHECK_ARG(c.total_steps >= 1,
                   "steps must be >= 1 (got " << c.total_steps << ")");
  RELPOS_CHECK_ARG(c.warmup_steps >= 0 && c.warmup_steps <= c.total_steps,
                   "warmup_steps must be in [0, steps="
                       << c.total_steps << "] (got " << c.warmup_steps << ")");
  RELPOS_CHECK_ARG(
      c.min_lr_ratio >= 0.0 && c.min_lr_ratio <= 1.0,
      "min_lr_ratio must be in [0, 1] (got " << c.min_lr_ratio << ")");
}

double LearningRate(const ScheduleConfig& c, int64_t step) {
  if (step < c.warmup_steps) {
    // (step + 1) so that the very first update already moves the weights.
    return c.peak_lr * static_cast<double>(step + 1) /
           static_cast<double>(c.warmup_steps);
  }
  const int64_t decay_steps = c.total_steps - c.warmup_steps;
  if (decay_steps <= 0 || step >= c.total_steps)
    return c.peak_lr * c.min_lr_ratio;
  const double progress = static_cast<double>(step - c.warmup_steps) /
                          static_cast<double>(decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return c.peak_lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine);
}

double GradNorm(const std::vector<ParamSlot>& slots) {
  // Double accumulation in a fixed order: the norm (and hence the clipping
  // factor) is the same on every run and every thread count.
  double sum = 0.0;
  for (const ParamSlot& s : slots) {
    for (float g : s.grad) sum += static_cast<double>(g) * g;
  }
  return std::sqrt(sum);
}

double ClipScale(double norm, double max_norm) {
  if (max_norm > 0.0 && norm > max_norm) return max_norm / norm;
  return 1.0;
}

AdamW::AdamW(const AdamWConfig& config, std::vector<int64_t> sizes)
    : config_(config) {
  Validate(config_);
  m_.reserve(sizes.size());
  v_.reserve(sizes.size());
  for (int64_t n : sizes) {
    RELPOS_CHECK_ARG(n >= 0, "tensor size must be >= 0 (got " << n << ")");
    m_.emplace_back(static_cast<size_t>(n), 0.0f);
    v_.emplace_back(static_cast<size_t>(n), 0.0f);
  }
}

void AdamW::Step(const std::vector<ParamSlot>& slots, double lr,
                 double grad_scale) {
  RELPOS_CHECK_ARG(slots.size() == m_.size(),
                   "AdamW::Step: " << slots.size() << " tensors, optimiser has "
                                   << m_.size());
  const double b1 = config_.beta1, b2 = config_.beta2;
  // Bias corrections 1 - beta^t with t = step_ + 1 (the update being made).
  const double t = static_cast<double>(step_ + 1);
  const double c1 = 1.0 - std::pow(b1, t);
  const double c2 = 1.0 - std::pow(b2, t);
  const double decay = 1.0 - lr * config_.weight_decay;
  for (size_t k = 0; k < slots.size(); ++k) {
    const ParamSlot& s = slots[k];
    RELPOS_CHECK_ARG(
        s.value.size() == m_[k].size() && s.grad.size() == m_[k].size(),
        "AdamW::Step: tensor " << k << " has " << s.value.size()
                               << " values, optimiser expects "
                               << m_[k].size());
  }
  // Elementwise in double, stored in float: no reductions, so the result
  // does not depend on how the loop is scheduled.
  const AdamWStepConstants constants{.b1 = b1,
                                     .b2 = b2,
                                     .one_minus_b1 = 1.0 - b1,
                                     .one_minus_b2 = 1.0 - b2,
                                     .c1 = c1,
                                     .c2 = c2,
                                     .lr = lr,
                                     .eps = config_.eps,
                                     .decay = decay,
                                     .grad_scale = grad_scale,
                                     .apply_decay = false};
  // (tensor, chunk) items in one parallel loop: many tensors are small.
  std::vector<std::pair<size_t, int64_t>> items;
  for (size_t k = 0; k < slots.size(); ++k) {
    const int64_t n = static_cast<int64_t>(slots[k].value.size());
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      items.emplace_back(k, begin);
    }
  }
  const int64_t count = static_cast<int64_t>(items.size());
#pragma omp parallel for schedule(static) if (count > 1)
  for (int64_t item = 0; item < count; ++item) {
    const auto [k, begin] = items[item];
    const ParamSlot& s = slots[k];
    AdamWStepConstants c = constants;
    c.apply_decay = s.decay;
    const int64_t n =
        std::min(kChunk, static_cast<int64_t>(s.value.size()) - begin);
    float* value = s.value.data() + begin;
    const float* grad = s.grad.data() + begin;
    float* m = m_[k].data() + begin;
    float* v = v_[k].data() + begin;
    const int64_t done =
        HWY_DYNAMIC_DISPATCH(AdamWUpdate)(value, grad, m, v, n, c);
    AdamWUpdateScalar(value, grad, m, v, done, n, c);
  }
  ++step_;
}

void AdamW::SetState(int64_t step, std::vector<std::vector<float>> m,
                     std::vector<std::vector<float>> v) {
  RELPOS_CHECK_ARG(step >= 0,
                   "optimizer step must be >= 0 (got " << step << ")");
  RELPOS_CHECK_ARG(m.size() == m_.size() && v.size() == v_.size(),
                   "optimizer state has " << m.size() << "/" << v.size()
                                          << " tensors, expected "
                                          << m_.size());
  for (size_t k = 0; k < m_.size(); ++k) {
    RELPOS_CHECK_ARG(m[k].size() == m_[k].size() && v[k].size() == v_[k].size(),
                     "optimizer state tensor " << k << " has " << m[k].size()
                                               << " values, expected "
                                               << m_[k].size());
  }
  step_ = step;
  m_ = std::move(m);
  v_ = std::move(v);
}

}  // namespace relpos::train

#endif  // HWY_ONCE
