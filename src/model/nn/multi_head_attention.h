// Multi-head self-attention with optional relative position representations
// (Shaw et al., 2018, section 3) or another scheme of the family
// (docs/math.md section 8):
//   q = x Wq^T + bq,  k = x Wk^T + bk,  v = x Wv^T + bv     [B*N, d_model]
//   split into heads                                        [B, H, N, dh]
//   RoPE only:  q_i <- R_{i+off} q_i,  k_j <- R_j k_j        (relpos/rope.h)
//   XL only:    q_i <- q_i + u_h,  AK_h[r+k] = W_h R_{-r},  pb = v - u
//   a = Attention(q, k, v; AK, AV, bias, pb)   relpos::AttentionForward
//                                               (docs/math.md section 2)
//   y = merge(a) Wo^T + bo                                   [B*N, d_model]
// Cross-attention (Vaswani et al. 2017, section 3.2.3, "encoder-decoder
// attention") is the same layer with k and v projected from a memory (the
// encoder's output) instead of x, and no position term (Shaw et al. 2018
// put relative positions in self-attention only):
//   q = x Wq^T + bq,  k = m Wk^T + bk,  v = m Wv^T + bv,  Nq != Nk
// The layer neither knows nor cares which attention implementation runs
// (AttentionPath::kAuto unless the caller's options say otherwise).
#ifndef RELPOS_SRC_MODEL_NN_MULTI_HEAD_ATTENTION_H_
#define RELPOS_SRC_MODEL_NN_MULTI_HEAD_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "model/nn/weight_reader.h"
#include "relpos/attention.h"
#include "relpos/rope.h"
#include "relpos/schemes.h"

