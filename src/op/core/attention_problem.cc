#include "core/attention_problem.h"

#include <cmath>
#include <string>

#include "base/check.h"

namespace relpos {
namespace {

// Largest |query_offset| accepted: keeps j - (i + off) far from overflow.
constexpr int64_t kMaxQueryOffset = int64_t{1} << 40;
// Largest k accepted: tables of 2k+1 rows must stay allocatable.
constexpr int64_t kMaxDistance = int64_t{1} << 24;
// Largest |ALiBi slope|: keeps m |r| finite in float for |r| <= 2^41.
constexpr double kMaxAlibiSlope = 1 << 20;

template <typename T>
void CheckRank(const char* name, ConstView<T> view, int rank) {
  RELPOS_CHECK_ARG(!view.empty(), name << " must not be empty");
  RELPOS_CHECK_ARG(view.rank() == rank, name << " must have rank " << rank
                                              << " (got shape "
                                              << view.ShapeString() << ")");
}

template <typename T>
void CheckDim(const char* name, ConstView<T> view, int axis, int64_t want,
              const char* what) {
  RELPOS_CHECK_ARG(view.dim(axis) == want,
                   name << " has shape " << view.ShapeString() << " but dim "
                        << axis << " must equal " << what << " = " << want);
}

// The name of the table-row count of the bucket map, for messages.
const char* RowsName(const AttentionProblem& p) {
  switch (p.buckets.kind) {
    case BucketKind::kClip:
      return "buckets.clip.left+buckets.clip.right+1";
    case BucketKind::kT5:
      return "buckets.t5.num_buckets";
    case BucketKind::kSymmetricClip:
      break;
  }
  return "2*max_distance+1";
}

template <typename T>
void CheckTable(const char* name, ConstView<T> table, const AttentionProblem& p,
                int64_t width, const char* width_name) {
  if (p.per_head_tables) {
    CheckRank(name, table, 3);
    CheckDim(name, table, 0, p.heads, "heads");
    CheckDim(name, table, 1, p.TableRows(), RowsName(p));
    CheckDim(name, table, 2, width, width_name);
  } else {
    CheckRank(name, table, 2);
    CheckDim(name, table, 0, p.TableRows(), RowsName(p));
    CheckDim(name, table, 1, width, width_name);
  }
}

// The bucket map and score term of docs/math.md section 8: validates them
// and fills p.buckets, p.table_rows and the score-term fields. Needs
// p.heads and p.key_term.
void ResolveScheme(const AttentionOptions& options, AttentionProblem& p) {
  const int kind = static_cast<int>(options.buckets.kind);
  RELPOS_CHECK_ARG(kind >= 0 && kind <= static_cast<int>(BucketKind::kT5),
                   "buckets.kind is not a BucketKind (got " << kind << ")");
  p.buckets = options.buckets;
  switch (options.buckets.kind) {
    case BucketKind::kSymmetricClip:
      p.table_rows = 2 * p.max_distance + 1;
      break;
    case BucketKind::kClip: {
      const ClipBuckets& c = options.buckets.clip;
      ValidateClipBuckets(c);
      RELPOS_CHECK_ARG(c.left <= kMaxDistance && c.right <= kMaxDistance,
                       "buckets.clip: left and right must be <= "
                           << kMaxDistance << " (got left " << c.left
                           << ", right " << c.right << ")");
      p.table_rows = ClipBucketCount(c);
      break;
    }
    case BucketKind::kT5:
      ValidateT5Buckets(options.buckets.t5);
      p.table_rows = options.buckets.t5.num_buckets;
      p.t5_reach = T5BucketReach(options.buckets.t5);
      break;
  }

  const int term = static_cast<int>(options.score_term);
  RELPOS_CHECK_ARG(term >= 0 && term <= static_cast<int>(ScoreTerm::kAlibi),
                   "score_term is not a ScoreTerm (got " << term << ")");
  p.score_term = options.score_term;
  p.scalar_table = p.key_term && p.score_term == ScoreTerm::kScalarTable;

  if (!options.alibi_slopes.empty()) {
    RELPOS_CHECK_ARG(options.score_term == ScoreTerm::kAlibi,
                     "alibi_slopes given (" << options.alibi_slopes.size()
                                            << " entries) but score_term is "
                                               "not kAlibi");
    RELPOS_CHECK_ARG(
        static_cast<int64_t>(options.alibi_slopes.size()) == p.heads,
        "alibi_slopes must have one entry per head (heads = "
            << p.heads << ", got " << options.alibi_slopes.size() << ")");
    for (size_t h = 0; h < options.alibi_slopes.size(); ++h) {
      const double m = options.alibi_slopes[h];
      RELPOS_CHECK_ARG(std::isfinite(m) && std::abs(m) <= kMaxAlibiSlope,
                       "alibi_slopes[" << h
                                       << "] must be finite with |m| <= 2^20 "
                                          "(got "
                                       << m << ")");
    }
  }
  if (p.AlibiScore()) {
    p.alibi_slopes = options.alibi_slopes.empty() ? AlibiSlopes(p.heads)
                                                  : options.alibi_slopes;
  }

  if (options.position_query_bias) {
    RELPOS_CHECK_ARG(p.key_term && p.score_term == ScoreTerm::kVector,
                     "position_query_bias needs key_term = true and "
                     "score_term = kVector (got key_term = "
                         << p.key_term << ", score_term = "
                         << ScoreTermName(p.score_term) << ")");
  }
  p.position_query_bias = options.position_query_bias;
}

// One entry per batch item of `values` (named `name` in messages), or
// `fallback` for every item when `values` is empty.
std::vector<int64_t> PerRow(const char* name,
                            const std::vector<int64_t>& values,
                            int64_t batch, int64_t fallback) {
  if (values.empty()) return std::vector<int64_t>(batch, fallback);
  RELPOS_CHECK_ARG(static_cast<int64_t>(values.size()) == batch,
                   name << " must have one entry per batch item (batch = "
                        << batch << ", got " << values.size() << ")");
  return values;
}

// The per-row options of docs/math.md section 1: query offsets, key lengths
// and key starts, each resolved to one entry per batch item. Needs p.batch,
// p.q_len and p.k_len.
void ResolveRows(const AttentionOptions& options, AttentionProblem& p) {
  RELPOS_CHECK_ARG(!(options.query_offset && !options.query_offsets.empty()),
                   "query_offset and query_offsets are alternatives; give at "
                   "most one (got query_offset = "
                       << *options.query_offset << " and "
                       << options.query_offsets.size() << " query_offsets)");
  const int64_t offset = options.query_offset.value_or(p.k_len - p.q_len);
  p.query_offsets = PerRow("query_offsets", options.query_offsets, p.batch,
                           offset);
  p.min_offset = p.max_offset = offset;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t off = p.query_offsets[b];
    const char* name = options.query_offsets.empty() ? "query_offset"
                                                     : "query_offsets[b]";
    RELPOS_CHECK_ARG(off >= -kMaxQueryOffset && off <= kMaxQueryOffset,
                     name << " must be within +-2^40 (got " << off
                          << " for batch item " << b << ")");
    if (b == 0) p.min_offset = p.max_offset = off;
    p.min_offset = std::min(p.min_offset, off);
    p.max_offset = std::max(p.max_offset, off);
  }

