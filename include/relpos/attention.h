// Self-attention with relative position representations (Shaw et al., 2018):
// forward and backward passes. docs/math.md sections 1-3 fix the mathematics:
//
//   r(i, j) = clip(j - (i + off), -k, k)                  off = Nk - Nq by default
//   s_ij    = (q_i . k_j + q_i . AK[r(i,j) + k]) / sqrt(dk)     (masked -> -inf)
//   p_ij    = softmax_j(s_ij)
//   o_i     = sum_j p_ij v_j + sum_j p_ij AV[r(i,j) + k]
//
// That is the default scheme. The family of docs/math.md section 8 (T5,
// ALiBi, asymmetric and logarithmic Shaw, Transformer-XL's position term) is
// the same computation with three choices made in AttentionOptions:
//
//   b(i, j) = buckets.Row(r), r = j - (i + off)     (BucketMap: which row)
//   s_ij    = q_i . k_j / sqrt(dk) + score term      (ScoreTerm: what is added)
//             kVector:      (q_i + pb_h) . AK[b] / sqrt(dk)   (pb only if
//                           position_query_bias; Shaw, shaw-asym, shaw-log, XL)
//             kScalarTable: bias[h, b]                (T5; not scaled)
//             kAlibi:       -m_h |r|                  (ALiBi; not scaled)
//   o_i     = sum_j p_ij v_j + sum_j p_ij AV[b]      (value_term, any BucketMap)
//
// RoPE is not an attention option: rotate q and k with relpos/rope.h, then
// call plain attention (key_term = value_term = false).
//
// Two implementations sit behind these functions: the fused, tiled CPU kernel
// (float only; never stores anything of size Nq x Nk) and the reference, which
// follows the equations literally and runs in float or double. The reference
// is the oracle every fast path is tested against.
#ifndef RELPOS_ATTENTION_H_
#define RELPOS_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "relpos/position_schemes.h"
#include "relpos/tensor_view.h"

