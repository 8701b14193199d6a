// The optimiser side of training: AdamW (Loshchilov and Hutter, 2019), the
// learning-rate schedule (linear warm-up, then cosine decay to a floor) and
// gradient-norm clipping.
//
// The optimiser works on flat float buffers, one per parameter tensor, so it
// knows nothing about the model: the trainer hands it each tensor's value and
// gradient in the model's stable parameter order. Every reduction runs in a
// fixed order in double precision, so a step is bitwise reproducible and
// independent of the thread count.
#ifndef RELPOS_SRC_TRAIN_OPTIMIZER_H_
#define RELPOS_SRC_TRAIN_OPTIMIZER_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace relpos::train {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-9;
  // Decoupled weight decay: w -= lr * weight_decay * w, applied only to the
  // tensors marked `decay` (matrices; not biases, norm gains or position
  // tables, which common practice leaves undecayed).
  double weight_decay = 0.01;
};
void Validate(const AdamWConfig& config);  // InvalidArgument naming the field

// Linear warm-up from 0 to `peak_lr` over `warmup_steps`, then half a cosine
// from `peak_lr` down to `peak_lr * min_lr_ratio` at `total_steps`; constant
// afterwards. Steps count from 0 (the first update uses step 0).
struct ScheduleConfig {
  double peak_lr = 1e-3;
  int64_t warmup_steps = 100;
  int64_t total_steps = 1000;
  double min_lr_ratio = 0.1;
};
void Validate(const ScheduleConfig& config);
double LearningRate(const ScheduleConfig& config, int64_t step);

// One tensor as the optimiser sees it.
struct ParamSlot {
  std::span<float> value;
  std::span<const float> grad;
  bool decay = false;
};

// Global L2 norm of all gradients (accumulated in double, tensor by tensor in
// order). Returns the norm; when it exceeds `max_norm` > 0, `scale` is set to
// max_norm / norm, else to 1. Non-finite norms are returned as they are.
double GradNorm(const std::vector<ParamSlot>& slots);
double ClipScale(double norm, double max_norm);

class AdamW {
 public:
  // `sizes[t]` = element count of tensor t; the moments start at zero.
  AdamW(const AdamWConfig& config, std::vector<int64_t> sizes);

  // One update of every tensor with learning rate `lr`; each gradient is
  // multiplied by `grad_scale` first (the clipping factor). Uses bias
  // correction with the internal step count, which it then increments.
  void Step(const std::vector<ParamSlot>& slots, double lr, double grad_scale);

  int64_t step() const { return step_; }
  const AdamWConfig& config() const { return config_; }
  // First and second moments of tensor t (checkpointing).
  const std::vector<float>& m(size_t t) const { return m_[t]; }
  const std::vector<float>& v(size_t t) const { return v_[t]; }
  size_t num_tensors() const { return m_.size(); }
  // Restores a saved state; sizes must match (InvalidArgument otherwise).
  void SetState(int64_t step, std::vector<std::vector<float>> m,
                std::vector<std::vector<float>> v);

 private:
  AdamWConfig config_;
  int64_t step_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_OPTIMIZER_H_
