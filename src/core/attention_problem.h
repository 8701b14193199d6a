// The validated, resolved description of one attention call, shared by the
// reference and fused paths so both read the conventions of SPEC.md section 1
// from one place.
#ifndef RELPOS_SRC_CORE_ATTENTION_PROBLEM_H_
#define RELPOS_SRC_CORE_ATTENTION_PROBLEM_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "relpos/attention.h"

namespace relpos {

struct AttentionProblem {
  int64_t batch = 0, heads = 0, q_len = 0, k_len = 0, dk = 0, dv = 0;
  int64_t max_distance = 0;  // k
  int64_t query_offset = 0;  // off: query row i sits at position i + off
  bool per_head_tables = false;
  bool key_term = true, value_term = true;  // false also when table is empty
  bool causal = false;
  std::vector<int64_t> key_lengths;  // always batch entries, in [0, Nk]

  int64_t TableRows() const { return 2 * max_distance + 1; }

  // Table row r(i,j) + k for query row i and key j.
  int64_t Bucket(int64_t i, int64_t j) const {
    const int64_t r = j - (i + query_offset);
    return std::clamp(r, -max_distance, max_distance) + max_distance;
  }

  // Keys visible to row i of batch item b are exactly [0, KeyEnd(b, i)):
  // padding hides j >= key_lengths[b]; causality hides j > i + off.
  int64_t KeyEnd(int64_t b, int64_t i) const {
    int64_t end = key_lengths[b];
    if (causal) end = std::min(end, i + query_offset + 1);
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

#endif  // RELPOS_SRC_CORE_ATTENTION_PROBLEM_H_
