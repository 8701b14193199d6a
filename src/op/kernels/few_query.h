// Target-independent pieces of the few-query forward path (docs/kernel.md,
// "The few-query path"): the geometry of one work item and the layout of
// its per-thread scratch. The SIMD body (few_query-inl.h) and the driver
// (fused_attention.cc) both include it, so the bytes FusedExtraBytes
// reports are the bytes the driver allocates.
//
// A work item is one key/value head of one batch item and up to
// kFewPassRows of the query rows that read it: the group's query heads
// times the Nq <= kFewQueryRows rows of each (grouped-query attention puts
// several query heads on one key/value head, and they share every load of
// K and V). The item streams its keys in chunks of kFewKeyChunk: the
// scores of all its rows against a chunk (dot products vectorised along
// dk), then per row the relative terms, the online softmax over the chunk
// (vectorised along the keys) and P V.
#ifndef RELPOS_SRC_OP_KERNELS_FEW_QUERY_H_
#define RELPOS_SRC_OP_KERNELS_FEW_QUERY_H_

#include <algorithm>
#include <cstdint>

#include "core/attention_problem.h"
#include "kernels/fused_tiles.h"

namespace relpos {
namespace fused {

inline constexpr int64_t kFewPassRows = 4;    // query rows of one work item
inline constexpr int64_t kFewKeyChunk = 512;  // keys per chunk

// Query rows reading one key/value head, and the work items they make.
inline int64_t FewRowsPerKvHead(const AttentionProblem& p) {
  return p.group * p.q_len;
}
inline int64_t FewPassesPerKvHead(const AttentionProblem& p) {
  return (FewRowsPerKvHead(p) + kFewPassRows - 1) / kFewPassRows;
}
inline int64_t FewItems(const AttentionProblem& p) {
  return p.batch * p.kv_heads * FewPassesPerKvHead(p);
}

// One query row of a work item: query head h's row i of batch item b.
struct FewRow {
  const float* q = nullptr;  // [dk]
  // Head h's tables (null when their term is off), scalar-table row
  // bias[h, :], position query bias pb[h, :] and ALiBi slope.
  const float *ak = nullptr, *av = nullptr, *bias = nullptr, *pb = nullptr;
  float alibi_slope = 0.0f;
  float* out = nullptr;  // [dv]
  float* lse = nullptr;  // one float, or null
  int64_t pos = 0;       // absolute position i + off_b
  int64_t key_end = 0;   // keys [key_begin, key_end) are visible (>= begin)
};

struct FewPass {
  const float *k = nullptr, *v = nullptr;  // [Nk, dk], [Nk, dv]
  int64_t key_begin = 0;
  int64_t rows = 0;
  FewRow row[kFewPassRows];
  // The bucket of each distance (DistanceBuckets), for the scalar table and
  // T5 buckets.
  const int64_t* dist_bucket = nullptr;
  int64_t r_lo = 0, r_hi = 0;
};

// Per-thread scratch, in floats: the score rows of a chunk, the scaled
// queries (padded to whole vectors), and per row the relative term by
// distance row (A), the bucketed probabilities (W) and the output
// accumulator; for T5 buckets one row of per-bucket scores and sums.
struct FewScratch {
  int64_t ldq = 0;  // floats per padded query row
  int64_t na = 0;   // distance rows one query row can reach
  int64_t s = 0, q = 0, qp = 0, a = 0, w = 0, o = 0, gb = 0, wc = 0;
  explicit FewScratch(const AttentionProblem& p) {
    ldq = (p.dk + 15) / 16 * 16;
    na = std::max<int64_t>(1, std::min(Reach(p).top() + 1, p.k_len));
    s = kFewPassRows * kFewKeyChunk;
    q = kFewPassRows * ldq;
    qp = p.position_query_bias ? kFewPassRows * ldq : 0;
    a = (p.VectorScore() || p.scalar_table) ? kFewPassRows * na : 0;
    w = p.value_term ? kFewPassRows * na : 0;
    o = kFewPassRows * p.dv;
    gb = DistanceRows(p) && p.VectorScore() ? p.TableRows() : 0;
    wc = DistanceRows(p) && p.value_term ? p.TableRows() : 0;
  }
  int64_t Floats() const { return s + q + qp + a + w + o + gb + wc; }
};

}  // namespace fused
}  // namespace relpos

#endif  // RELPOS_SRC_OP_KERNELS_FEW_QUERY_H_
