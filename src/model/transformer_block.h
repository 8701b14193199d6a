// One pre-LayerNorm transformer block of the model in transformer.h, as a
// forward/backward pair over raw buffers (the way llm.c's gpt2_forward and
// gpt2_backward walk their layers):
//   h       = x + Dropout(MultiHeadAttention(LayerNorm1(x)))      attention
//   x_next  = h + Dropout(W2 GELU(W1 LayerNorm2(h) + b1) + b2)    feed-forward
// A seq2seq decoder block has a cross-attention sublayer between the two
// (Vaswani et al. 2017, section 3.1), over the encoder's output m:
//   hs      = x + Dropout(MultiHeadAttention(LayerNorm1(x)))      attention
//   h       = hs + Dropout(CrossAttention(LayerNormC(hs), m))     cross
//   x_next  = h + Dropout(W2 GELU(W1 LayerNorm2(h) + b1) + b2)    feed-forward
// The model owns the buffers and the parameter tensors; these functions only
// read and write them, so the same code serves training (one
// BlockActivations per block, kept for BlockBackward) and inference (one
// BlockActivations reused by every block).
#ifndef RELPOS_SRC_MODEL_TRANSFORMER_BLOCK_H_
#define RELPOS_SRC_MODEL_TRANSFORMER_BLOCK_H_

#include <cstdint>
#include <vector>

#include "model/nn/multi_head_attention.h"
#include "relpos/attention.h"