  p.key_lengths = PerRow("key_lengths", options.key_lengths, p.batch, p.k_len);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = p.key_lengths[b];
    RELPOS_CHECK_ARG(len >= 0 && len <= p.k_len,
                     "key_lengths[" << b << "] must be in [0, Nk = " << p.k_len
                                    << "] (got " << len << ")");
  }
  p.key_starts = PerRow("key_starts", options.key_starts, p.batch, 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t start = p.key_starts[b];
    RELPOS_CHECK_ARG(start >= 0 && start <= p.key_lengths[b],
                     "key_starts[" << b << "] must be in [0, key_lengths[" << b
                                   << "] = " << p.key_lengths[b] << "] (got "
                                   << start << ")");
  }
}

}  // namespace

const char* BucketKindName(BucketKind kind) {
  switch (kind) {
    case BucketKind::kSymmetricClip:
      return "kSymmetricClip";
    case BucketKind::kClip:
      return "kClip";
    case BucketKind::kT5:
      return "kT5";
  }
  return "invalid";
}

const char* ScoreTermName(ScoreTerm term) {
  switch (term) {
    case ScoreTerm::kVector:
      return "kVector";
    case ScoreTerm::kScalarTable:
      return "kScalarTable";
    case ScoreTerm::kAlibi:
      return "kAlibi";
  }
  return "invalid";
}

