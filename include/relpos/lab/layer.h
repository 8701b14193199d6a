// One multi-head self-attention layer with relative position representations
// (Shaw et al., 2018, section 3), owning its weights:
//
//   q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv    [B*N, d_model]
//   a       = Attention(q, k, v; AK, AV) per head     (docs/math.md section 2)
//   y       = merge_heads(a) Wo^T + bo                 [B*N, d_model]
//
// Forward keeps what Backward needs, so one object serves one
// forward/backward pair at a time.
#ifndef RELPOS_LAB_LAYER_H_
#define RELPOS_LAB_LAYER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "relpos/tensor_view.h"

namespace relpos {

struct LayerConfig {
  int64_t d_model = 64;
  int64_t heads = 4;          // divides d_model; dh = d_model / heads
  int64_t max_distance = 16;  // k: AK, AV have 2k+1 rows
  bool per_head_tables = false;
  bool key_term = true, value_term = true;
  bool causal = false;
  uint64_t seed = 0;  // weights N(0, 1/d_model), biases 0, tables Xavier
};

class RelativeAttentionLayer {
 public:
  // InvalidArgument for inconsistent sizes.
  explicit RelativeAttentionLayer(const LayerConfig& config);
  ~RelativeAttentionLayer();
  RelativeAttentionLayer(RelativeAttentionLayer&&) noexcept;
  RelativeAttentionLayer& operator=(RelativeAttentionLayer&&) noexcept;

  const LayerConfig& config() const;

  // x [B, N, d_model] -> y [B, N, d_model]. key_lengths: empty, or one valid
  // length per batch item (keys beyond are invisible).
  void Forward(ConstView<float> x, TensorView<float> y,
               const std::vector<int64_t>& key_lengths = {});
  // dy [B, N, d_model] -> dx [B, N, d_model] for the last Forward; every
  // parameter gradient is overwritten.
  void Backward(ConstView<float> dy, TensorView<float> dx);

  // "q.weight" [d, d], "q.bias" [d], likewise k, v, out; "rel_k", "rel_v"
  // [2k+1, dh] or [H, 2k+1, dh] when their term is on.
  std::vector<std::string> ParameterNames() const;
  TensorView<float> Parameter(const std::string& name);
  ConstView<float> Gradient(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relpos

#endif  // RELPOS_LAB_LAYER_H_