namespace relpos::model {

// Sizes of one block call: `batch` sequences padded to `length` positions.
// With `lengths` (as nn::MhaShape::lengths) the [rows, *] buffers hold only
// the valid positions, packed sequence after sequence; without, all
// batch * length of them.
struct BlockShape {
  int64_t batch = 0, length = 0, d_model = 0, heads = 0, d_ff = 0;
  const int64_t* lengths = nullptr;  // [batch] or null
  nn::MhaShape mha() const { return {batch, length, d_model, heads, lengths}; }
  int64_t rows() const { return mha().rows(); }
};

// Read-only parameter values of one block (docs/model.md names them
// blocks.L.ln1.gamma, blocks.L.attn.q.weight, ...). LayerNorm gains and
// biases are [d_model]; ff_in_w [d_ff, d_model], ff_in_b [d_ff], ff_out_w
// [d_model, d_ff], ff_out_b [d_model]; attn as nn::MhaWeights says.
template <typename T>
struct BlockWeights {
  const T *ln1_gamma = nullptr, *ln1_beta = nullptr;
  nn::MhaWeights<T> attn;
  const T *ln2_gamma = nullptr, *ln2_beta = nullptr;
  const T *ff_in_w = nullptr, *ff_in_b = nullptr;
  const T *ff_out_w = nullptr, *ff_out_b = nullptr;
  // Seq2seq decoder blocks only (null otherwise): LayerNormC and the
  // cross-attention's projections (no position tensors).
  const T *cross_ln_gamma = nullptr, *cross_ln_beta = nullptr;
  nn::MhaWeights<T> cross;
  bool has_cross() const { return cross.wq != nullptr; }
};

// Gradients, the same shapes as BlockWeights; all overwritten by
// BlockBackward.
template <typename T>
struct BlockGrads {
  T *ln1_gamma = nullptr, *ln1_beta = nullptr;
  nn::MhaGrads<T> attn;
  T *ln2_gamma = nullptr, *ln2_beta = nullptr;
  T *ff_in_w = nullptr, *ff_in_b = nullptr;
  T *ff_out_w = nullptr, *ff_out_b = nullptr;
  T *cross_ln_gamma = nullptr, *cross_ln_beta = nullptr;
  nn::MhaGrads<T> cross;
};

// What BlockForward leaves for BlockBackward (resized as needed).
template <typename T>
struct BlockActivations {
  std::vector<T> ln1, ln1_mean, ln1_rstd;  // LayerNorm1(x) [rows, d], stats
  nn::MhaCache<T> mha;
  std::vector<T> h;                        // x + attention branch [rows, d]
  std::vector<T> ln2, ln2_mean, ln2_rstd;  // LayerNorm2(h) [rows, d], stats
  std::vector<T> ff_pre, ff_act;  // W1 ln2 + b1, GELU of it [rows, d_ff]
  // Cross-attention blocks: hs = x + attention branch, LayerNormC(hs) and
  // its statistics, the cross-attention's cache.
  std::vector<T> hs, lnc, lnc_mean, lnc_rstd;
  nn::MhaCache<T> cross;
  // Dropout seeds of the branches; the caller sets them before BlockForward
  // (they are unused when dropout is off; cross only in cross blocks).
  uint64_t attn_drop_seed = 0, ff_drop_seed = 0, cross_drop_seed = 0;
};

// Working memory shared by every block of a pass (resized as needed).
template <typename T>
struct BlockScratch {
  std::vector<T> branch;   // [rows, d]: a branch's output
  std::vector<T> dbranch;  // [rows, d]: its gradient after dropout
  std::vector<T> dln;      // [rows, d]: gradient at a LayerNorm output
  std::vector<T> dff;      // [rows, d_ff]
  nn::MhaScratch<T> mha;
};

// What a seq2seq decoder block's cross-attention reads: the encoder's
// output and how its rows are laid out.
template <typename T>
struct BlockMemory {
  const T* memory = nullptr;   // [memory rows, d_model]
  nn::MhaShape shape;          // the source sentences (same batch)
  AttentionOptions attention;  // CrossAttentionOptions() (+ key lengths)
  T* dmemory = nullptr;        // BlockBackward ADDS dL/dmemory here
};

// Cross-attention's options: plain scaled dot-product attention (no
// position term: Shaw et al. 2018 put relative positions in self-attention
// only; not causal: every target position sees the whole source), path
// kAuto. A padded layout adds key_lengths.
AttentionOptions CrossAttentionOptions();

struct BlockOptions {
  // Drop probability of both branches, in [0, 1); 0 switches dropout off.
  double dropout = 0.0;
  // What attention does with positions beyond `attention` (RoPE, XL):
  // model/positions.h's MhaPositionsFor.
  nn::MhaPositions positions;
};

// x [rows, d] -> x_next [rows, d]. `attention` carries the position scheme's
// options, causality and the key lengths (see nn::MultiHeadAttentionForward).
// x_next may alias x (x is last read before x_next is written); BlockBackward
// needs the original x, so training keeps them apart. `memory` is given
// exactly for the blocks with cross-attention (w.has_cross()). `weights`:
// how the self-attention and feed-forward products read their matrices
// (null: the float values; nn/weight_reader.h); blocks with cross-attention
// take none (the decoder session runs those in inference).
template <typename T>
void BlockForward(const T* x, const BlockWeights<T>& w, T* x_next,
                  BlockActivations<T>* acts, BlockScratch<T>* scratch,
                  const BlockShape& shape, const AttentionOptions& attention,
                  const BlockOptions& options,
                  const BlockMemory<T>* memory = nullptr,
                  const nn::WeightReader<T>* weights = nullptr);

// Differentiates BlockForward. dresid [rows, d] holds dL/dx_next on entry and
// dL/dx on return; x, w, acts, attention, options and memory must be those
// of the forward call (memory->dmemory receives the memory's gradient,
// added). Every gradient in `grads` is overwritten.
template <typename T>
void BlockBackward(const T* x, const BlockWeights<T>& w,
                   const BlockActivations<T>& acts, T* dresid,
                   const BlockGrads<T>& grads, BlockScratch<T>* scratch,
                   const BlockShape& shape, const AttentionOptions& attention,
                   const BlockOptions& options,
                   const BlockMemory<T>* memory = nullptr);

// Dropout (forward = true) or its backward over a [rows, d_model] buffer
// (in may alias out) with the masks of the padded [batch, length, d_model]
// layout: element (b, i, c) uses mask index (b * length + i) * d_model + c,
// packed or not, so packing the rows changes no mask.
template <typename T>
void RowDropout(bool forward, const T* in, T* out, const BlockShape& shape,
                double p, uint64_t seed);

// v->resize(n) for the int64_t sizes the model computes with.
template <typename T>
void Resize(std::vector<T>* v, int64_t n) {
  v->resize(static_cast<size_t>(n));
}

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_TRANSFORMER_BLOCK_H_
