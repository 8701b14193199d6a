// Benchmark workloads of the attention op, shared by `relpos bench`
// (src/cli/verb_bench.cc) and the Google Benchmark binary
// (bench/attention_bench.cc), so both time exactly the same calls and report
// the same FLOP and memory conventions. Implemented in src/lab/workloads/.
//
// Conventions (docs/math.md section 7, docs/benchmarks.md):
//   - FLOPs: vanilla attention's count for every variant, forward
//     4 B H Nq Nk d and backward 2.5x that. The relative variant's extra
//     4 Nq (2k+1) d (docs/math.md section 4) is deliberately NOT added, so a GFLOP/s
//     ratio between two variants is exactly their speed ratio.
//   - Self-attention: Nq = Nk = n, dk = dv = d, no masks, shared tables.
#ifndef RELPOS_LAB_BENCH_H_
#define RELPOS_LAB_BENCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "relpos/attention.h"
#include "relpos/rope.h"
#include "relpos/schemes.h"

namespace relpos::bench {

enum class Variant {
  kVanilla,    // fused path, both relative terms off (plain softmax attention)
  kRelative,   // fused path, key and value terms on, shared tables (Shaw)
  kReference,  // reference path, key and value terms on
};

// "vanilla", "relative", "reference".
const char* VariantName(Variant variant);

struct WorkloadShape {
  int64_t batch = 1;
  int64_t heads = 8;
  int64_t n = 1024;  // Nq = Nk
  int64_t dim = 64;  // dk = dv
  int64_t max_distance = 16;  // k; ignored by kVanilla
};

// Throws InvalidArgument unless batch, heads, n, dim >= 1 and
// max_distance >= 0, naming the values.
void ValidateShape(const WorkloadShape& s);

// docs/math.md section 7: 4 B H Nq Nk d, the same for every variant.
double ForwardFlops(const WorkloadShape& s);
// 2.5x the forward count.
double BackwardFlops(const WorkloadShape& s);

// Options that select `variant`'s path and terms. threads: 0 = OpenMP default.
AttentionOptions VariantOptions(Variant variant, int64_t max_distance,
                                int threads);

// Owns every buffer of one forward + backward problem, filled with seeded
// N(0, 1) data (tables scaled by 0.5, so the position terms matter but do not
// saturate the softmax).
class AttentionWorkload {
 public:
  AttentionWorkload(Variant variant, const WorkloadShape& shape, int threads,
                    uint64_t seed = 1);

  // out, lse = Attention(q, k, v, ak, av).
  void Forward();
  // Every gradient; needs out and lse, so Forward() must have run once.
  void Backward();

  // Peak bytes the path needs beyond inputs, outputs and gradients, forward
  // and backward together. Fused variants: FusedExtraBytes. Reference: its
  // row buffers as implemented (prob and dprob, 2 Nk floats per call; see
  // the reference implementation), computed rather than measured.
  int64_t ExtraBytes() const;
  // How ExtraBytes() was obtained, for labels: "FusedExtraBytes" or
  // "computed (reference row buffers)".
  std::string ExtraBytesSource() const;

  const WorkloadShape& shape() const { return shape_; }
  Variant variant() const { return variant_; }
  const std::vector<float>& out() const { return out_; }

 private:
  AttentionInputs<float> Inputs() const;

  Variant variant_;
  WorkloadShape shape_;
  AttentionOptions options_;
  int64_t table_rows_ = 0;  // 0 for vanilla: the tables are empty views
  std::vector<float> q_, k_, v_, ak_, av_, out_, lse_, dout_;
  std::vector<float> dq_, dk_, dv_, dak_, dav_;
  bool forward_done_ = false;
};

// ---------------------------------------------------------------------------
// The relative-scheme family (the registry of relpos/schemes.h; docs/math.md
// section 8), as `relpos bench --positions` times it: self-attention like
// the workloads above, each scheme of the registry that acts inside
// attention at its paper's default settings (SchemeBenchLayer), forward and
// backward with every learned input's gradient, the scheme's attention call
// exactly as the registry gives it. The scheme `none` is plain attention
// (the rows call it "vanilla").

// The registry layer of a workload: shape.heads heads of width shape.dim,
// not causal, the registry's default settings except that
// shape.max_distance sets max_distance (shaw) and k_left = max_distance,
// k_right = max(1, max_distance / 8) (shaw-asym; 64 gives w2v-BERT 2.0's
// 64 / 8).
SchemeLayer SchemeBenchLayer(const WorkloadShape& shape);
// Whether the scheme reads WorkloadShape::max_distance (shaw, shaw-asym).
bool SchemeUsesMaxDistance(const Scheme& scheme);

class SchemeWorkload {
 public:
  // `scheme`: one that acts inside attention, or none. Its attention call
  // is the registry's, with the conventions of the workloads above: every
  // table shared by the heads ([rows, d]) and filled directly (XL's key
  // table too, unclipped at k = n: 2n + 1 rows, with pb [H, d]). Throws
  // InvalidArgument for another scheme or a layer it cannot run (RoPE with
  // an odd dim).
  SchemeWorkload(const Scheme& scheme, const WorkloadShape& shape, int threads,
                 uint64_t seed = 1);

  void Forward();
  // Needs Forward() first.
  void Backward();

  // True when the attention call runs the fused kernel (kAuto chose it);
  // false when it falls back to the reference for this scheme.
  bool Fused() const { return fused_; }
  // Fused: FusedExtraBytes of the attention call (RoPE rotates into
  // buffers of the inputs' size, which are counted here too). Reference:
  // its row buffers, 2 Nk floats.
  int64_t ExtraBytes() const;
  const Scheme& scheme() const { return *scheme_; }
  const WorkloadShape& shape() const { return shape_; }

 private:
  AttentionInputs<float> Inputs() const;

  const Scheme* scheme_;
  WorkloadShape shape_;
  AttentionOptions options_;
  std::optional<RopeOptions> rope_;  // RoPE: rotate q, k around attention
  int64_t table_rows_ = 0;  // rows of ak / av / bias (0: none)
  bool fused_ = false;
  std::vector<float> q_, k_, v_, ak_, av_, bias_, pb_, out_, lse_, dout_;
  std::vector<float> qr_, kr_;  // RoPE: rotated q and k
  std::vector<float> dq_, dk_, dv_, dak_, dav_, dbias_, dpb_;
  bool forward_done_ = false;
};

// ---------------------------------------------------------------------------
// One pre-LayerNorm transformer encoder layer (the model's block,
// docs/model.md: attention then a GELU feed-forward, each with a residual)
// as an inference-forward workload, for `relpos bench --layer`. Implemented
// in src/lab/workloads/layer_workload.cc with the model's own block
// (src/model/transformer_block.h) and layers (src/model/nn), so it times exactly
// what the model runs.
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

// relpos's SGEMM (oneDNN) on size x size x size, C = A B: the baseline
// `relpos bench` measures beside attention (2 size^3 FLOPs per Run, with
// the calling thread's OpenMP thread count).
class SgemmWorkload {
 public:
  explicit SgemmWorkload(int64_t size, uint64_t seed = 7);
  void Run();
  double Flops() const;

 private:
  int64_t size_;
  std::vector<float> a_, b_, c_;
};

}  // namespace relpos::bench

#endif  // RELPOS_LAB_BENCH_H_
