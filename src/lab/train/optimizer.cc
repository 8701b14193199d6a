#include "train/optimizer.h"

#include <cmath>
#include <utility>

#include "core/check.h"

namespace relpos::train {

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
    float* m = m_[k].data();
    float* v = v_[k].data();
    for (size_t i = 0; i < s.value.size(); ++i) {
      // Elementwise in double, stored in float: no reductions, so the result
      // does not depend on how the loop is scheduled.
      const double g = static_cast<double>(s.grad[i]) * grad_scale;
      const double mi = b1 * m[i] + (1.0 - b1) * g;
      const double vi = b2 * v[i] + (1.0 - b2) * g * g;
      m[i] = static_cast<float>(mi);
      v[i] = static_cast<float>(vi);
      double w = s.value[i];
      if (s.decay) w *= decay;  // decoupled decay (AdamW), before the step
      w -= lr * (mi / c1) / (std::sqrt(vi / c2) + config_.eps);
      s.value[i] = static_cast<float>(w);
    }
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
