// BlockForward / BlockBackward of transformer_block.h, composed from the
// layers in src/model/nn/. The order of the floating-point operations here is the
// model's contract with its checkpoints: training runs are reproducible bit
// for bit, so reordering anything below changes every trained model.
#include "model/transformer_block.h"

#include "model/nn/dropout.h"
#include "model/nn/gelu.h"
#include "model/nn/layer_norm.h"
#include "model/nn/linear.h"
#include "base/check.h"
#include "base/threads.h"

namespace relpos::model {

AttentionOptions CrossAttentionOptions() {
  AttentionOptions o;
  o.path = AttentionPath::kAuto;
  o.causal = false;
  o.max_distance = 0;
  o.key_term = false;
  o.value_term = false;
  o.per_head_tables = false;
  return o;
}

namespace {

// The cross-attention sublayer of a seq2seq decoder block, forward:
//   hs = x + branch (the attention sublayer's), lnc = LayerNormC(hs),
//   branch = Dropout(CrossAttention(lnc, memory)).
template <typename T>
void CrossSublayerForward(const T* x, const BlockWeights<T>& w,
                          BlockActivations<T>& a, std::vector<T>& branch,
                          const BlockShape& shape, const BlockOptions& options,
                          const BlockMemory<T>& memory) {
  const int64_t rows = shape.rows(), d = shape.d_model;
  Resize(&a.hs, rows * d);
  Resize(&a.lnc, rows * d);
  Resize(&a.lnc_mean, rows);
  Resize(&a.lnc_rstd, rows);
  nn::AddLayerNormForward<T>(x, branch.data(), w.cross_ln_gamma,
                             w.cross_ln_beta, a.hs.data(), a.lnc.data(),
                             a.lnc_mean.data(), a.lnc_rstd.data(), {rows, d});
  nn::CrossAttentionForward<T>(a.lnc.data(), memory.memory, w.cross,
                               branch.data(), &a.cross, shape.mha(),
                               memory.shape, memory.attention);
  if (options.dropout > 0.0) {
    RowDropout<T>(true, branch.data(), branch.data(), shape, options.dropout,
                  a.cross_drop_seed);
  }
}

// Differentiates `h = hs + Dropout(CrossAttention(LayerNormC(hs), memory))`:
// dresid holds dL/dh on entry and dL/dhs on return (the identity path plus
// LayerNormC's); memory.dmemory receives the memory's share.
template <typename T>
void CrossSublayerBackward(const BlockWeights<T>& w,
                           const BlockActivations<T>& a, T* dresid,
                           const BlockGrads<T>& grads, BlockScratch<T>& s,
                           const BlockShape& shape, const BlockOptions& options,
                           const BlockMemory<T>& memory) {
  const T* dcross = dresid;
  if (options.dropout > 0.0) {
    RowDropout<T>(false, dresid, s.dbranch.data(), shape, options.dropout,
                  a.cross_drop_seed);
    dcross = s.dbranch.data();
  }
  nn::CrossAttentionBackward<T>(a.lnc.data(), memory.memory, w.cross, a.cross,
                                dcross, s.dln.data(), memory.dmemory,
                                grads.cross, &s.mha, shape.mha(), memory.shape,
                                memory.attention);
  nn::LayerNormBackward<T>(a.hs.data(), w.cross_ln_gamma, a.lnc_mean.data(),
                           a.lnc_rstd.data(), s.dln.data(), dresid,
                           grads.cross_ln_gamma, grads.cross_ln_beta,
                           {shape.rows(), shape.d_model},
                           {.accumulate_dx = true});
}

}  // namespace

template <typename T>
void RowDropout(bool forward, const T* in, T* out, const BlockShape& s,
                double p, uint64_t seed) {
  const int64_t d = s.d_model;
  auto apply = [&](int64_t row, int64_t count, int64_t index) {
    const nn::DropoutOptions o{p, seed, index};
    if (forward) {
      nn::DropoutForward<T>(in + row * d, out + row * d, count * d, o);
    } else {
      nn::DropoutBackward<T>(in + row * d, out + row * d, count * d, o);
    }
  };
  if (s.lengths == nullptr) {
    apply(0, s.rows(), 0);
    return;
  }
  int64_t row = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    apply(row, s.lengths[b], b * s.length * d);
    row += s.lengths[b];
  }
}

