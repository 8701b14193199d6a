// The validated, resolved description of one attention call, shared by the
// reference and fused paths so both read the conventions of docs/math.md section 1
// from one place.
#ifndef RELPOS_SRC_OP_CORE_ATTENTION_PROBLEM_H_
#define RELPOS_SRC_OP_CORE_ATTENTION_PROBLEM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "relpos/attention.h"
#include "relpos/position_schemes.h"

namespace relpos {

// "kSymmetricClip", "kClip", "kT5" / "kVector", "kScalarTable", "kAlibi"
// (the enumerator's name, for messages); "invalid" for any other value.
const char* BucketKindName(BucketKind kind);
const char* ScoreTermName(ScoreTerm term);

// Query rows up to which the fused path's forward runs the few-query
// path (decoding, speculative and beam steps; docs/kernel.md).
inline constexpr int64_t kFewQueryRows = 4;

struct AttentionProblem {
  int64_t batch = 0, heads = 0, q_len = 0, k_len = 0, dk = 0, dv = 0;
  // Key/value heads Hkv (dividing heads) and the group size H / Hkv: query
  // head h reads key/value head h / group (grouped-query attention).
  int64_t kv_heads = 0, group = 1;
  int64_t max_distance = 0;  // k
  // off_b: query row i of batch item b sits at position i + off_b; always
  // batch entries. min_offset / max_offset bound them (both the default
  // offset when batch = 0).
  std::vector<int64_t> query_offsets;
  int64_t min_offset = 0, max_offset = 0;
  bool per_head_tables = false;
  // key_term: the score term of kind score_term is on (its table is then
  // present); value_term: AV is added.
  bool key_term = true, value_term = true;
  bool causal = false;
  std::vector<int64_t> key_lengths;  // always batch entries, in [0, Nk]
  // Always batch entries, key_starts[b] in [0, key_lengths[b]].
  std::vector<int64_t> key_starts;
  // Multiplier of q . k and of the vector term (ScoreScale).
  std::optional<double> scale;

  // The scheme (docs/math.md section 8). The defaults are Shaw's symmetric
  // clip by max_distance with the vector score term; the fused kernel handles
  // exactly the problems with FusedSupported() (src/op/attention.cc).
  BucketMap buckets;
  ScoreTerm score_term = ScoreTerm::kVector;
  std::vector<double> alibi_slopes;  // kAlibi with key_term: heads entries
  bool position_query_bias = false;  // implies key_term and kVector
  bool scalar_table = false;         // key_term with kScalarTable (bias used)
  int64_t table_rows = 0;            // nb of the bucket map
  // kT5: T5BucketReach of the map (every |r| >= t5_reach is its side's last
  // bucket), resolved once; 0 for the clips.
  int64_t t5_reach = 0;

  int64_t TableRows() const {
    return buckets.kind == BucketKind::kSymmetricClip ? 2 * max_distance + 1
                                                      : table_rows;
  }

  // The score scale in T: options.scale, or 1 / sqrt(dk) formed in T (as
  // both paths always have).
  template <typename T>
  T ScoreScale() const {
    return scale ? static_cast<T>(*scale)
                 : T(1) / std::sqrt(static_cast<T>(dk));
  }

  int64_t QueryOffset(int64_t b) const { return query_offsets[b]; }
  int64_t KeyBegin(int64_t b) const { return key_starts[b]; }
  // The key/value head query head h reads.
  int64_t KvHead(int64_t h) const { return h / group; }

  // Table row b(r) of the bucket map for the distance r = j - (i + off)
  // (r + k for the symmetric clip).
  int64_t BucketOf(int64_t r) const {
    switch (buckets.kind) {
      case BucketKind::kClip:
        return ClipBucket(r, buckets.clip);
      case BucketKind::kT5:
        return T5Bucket(r, buckets.t5);
      case BucketKind::kSymmetricClip:
        break;
    }
    return std::clamp(r, -max_distance, max_distance) + max_distance;
  }

  // Whether the key-side term is Shaw's vector table (AK is read).
  bool VectorScore() const {
    return key_term && score_term == ScoreTerm::kVector;
  }
  bool AlibiScore() const { return key_term && score_term == ScoreTerm::kAlibi; }

  // Whether any table is indexed by the bucket map.
  bool UsesBuckets() const {
    return value_term || (key_term && score_term != ScoreTerm::kAlibi);
  }

  // Whether the fused kernel runs this problem. It implements every scheme
  // of docs/math.md section 8: the vector score term and the value term
  // under any bucket map (under T5 buckets through distance rows,
  // docs/kernel.md), ALiBi, the scalar table and the position query bias.
  // A scheme added to the options without a kernel path returns false
  // here, and src/op/attention.cc then runs the reference (kAuto) or refuses
  // (kFused).
  bool FusedSupported() const { return true; }

  // Whether the fused forward takes the few-query path (src/op/attention.cc):
  // Nq <= kFewQueryRows, any Nk, scheme, mask, offsets and head grouping.
  bool FewQuery() const { return q_len >= 1 && q_len <= kFewQueryRows; }

  // Keys visible to row i of batch item b are exactly [KeyBegin(b),
  // KeyEnd(b, i)) (none when KeyEnd <= KeyBegin): left padding hides j <
  // key_starts[b], right padding j >= key_lengths[b], causality j > i + off_b.
  int64_t KeyEnd(int64_t b, int64_t i) const {
    int64_t end = key_lengths[b];
    if (causal) end = std::min(end, i + query_offsets[b] + 1);
    return std::max<int64_t>(end, 0);
  }

  // Offset (in elements) of head h's table inside a shared or per-head table.
  int64_t TableOffset(int64_t h, int64_t d) const {
    return per_head_tables ? h * TableRows() * d : 0;
  }
};

// Checks every view against the options and each other; throws
// InvalidArgument naming the argument and its value. `out`, `lse` and `dout`
// may be empty views when the caller has none (lse is optional in forward).
template <typename T>
AttentionProblem MakeAttentionProblem(const AttentionInputs<T>& in,
                                      ConstView<T> out, ConstView<T> lse,
                                      const AttentionOptions& options);

// Checks that `view` has the shape of `like` (an empty `view` passes).
template <typename T>
void CheckSameShape(const char* name, ConstView<T> view, ConstView<T> like);

}  // namespace relpos

#endif  // RELPOS_SRC_OP_CORE_ATTENTION_PROBLEM_H_