namespace relpos::nn {

// What the layer does with positions beyond AttentionOptions: the schemes
// that change q and k (RoPE) or build their table from weights (XL).
struct MhaPositions {
  // RoPE: rotate every head's q at positions i + off (off = the attention's
  // query offset, 0 by default for self-attention) and k at positions j
  // before attention (RopeHeads); attention then runs with no relative term.
  bool rope = false;
  double rope_base = 10000.0;
  RopeLayout rope_layout = RopeLayout::kSplitHalves;
  // Transformer-XL (docs/math.md section 8): the per-head key table
  // AK_h[r + k] = W_h R_{-r}, k = attention.max_distance, is built on every
  // call from MhaWeights::xl_w and XL's fixed sinusoids R
  // (relpos::XlSinusoidTable); the queries get + u_h (content term), the
  // position term pb = v - u. The attention options must have
  // per_head_tables, key_term, position_query_bias and no value term
  // (model/positions.h sets them).
  bool xl = false;
};

// Rotates [count, H, n, dh] heads in place: forward (y = R(p theta) x) or
// backward (dx = R(-p theta) dy) with row n at position position_offset + n.
// The one place the layer applies RoPE.
template <typename T>
void RopeHeads(bool backward, T* heads, int64_t count, int64_t h, int64_t n,
               int64_t dh, int64_t position_offset, const MhaPositions& p);

// A view of a relative table in the registry's layout (relpos/schemes.h):
// [rows, dh] shared by the heads (Shaw et al.), or [heads, rows, dh] with
// per-head tables. T may be const (a ConstView).
template <typename T>
TensorView<T> RelativeTableView(T* data, int64_t heads, int64_t rows,
                                int64_t dh, bool per_head) {
  return per_head ? TensorView<T>(data, {heads, rows, dh})
                  : TensorView<T>(data, {rows, dh});
}

struct MhaShape {
  int64_t batch = 0, length = 0, d_model = 0, heads = 0;
  // Null: x, y, dy and dx hold batch * length rows (sequence b's position i
  // at row b * length + i). Non-null: [batch] valid lengths in [0, length],
  // and those buffers hold only the valid positions, packed sequence after
  // sequence (row offset(b) + i for i < lengths[b], offset(b) = the sum of
  // the lengths before b), so no row-wise work is spent on padding. Either
  // way attention sees a padded layout, with zeros at the padded positions
  // (packed: see MhaCache).
  const int64_t* lengths = nullptr;
  int64_t head_dim() const { return d_model / heads; }
  // Rows of x and y: batch * length, or the sum of the lengths.
  int64_t rows() const {
    if (lengths == nullptr) return batch * length;
    int64_t r = 0;
    for (int64_t b = 0; b < batch; ++b) r += lengths[b];
    return r;
  }
};

// Read-only weights. Projections are [d_model, d_model] ([out, in]) with
// [d_model] biases. rel_k / rel_v: [nb, dh] shared by the heads or
// [H, nb, dh] per head, as options.per_head_tables says (nb =
// relpos::TableRows); nullptr when the matching term is off or the scheme
// has no vector table. bias: T5's [H, nb] scalar table (score term
// kScalarTable). xl_w [d_model, d_model] ([H * dh, encoding width]), xl_u and
// xl_v [H, dh]: Transformer-XL's projection and biases (MhaPositions::xl).
template <typename T>
struct MhaWeights {
  const T *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr;
  const T *wv = nullptr, *bv = nullptr, *wo = nullptr, *bo = nullptr;
  const T *rel_k = nullptr, *rel_v = nullptr;
  const T* bias = nullptr;
  const T *xl_w = nullptr, *xl_u = nullptr, *xl_v = nullptr;
};

// Gradients, same shapes as MhaWeights; all overwritten. A pointer may be
// nullptr exactly when the weights' is.
template <typename T>
struct MhaGrads {
  T *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr;
  T *wv = nullptr, *bv = nullptr, *wo = nullptr, *bo = nullptr;
  T *rel_k = nullptr, *rel_v = nullptr;
  T* bias = nullptr;
  T *xl_w = nullptr, *xl_u = nullptr, *xl_v = nullptr;
};

// What the forward pass keeps for the backward pass (resized as needed).
// Padded layout: q, k, v, attn are [B, H, N, dh] and lse [B, H, N]
// (cross-attention: k and v [B, H, Nk, dh]). Packed
// layout: the sequences sorted by length into a few groups, each padded only
// to its own longest member ([count, H, padded, dh] one group after the
// other, lse likewise), so attention skips most of the padding too.
template <typename T>
struct MhaCache {
  std::vector<T> q, k, v;  // [B, H, N, dh] or the groups
  std::vector<T> attn;     // the attention output, as q
  std::vector<T> lse;      // [B, H, N] or the groups
  std::vector<T> merged;   // [rows, d_model], attn with heads merged back
  // Transformer-XL only: the sinusoids R [2k+1, d_model] (row r + k holds
  // R_{-r}), the key table [H, 2k+1, dh] built from them and pb [H, dh].
  std::vector<T> xl_r, xl_table, xl_pb;
};

// Working memory of the backward pass, reused between calls.
template <typename T>
struct MhaScratch {
  std::vector<T> flat;               // [rows, d_model]
  std::vector<T> dattn, dq, dk, dv;  // as MhaCache::q
  // Table gradients of the later length groups (packed layout only).
  std::vector<T> dtable_k, dtable_v, dbias, dpb;
  // Transformer-XL: the key table's gradient [H, 2k+1, dh], pb's [H, dh],
  // and the table in [2k+1, H * dh] order, for dW.
  std::vector<T> dxl_table, dxl_pb, xl_flat;
};

// Attention's position inputs of the configured scheme into *in (q, k, v
// untouched): Shaw's vector tables (or XL's table from `c`, built by
// XlAttentionTables) as in->ak / in->av, T5's scalar table as in->bias, XL's
// pb from `c` as in->pb; empty views for what the options leave out. The one
// place the layer's weights become attention inputs, for training,
// evaluation and decoding alike. `c` is read only for XL.
template <typename T>
void PositionInputs(const MhaWeights<T>& w, const MhaCache<T>& c,
                    int64_t heads, int64_t dh, const AttentionOptions& o,
                    const MhaPositions& p, AttentionInputs<T>* in);

// Transformer-XL's inputs to attention from the weights (docs/math.md
// section 8), into cache->xl_r (the sinusoids R [2k+1, d_model], row r + k
// holding R_{-r}; recomputed only when k changes), cache->xl_table (the key
// table [H, 2k+1, dh], AK_h[r + k] = W_h R_{-r}) and cache->xl_pb (pb =
// v - u, [H, dh]). k must cover every distance of the call (no clipping).
// The queries passed to attention must be q + u (the forward pass below
// adds it). The one place the XL table is built.
template <typename T>
void XlAttentionTables(const MhaWeights<T>& w, int64_t d_model, int64_t heads,
                       int64_t k, MhaCache<T>* cache);

// x [rows, d_model] -> y [rows, d_model] (rows and their layout as
// MhaShape says). `attention` carries the scheme (bucket map, score term,
// tables' layout, terms), causal and key_lengths; `positions` what the layer
// does beyond it (RoPE, XL); `weights` how the projections read w.wq, wk,
// wv and wo (null: their float values; nn/weight_reader.h).
template <typename T>
void MultiHeadAttentionForward(const T* x, const MhaWeights<T>& w, T* y,
                               MhaCache<T>* cache, const MhaShape& shape,
                               const AttentionOptions& attention,
                               const MhaPositions& positions = {},
                               const WeightReader<T>* weights = nullptr);

// Differentiates the forward pass above, given dy [rows, d_model]; dx
// [rows, d_model] is overwritten. `cache` must come from the forward pass with
// the same x, weights and options.
template <typename T>
void MultiHeadAttentionBackward(const T* x, const MhaWeights<T>& w,
                                const MhaCache<T>& cache, const T* dy, T* dx,
                                const MhaGrads<T>& grads,
                                MhaScratch<T>* scratch, const MhaShape& shape,
                                const AttentionOptions& attention,
                                const MhaPositions& positions = {});

// Cross-attention: queries from x [rows, d_model] (laid out as `queries`
// says), keys and values from memory [memory rows, d_model] (as `keys`
// says: the same batch, d_model and heads; its own length and lengths, and
// packed exactly when `queries` is). `attention` must have key_term and
// value_term off (no position term); its key_lengths are used only by the
// padded layout (packed: the keys' lengths). y [rows, d_model].
template <typename T>
void CrossAttentionForward(const T* x, const T* memory, const MhaWeights<T>& w,
                           T* y, MhaCache<T>* cache, const MhaShape& queries,
                           const MhaShape& keys,
                           const AttentionOptions& attention);

// Differentiates CrossAttentionForward: dx [rows, d_model] is overwritten,
// dmemory [memory rows, d_model] is ADDED to (every decoder layer reads the
// same memory); the weight gradients are overwritten.
template <typename T>
void CrossAttentionBackward(const T* x, const T* memory,
                            const MhaWeights<T>& w, const MhaCache<T>& cache,
                            const T* dy, T* dx, T* dmemory,
                            const MhaGrads<T>& grads, MhaScratch<T>* scratch,
                            const MhaShape& queries, const MhaShape& keys,
                            const AttentionOptions& attention);

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_MULTI_HEAD_ATTENTION_H_