// x [rows, d] -> x_next [rows, d]; keeps ln1, mha, h, ln2, ff_pre, ff_act
// ([rows, d] except ff_* [rows, d_ff]) in *acts.
template <typename T>
void BlockForward(const T* x, const BlockWeights<T>& w, T* x_next,
                  BlockActivations<T>* acts, BlockScratch<T>* scratch,
                  const BlockShape& shape, const AttentionOptions& attention,
                  const BlockOptions& options, const BlockMemory<T>* memory,
                  const nn::WeightReader<T>* weights) {
  RELPOS_CHECK_ARG(memory == nullptr || weights == nullptr,
                   "BlockForward: a block with cross-attention reads float "
                   "weights only");
  const int64_t rows = shape.rows(), d = shape.d_model, dff = shape.d_ff;
  const nn::LayerNormShape ln_shape{rows, d};
  const bool dropout = options.dropout > 0.0;
  BlockActivations<T>& a = *acts;
  std::vector<T>& branch = scratch->branch;
  Resize(&branch, rows * d);

  // ---- Attention sublayer: h = x + Dropout(MultiHeadAttention(ln1)) ----
  // ln1 = LayerNorm1(x)
  Resize(&a.ln1, rows * d);
  Resize(&a.ln1_mean, rows);
  Resize(&a.ln1_rstd, rows);
  nn::LayerNormForward<T>(x, w.ln1_gamma, w.ln1_beta, a.ln1.data(),
                          a.ln1_mean.data(), a.ln1_rstd.data(), ln_shape);
  // branch = Dropout(MultiHeadAttention(ln1))
  nn::MultiHeadAttentionForward<T>(a.ln1.data(), w.attn, branch.data(), &a.mha,
                                   shape.mha(), attention, options.positions,
                                   weights);
  if (dropout) {
    RowDropout<T>(true, branch.data(), branch.data(), shape, options.dropout,
                  a.attn_drop_seed);
  }
  // ---- Cross-attention sublayer (seq2seq decoder blocks) ----
  // hs = x + branch; branch = Dropout(CrossAttention(LayerNormC(hs), m))
  const T* residual = x;  // what the attention branches are added to
  if (memory != nullptr) {
    CrossSublayerForward<T>(x, w, a, branch, shape, options, *memory);
    residual = a.hs.data();
  }
  // ---- Feed-forward sublayer: x_next = h + Dropout(W2 ff_act + b2) ----
  // h = x (or hs) + branch; ln2 = LayerNorm2(h), in one pass
  Resize(&a.h, rows * d);
  Resize(&a.ln2, rows * d);
  Resize(&a.ln2_mean, rows);
  Resize(&a.ln2_rstd, rows);
  nn::AddLayerNormForward<T>(residual, branch.data(), w.ln2_gamma, w.ln2_beta,
                             a.h.data(), a.ln2.data(), a.ln2_mean.data(),
                             a.ln2_rstd.data(), ln_shape);
  // ff_pre = W1 ln2 + b1; ff_act = GELU(ff_pre)
  Resize(&a.ff_pre, rows * dff);
  Resize(&a.ff_act, rows * dff);
  nn::LinearWith<T>(weights, a.ln2.data(), w.ff_in_w, w.ff_in_b,
                    a.ff_pre.data(), {rows, d, dff});
  nn::GeluForward<T>(a.ff_pre.data(), a.ff_act.data(), rows * dff);
  // branch = Dropout(W2 ff_act + b2); x_next = h + branch
  nn::LinearWith<T>(weights, a.ff_act.data(), w.ff_out_w, w.ff_out_b,
                    branch.data(), {rows, dff, d});
  if (dropout) {
    RowDropout<T>(true, branch.data(), branch.data(), shape, options.dropout,
                  a.ff_drop_seed);
  }
#pragma omp parallel for schedule(static) if (rows * d >= base::kMinParallelWork)
  for (int64_t i = 0; i < rows * d; ++i) x_next[i] = a.h[i] + branch[i];
}