template <typename T>
AttentionProblem MakeAttentionProblem(const AttentionInputs<T>& in,
                                      ConstView<T> out, ConstView<T> lse,
                                      const AttentionOptions& options) {
  AttentionProblem p;
  RELPOS_CHECK_ARG(options.max_distance >= 0,
                   "max_distance must be >= 0 (got " << options.max_distance
                                                     << ")");
  RELPOS_CHECK_ARG(options.max_distance <= kMaxDistance,
                   "max_distance must be <= " << kMaxDistance << " (got "
                                              << options.max_distance << ")");
  RELPOS_CHECK_ARG(options.num_threads >= 0,
                   "num_threads must be >= 0 (got " << options.num_threads
                                                    << ")");
  CheckRank("q", in.q, 4);
  CheckRank("k", in.k, 4);
  CheckRank("v", in.v, 4);
  p.batch = in.q.dim(0);
  p.heads = in.q.dim(1);
  p.q_len = in.q.dim(2);
  p.dk = in.q.dim(3);
  p.k_len = in.k.dim(2);
  p.dv = in.v.dim(3);
  RELPOS_CHECK_ARG(p.dk > 0, "q has shape " << in.q.ShapeString()
                                            << " but dk must be > 0");
  RELPOS_CHECK_ARG(p.dv > 0, "v has shape " << in.v.ShapeString()
                                            << " but dv must be > 0");
  CheckDim("k", in.k, 0, p.batch, "batch of q");
  CheckDim("k", in.k, 3, p.dk, "dk of q");
  p.kv_heads = in.k.dim(1);
  // Grouped-query attention: Hkv key/value heads, Hkv dividing H.
  RELPOS_CHECK_ARG(
      p.kv_heads == p.heads || (p.kv_heads > 0 && p.heads % p.kv_heads == 0),
      "k has shape " << in.k.ShapeString() << " but its heads Hkv = "
                     << p.kv_heads << " must divide the heads of q, H = "
                     << p.heads);
  p.group = p.kv_heads > 0 ? p.heads / p.kv_heads : 1;
  CheckDim("v", in.v, 0, p.batch, "batch of q");
  CheckDim("v", in.v, 1, p.kv_heads, "heads of k");
  CheckDim("v", in.v, 2, p.k_len, "Nk of k");

  p.max_distance = options.max_distance;
  p.per_head_tables = options.per_head_tables;
  p.causal = options.causal;
  p.key_term = options.key_term;
  p.value_term = options.value_term;
  ResolveScheme(options, p);
  if (p.VectorScore()) {
    CheckTable("ak", in.ak, p, p.dk, "dk");
  } else if (!in.ak.empty()) {
    CheckTable("ak", in.ak, p, p.dk, "dk");
  }
  if (p.scalar_table || !in.bias.empty()) {
    CheckRank("bias", in.bias, 2);
    CheckDim("bias", in.bias, 0, p.heads, "heads");
    CheckDim("bias", in.bias, 1, p.TableRows(), RowsName(p));
  }
  if (p.position_query_bias || !in.pb.empty()) {
    CheckRank("pb", in.pb, 2);
    CheckDim("pb", in.pb, 0, p.heads, "heads");
    CheckDim("pb", in.pb, 1, p.dk, "dk");
  }
  if (p.value_term) {
    CheckTable("av", in.av, p, p.dv, "dv");
  } else if (!in.av.empty()) {
    CheckTable("av", in.av, p, p.dv, "dv");
  }

  ResolveRows(options, p);
  if (options.scale) {
    RELPOS_CHECK_ARG(std::isfinite(*options.scale) && *options.scale > 0,
                     "scale must be finite and > 0 (got " << *options.scale
                                                          << ")");
  }
  p.scale = options.scale;

  if (!out.empty()) {
    CheckRank("out", out, 4);
    CheckDim("out", out, 0, p.batch, "batch");
    CheckDim("out", out, 1, p.heads, "heads");
    CheckDim("out", out, 2, p.q_len, "Nq");
    CheckDim("out", out, 3, p.dv, "dv");
  }
  if (!lse.empty()) {
    CheckRank("lse", lse, 3);
    CheckDim("lse", lse, 0, p.batch, "batch");
    CheckDim("lse", lse, 1, p.heads, "heads");
    CheckDim("lse", lse, 2, p.q_len, "Nq");
  }
  return p;
}

template <typename T>
void CheckSameShape(const char* name, ConstView<T> view, ConstView<T> like) {
  if (view.empty()) return;
  bool same = view.rank() == like.rank();
  for (int i = 0; same && i < view.rank(); ++i) same = view.dim(i) == like.dim(i);
  RELPOS_CHECK_ARG(same, name << " must have shape " << like.ShapeString()
                              << " (got " << view.ShapeString() << ")");
}

template AttentionProblem MakeAttentionProblem<float>(
    const AttentionInputs<float>&, ConstView<float>, ConstView<float>,
    const AttentionOptions&);
template AttentionProblem MakeAttentionProblem<double>(
    const AttentionInputs<double>&, ConstView<double>, ConstView<double>,
    const AttentionOptions&);
template void CheckSameShape<float>(const char*, ConstView<float>,
                                    ConstView<float>);
template void CheckSameShape<double>(const char*, ConstView<double>,
                                     ConstView<double>);

}  // namespace relpos