namespace relpos {

enum class AttentionPath {
  kAuto,       // fused for float, reference for double
  kFused,      // the tiled kernel (float only)
  kReference,  // straight from the equations; builds the Nq x Nk matrix
};

// Which table row a pair uses (docs/math.md section 8), from its distance
// r = j - (i + off) (key position minus query position).
enum class BucketKind {
  // clip(r, -max_distance, max_distance) + max_distance; 2k+1 rows (Shaw).
  // AttentionOptions::max_distance is k; `clip` and `t5` are ignored.
  kSymmetricClip,
  // clip(r, -clip.left, clip.right) + clip.left; left + right + 1 rows
  // (row 0: `left` or more in the past). w2v-BERT 2.0 uses left 64, right 8.
  kClip,
  // T5Bucket(r, t5): T5's logarithmic buckets, t5.num_buckets rows
  // (bidirectional or causal); relpos/position_schemes.h has the formula.
  kT5,
};

struct BucketMap {
  BucketKind kind = BucketKind::kSymmetricClip;
  ClipBuckets clip;  // used when kind == kClip
  T5Buckets t5;      // used when kind == kT5
};

// What the key side adds to the score s_ij, when key_term is on.
enum class ScoreTerm {
  // (q_i + pb_h) . AK[b] / sqrt(dk): Shaw's vector table AK [nb, dk] or
  // [H, nb, dk]; pb only with position_query_bias (Transformer-XL).
  kVector,
  // bias[h, b]: one learned scalar per head and bucket, bias [H, nb] (T5).
  // Not divided by sqrt(dk).
  kScalarTable,
  // -m_h |r| with m_h = alibi_slopes[h] (ALiBi, fixed, nothing learned; the
  // bucket map is not used by the score). Not divided by sqrt(dk). Under a
  // causal mask every visible pair has r <= 0, so this is the paper's
  // -m_h (i + off - j).
  kAlibi,
};

struct AttentionOptions {
  // Clipping distance k >= 0 of the default bucket map (kSymmetricClip):
  // tables have 2k+1 rows, row r+k for distance r. Validated for every
  // bucket map, used only by kSymmetricClip.
  int64_t max_distance = 16;
  // The bucket map shared by the vector / scalar score table and the value
  // table; the default is the symmetric clip by max_distance above. Tables
  // have nb rows: 2k+1, left+right+1 or t5.num_buckets.
  BucketMap buckets;
  // The kind of the key-side (score) term; key_term below switches it on.
  ScoreTerm score_term = ScoreTerm::kVector;
  // kAlibi only: one slope per head (H entries, finite, |m| <= 2^20). Empty
  // means relpos::AlibiSlopes(H), the paper's rule. Applied in the call's
  // precision (rounded to float on float calls).
  std::vector<double> alibi_slopes;
  // Transformer-XL's position query bias: with score_term kVector, the
  // position term uses the biased queries, G = (Q + pb) AK^T / sqrt(dk),
  // pb [H, dk]; the content term q . k is unchanged. Requires key_term.
  bool position_query_bias = false;
  // false: one table pair shared by all heads, AK[2k+1, dk] (Shaw et al.);
  // true: one pair per head, AK[H, 2k+1, dk].
  bool per_head_tables = false;
  // Shaw's ablation switches: the key-side term (inside the score, of kind
  // score_term) and the value-side term (inside the output). With both off
  // this is plain softmax attention; an unused table may be passed empty.
  // Schemes without a value term (t5, alibi, xl) set value_term = false.
  bool key_term = true;
  bool value_term = true;
  // Key j is visible to query i iff j <= i + off.
  bool causal = false;
  // Absolute position of query row 0; default Nk - Nq (queries are the last Nq
  // positions, as with a key/value cache). |offset| <= 2^40.
  std::optional<int64_t> query_offset;
  // Per-row query offsets: empty (every batch item uses query_offset), or
  // one entry per batch item, |offset| <= 2^40: query row i of item b sits
  // at position i + query_offsets[b]. Exclusive with query_offset.
  std::vector<int64_t> query_offsets;
  // Empty (every key valid) or one entry per batch item in [0, Nk]: keys
  // j >= key_lengths[b] are invisible (right padding).
  std::vector<int64_t> key_lengths;
  // Empty (keys start at 0) or one entry per batch item in [0,
  // key_lengths[b]] (key_lengths[b] = Nk when key_lengths is empty): keys
  // j < key_starts[b] are invisible (left padding). Positions and distances
  // stay those of the padded index: r = j - (i + off) for every visible
  // pair, which is j' - i' for the positions j' = j - s, i' = i + off - s
  // counted from the row's first real key s = key_starts[b]
  // (docs/conventions.md, "Left padding").
  std::vector<int64_t> key_starts;
  // Multiplier of the scaled score terms (q . k and the vector term);
  // default 1 / sqrt(dk). T5 uses 1 (unscaled scores). Finite and > 0.
  // The scalar table and ALiBi are never scaled.
  std::optional<double> scale;
  // kAuto: the fused kernel for float when it supports the scheme (today:
  // every score term, position_query_bias and the value term under
  // kSymmetricClip or kClip; kScalarTable and kAlibi also under kT5; see
  // docs/conventions.md, "Paths"), else the reference. kFused with a
  // scheme it does not support throws.
  AttentionPath path = AttentionPath::kAuto;
  // Threads for the fused path; 0 uses OpenMP's default.
  int num_threads = 0;
};

// Inputs, all row-major and contiguous.
//
// Grouped-query / multi-query attention: k and v may have Hkv heads, Hkv
// dividing H (Hkv = 1: multi-query). Query head h reads key/value head
// h / (H / Hkv), as Hugging Face transformers' repeat_kv does; tables,
// bias, pb and ALiBi slopes stay per query head.
template <typename T>
struct AttentionInputs {
  ConstView<T> q;   // [B, H, Nq, dk]
  ConstView<T> k;   // [B, Hkv, Nk, dk]
  ConstView<T> v;   // [B, Hkv, Nk, dv]
  // nb = table rows of options.buckets (2k+1 for the default map).
  ConstView<T> ak;  // [nb, dk] or [H, nb, dk]; used by key_term with kVector
  ConstView<T> av;  // [nb, dv] or [H, nb, dv]; may be empty if !value_term
  ConstView<T> bias;  // [H, nb]; used by key_term with kScalarTable
  ConstView<T> pb;    // [H, dk]; used with position_query_bias
  // A table or bias that its option does not use may be empty; if given, it
  // must have its shape and does not enter the computation.
};

// Gradients, same shapes as the inputs (dk, dv: [B, Hkv, Nk, d], the sums
// over each group's query heads); every non-empty view is overwritten
// (not accumulated into). dak / dav / dbias / dpb may be empty when their
// input is unused (or when the caller does not want them); a provided one
// whose input is unused is filled with zeros. (ALiBi slopes are fixed and
// get no gradient.)
template <typename T>
struct AttentionGrads {
  TensorView<T> dq, dk, dv, dak, dav;
  TensorView<T> dbias, dpb;  // [H, nb], [H, dk]
};

// out: [B, H, Nq, dv]. lse: [B, H, Nq], the natural log of the softmax
// denominator of each row (of the scaled scores), -infinity for a row that
// sees no key (its output is zero, and so is its gradient; this is the
// convention for every mask: causal, key_lengths, key_starts). lse may be empty when no backward pass
// will follow. Throws InvalidArgument on any inconsistent argument.
template <typename T>
void AttentionForward(const AttentionInputs<T>& in, TensorView<T> out,
                      TensorView<T> lse, const AttentionOptions& options);

// dout: [B, H, Nq, dv]. `out` and `lse` must be what AttentionForward
// produced for the same inputs and options (the fused path recomputes the
// probabilities from lse instead of storing them).
template <typename T>
void AttentionBackward(const AttentionInputs<T>& in, ConstView<T> out,
                       ConstView<T> lse, ConstView<T> dout,
                       const AttentionGrads<T>& grads,
                       const AttentionOptions& options);

// What AttentionForward resolves from its arguments before computing
// (docs/conventions.md): the heads, the rows of the relative tables, the
// scheme's resolved settings and every batch item's offsets and key range.
struct ResolvedAttention {
  int64_t heads = 0, kv_heads = 0;
  int64_t table_rows = 0;  // rows of AK / AV (the bucket map's)
  int64_t t5_reach = 0;    // t5: every |r| >= it is its side's last bucket
  std::vector<double> alibi_slopes;  // alibi: one per head
  // One entry per batch item each; min / max of query_offsets.
  std::vector<int64_t> query_offsets, key_lengths, key_starts;
  int64_t min_offset = 0, max_offset = 0;
};

// The checks AttentionForward makes, on the inputs' shapes alone (the views'
// data is never read: any non-null pointer will do), for callers that compute attention elsewhere (the
// Python package's GPU path) and want the same rules: throws InvalidArgument
// exactly where AttentionForward would, else returns what it resolved.
template <typename T>
ResolvedAttention CheckAttention(const AttentionInputs<T>& in,
                                 const AttentionOptions& options);

extern template void AttentionForward<float>(const AttentionInputs<float>&,
                                             TensorView<float>,
                                             TensorView<float>,
                                             const AttentionOptions&);
extern template void AttentionForward<double>(const AttentionInputs<double>&,
                                              TensorView<double>,
                                              TensorView<double>,
                                              const AttentionOptions&);
extern template void AttentionBackward<float>(const AttentionInputs<float>&,
                                              ConstView<float>,
                                              ConstView<float>,
                                              ConstView<float>,
                                              const AttentionGrads<float>&,
                                              const AttentionOptions&);
extern template void AttentionBackward<double>(const AttentionInputs<double>&,
                                               ConstView<double>,
                                               ConstView<double>,
                                               ConstView<double>,
                                               const AttentionGrads<double>&,
                                               const AttentionOptions&);

extern template ResolvedAttention CheckAttention<float>(
    const AttentionInputs<float>&, const AttentionOptions&);
extern template ResolvedAttention CheckAttention<double>(
    const AttentionInputs<double>&, const AttentionOptions&);

}  // namespace relpos

#endif  // RELPOS_ATTENTION_H_
