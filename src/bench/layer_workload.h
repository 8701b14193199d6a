// One pre-LayerNorm transformer encoder layer (the model's block,
// docs/model.md: attention then a GELU feed-forward, each with a residual)
// as an inference-forward benchmark workload, for `relpos bench --layer`
// (src/cli/verb_bench.cc). Implemented with the model's own block
// (src/model/transformer_block.h) and layers (src/nn), so it times exactly
// what the model runs.
//
// The interface includes only public headers, so the command line (a thin
// client of include/relpos/) can use it.
#ifndef RELPOS_SRC_BENCH_LAYER_WORKLOAD_H_
#define RELPOS_SRC_BENCH_LAYER_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace relpos::bench {

struct LayerShape {
  int64_t batch = 1;
  int64_t n = 1024;  // sequence length
  int64_t d_model = 512, heads = 8, d_ff = 2048;
  // Shaw et al.'s relative key and value tables [2k+1, d_model / heads],
  // shared by the heads, clip k = max_distance; false: plain attention.
  bool relative = true;
  int64_t max_distance = 16;
};

// Throws InvalidArgument naming the values unless batch, n, d_model, heads,
// d_ff >= 1, heads divides d_model and max_distance >= 0.
void ValidateLayerShape(const LayerShape& shape);

class LayerWorkload {
 public:
  // Seeded weights (N(0, 1/fan_in) matrices, small biases, LayerNorm gains
  // near 1, tables N(0, 0.25)) and input x ~ N(0, 1) [batch * n, d_model].
  // threads: OpenMP threads of the attention kernel (0 = OpenMP default);
  // GEMMs follow the calling thread's OpenMP setting.
  LayerWorkload(const LayerShape& shape, int threads, uint64_t seed = 1);
  ~LayerWorkload();
  LayerWorkload(const LayerWorkload&) = delete;
  LayerWorkload& operator=(const LayerWorkload&) = delete;

  // y = Layer(x): the inference forward (no dropout), every row valid.
  void Forward();
  // Bytes this workload holds at the forward's peak, computed: the layer's
  // weights, x and y, every activation and scratch buffer the block keeps
  // (their capacities after Forward()), plus the attention kernel's own
  // workspace (FusedExtraBytes). Needs Forward() first.
  int64_t PeakBytes() const;
  const std::vector<float>& output() const;
  const LayerShape& shape() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relpos::bench

#endif  // RELPOS_SRC_BENCH_LAYER_WORKLOAD_H_