// dresid [rows, d]: dL/dx_next in, dL/dx out. Sublayers in reverse order;
// each LayerNorm backward adds its dx into dresid, the identity path's share.
template <typename T>
void BlockBackward(const T* x, const BlockWeights<T>& w,
                   const BlockActivations<T>& acts, T* dresid,
                   const BlockGrads<T>& grads, BlockScratch<T>* scratch,
                   const BlockShape& shape, const AttentionOptions& attention,
                   const BlockOptions& options, const BlockMemory<T>* memory) {
  const int64_t rows = shape.rows(), d = shape.d_model, dff = shape.d_ff;
  const nn::LayerNormShape ln_shape{rows, d};
  const bool dropout = options.dropout > 0.0;
  const BlockActivations<T>& a = acts;
  BlockScratch<T>& s = *scratch;
  Resize(&s.dbranch, rows * d);
  Resize(&s.dff, rows * dff);
  Resize(&s.dln, rows * d);

  // ---- Feed-forward sublayer ----
  // Differentiates `x_next = h + Dropout(W2 ff_act + b2)`: dresid is
  // dL/dx_next and becomes dL/dh (the identity path) plus the branch's.
  // Without dropout the branch sees dresid itself (no copy).
  const T* dff_out = dresid;
  if (dropout) {
    RowDropout<T>(false, dresid, s.dbranch.data(), shape, options.dropout,
                  a.ff_drop_seed);
    dff_out = s.dbranch.data();
  }
  nn::LinearBackward<T>(a.ff_act.data(), w.ff_out_w, dff_out, s.dff.data(),
                        grads.ff_out_w, grads.ff_out_b, {rows, dff, d});
  // Differentiates `ff_act = GELU(ff_pre)` and `ff_pre = W1 ln2 + b1`.
  nn::GeluBackward<T>(a.ff_pre.data(), s.dff.data(), s.dff.data(), rows * dff);
  nn::LinearBackward<T>(a.ln2.data(), w.ff_in_w, s.dff.data(), s.dln.data(),
                        grads.ff_in_w, grads.ff_in_b, {rows, d, dff});
  // Differentiates `ln2 = LayerNorm2(h)`, adding into dresid = dL/dh.
  nn::LayerNormBackward<T>(a.h.data(), w.ln2_gamma, a.ln2_mean.data(),
                           a.ln2_rstd.data(), s.dln.data(), dresid,
                           grads.ln2_gamma, grads.ln2_beta, ln_shape,
                           {.accumulate_dx = true});

  // ---- Cross-attention sublayer: dresid becomes dL/dhs ----
  if (memory != nullptr) {
    CrossSublayerBackward<T>(w, a, dresid, grads, s, shape, options, *memory);
  }

  // ---- Attention sublayer ----
  // Differentiates `h = x + Dropout(MultiHeadAttention(ln1))` (cross
  // blocks: `hs = ...`).
  const T* dattn_out = dresid;
  if (dropout) {
    RowDropout<T>(false, dresid, s.dbranch.data(), shape, options.dropout,
                  a.attn_drop_seed);
    dattn_out = s.dbranch.data();
  }
  nn::MultiHeadAttentionBackward<T>(a.ln1.data(), w.attn, a.mha, dattn_out,
                                    s.dln.data(), grads.attn, &s.mha,
                                    shape.mha(), attention, options.positions);
  // Differentiates `ln1 = LayerNorm1(x)`, adding into dresid = dL/dx.
  nn::LayerNormBackward<T>(x, w.ln1_gamma, a.ln1_mean.data(), a.ln1_rstd.data(),
                           s.dln.data(), dresid, grads.ln1_gamma,
                           grads.ln1_beta, ln_shape, {.accumulate_dx = true});
}

#define RELPOS_INSTANTIATE_BLOCK(T)                                          \
  template void RowDropout<T>(bool, const T*, T*, const BlockShape&, double, \
                              uint64_t);                                     \
  template void BlockForward<T>(                                             \
      const T*, const BlockWeights<T>&, T*, BlockActivations<T>*,            \
      BlockScratch<T>*, const BlockShape&, const AttentionOptions&,          \
      const BlockOptions&, const BlockMemory<T>*,                            \
      const nn::WeightReader<T>*);                                           \
  template void BlockBackward<T>(                                            \
      const T*, const BlockWeights<T>&, const BlockActivations<T>&, T*,      \
      const BlockGrads<T>&, BlockScratch<T>*, const BlockShape&,             \
      const AttentionOptions&, const BlockOptions&, const BlockMemory<T>*);
RELPOS_INSTANTIATE_BLOCK(float)
RELPOS_INSTANTIATE_BLOCK(double)
#undef RELPOS_INSTANTIATE_BLOCK

}  // namespace relpos::model
