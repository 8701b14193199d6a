// Properties of relative attention that follow from docs/math.md sections 1-3,
// checked on the reference path (double unless stated):
//   (a) zero tables give plain softmax attention;
//   (b) only relative positions matter (query shift, key shift, decoding
//       with a cache, trailing padding);
//   (c) pairs at distance <= -k / >= k use the end rows of the tables, and
//       only they;
//   (d) rows that see no key give zeros, lse = -inf, zero gradients, no NaN;
//   (e) the float reference agrees with the double reference within a
//       tolerance derived from float's unit roundoff.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "relpos/attention.h"
#include "support/attention_cases.h"

namespace relpos {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kUnitRoundoffD = std::numeric_limits<double>::epsilon() / 2;
constexpr double kUnitRoundoffF = std::numeric_limits<float>::epsilon() / 2;

struct Result {  // forward outputs of the test's own implementations
  std::vector<double> out, lse;
};

template <typename T>
AttentionOutputBuffers<T> Forward(const AttentionData<T>& d,
                                  const AttentionOptions& options) {
  AttentionOutputBuffers<T> fwd = MakeOutputs<T>(d.c);
  AttentionForward<T>(d.Inputs(), fwd.Out(), fwd.Lse(), options);
  return fwd;
}

AttentionOutputBuffers<double> Forward(const AttentionData<double>& d) {
  return Forward(d, d.c.options);
}

// Scaled score of pair (i, j) in (b, h), docs/math.md section 2, written out here
// with its own bucket formula (no src/op/core code).
double Score(const AttentionData<double>& d, int64_t b, int64_t h, int64_t i,
             int64_t j) {
  const AttentionCase& c = d.c;
  const int64_t bh = b * c.heads + h;
  const int64_t k = c.options.max_distance;
  const int64_t row = std::clamp(j - (i + c.QueryOffset()), -k, k) + k;
  const int64_t tab = (c.options.per_head_tables ? h : 0) * c.TableRows();
  double s = 0;
  for (int64_t t = 0; t < c.dk; ++t) {
    double kt = d.k[(bh * c.k_len + j) * c.dk + t];
    if (!d.ak.empty()) kt += d.ak[(tab + row) * c.dk + t];
    s += d.q[(bh * c.q_len + i) * c.dk + t] * kt;
  }
  return s / std::sqrt(static_cast<double>(c.dk));
}

// A rounding-level tolerance for comparing two double computations of the
// same forward output: each output is a convex combination of value rows,
// with probabilities that carry a relative error of ~ (|s| + Nk + dk) u, so
// |delta o| <= 8 (1 + max|s|) (Nk + dk + dv) u max|w| (8: margin for the
// handful of roundings per term).
double DoubleTolerance(const AttentionData<double>& d) {
  const AttentionCase& c = d.c;
  const double max_s = MaxAbs(d.q) * (MaxAbs(d.k) + MaxAbs(d.ak)) *
                       std::sqrt(static_cast<double>(c.dk));
  return 8 * (1 + max_s) * (c.k_len + c.dk + c.dv) * kUnitRoundoffD *
         (MaxAbs(d.v) + MaxAbs(d.av) + 1);
}

// ---- (a) zero tables = plain softmax attention ---------------------------

// Plain scaled dot-product attention with the same masks, computed with a
// dense score matrix: O = softmax(Q K^T / sqrt(dk) + mask) V.
Result PlainAttention(const AttentionData<double>& d) {
  const AttentionCase& c = d.c;
  Result r{std::vector<double>(c.OutNumel(), 0),
           std::vector<double>(c.LseNumel(), -kInf)};
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h;
      for (int64_t i = 0; i < c.q_len; ++i) {
        std::vector<double> s(c.k_len, -kInf);
        double m = -kInf;
        const int64_t len =
            c.options.key_lengths.empty() ? c.k_len : c.options.key_lengths[b];
        for (int64_t j = 0; j < c.k_len; ++j) {
          const bool visible =
              j < len && (!c.options.causal || j <= i + c.QueryOffset());
          if (!visible) continue;
          double dot = 0;
          for (int64_t t = 0; t < c.dk; ++t)
            dot += d.q[(bh * c.q_len + i) * c.dk + t] *
                   d.k[(bh * c.k_len + j) * c.dk + t];
          s[j] = dot / std::sqrt(static_cast<double>(c.dk));
          m = std::max(m, s[j]);
        }
        if (m == -kInf) continue;  // no visible key: zeros, lse = -inf
        double z = 0;
        for (double x : s) z += std::exp(x - m);  // exp(-inf) = 0
        r.lse[bh * c.q_len + i] = m + std::log(z);
        for (int64_t j = 0; j < c.k_len; ++j) {
          const double p = std::exp(s[j] - m) / z;
          for (int64_t t = 0; t < c.dv; ++t)
            r.out[(bh * c.q_len + i) * c.dv + t] +=
                p * d.v[(bh * c.k_len + j) * c.dv + t];
        }
      }
    }
  }
  return r;
}

class PropertyTest : public testing::TestWithParam<AttentionCase> {};

TEST_P(PropertyTest, ZeroTablesGivePlainAttention) {
  AttentionCase c = GetParam();
  SCOPED_TRACE(c.Describe());
  c.options.key_term = c.options.value_term = true;
  AttentionData<double> d = MakeRandomData<double>(c, 11);
  const AttentionData<double> rel = d;  // non-zero tables, for the sanity check
  std::fill(d.ak.begin(), d.ak.end(), 0.0);
  std::fill(d.av.begin(), d.av.end(), 0.0);
  const Result want = PlainAttention(d);
  const double tol = DoubleTolerance(d);
  const AttentionOutputBuffers<double> got = Forward(d);
  EXPECT_LE(MaxAbsError(got.out, want.out), tol);
  EXPECT_LE(MaxAbsError(got.lse, want.lse), tol);
  // Both terms off with empty tables: the same plain attention.
  c.options.key_term = c.options.value_term = false;
  AttentionData<double> plain = d;
  plain.c = c;
  plain.ak.clear();
  plain.av.clear();
  const AttentionOutputBuffers<double> got_plain = Forward(plain);
  EXPECT_LE(MaxAbsError(got_plain.out, want.out), tol);
  EXPECT_LE(MaxAbsError(got_plain.lse, want.lse), tol);
  // Non-zero tables do change the result (the comparison above can fail).
  const AttentionOutputBuffers<double> got_rel = Forward(rel);
  bool any_visible = false;
  for (double x : want.lse) any_visible |= x > -kInf;
  if (any_visible) {
    EXPECT_GT(MaxAbsError(got_rel.out, want.out), 1e-3);
  }
}

// (d) checked on every standard case: no NaN or inf anywhere except lse of
// rows that see no key, which is exactly -inf, with zero output.
TEST_P(PropertyTest, OutputsFiniteAndEmptyRowsZero) {
  const AttentionCase& c = GetParam();
  SCOPED_TRACE(c.Describe());
  const AttentionData<double> d = MakeRandomData<double>(c, 12);
  const AttentionOutputBuffers<double> got = Forward(d);
  EXPECT_TRUE(AllFinite(got.out));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t row = (b * c.heads + h) * c.q_len + i;
        if (c.KeyEnd(b, i) > 0) {
          EXPECT_TRUE(std::isfinite(got.lse[row])) << "row " << row;
          continue;
        }
        EXPECT_EQ(got.lse[row], -kInf) << "row " << row;
        for (int64_t t = 0; t < c.dv; ++t)
          EXPECT_EQ(got.out[row * c.dv + t], 0.0) << "row " << row;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Standard, PropertyTest,
                         testing::ValuesIn(StandardCases()),
                         [](const auto& info) { return info.param.name; });

// ---- (b) only relative positions matter ---------------------------------
//
// In docs/math.md's convention absolute positions are anchored at key index 0:
// key j sits at position j, query row i at i + off. "Shift every position by
// c" therefore has to be expressed by moving rows of Q / K and compensating
// in off; all four tests below keep every distance j - (i + off) and every
// mask decision unchanged and require the same outputs.

// Query side: prepend c extra query rows and lower off by c. Row c + i of the
// longer call is the same query at the same position as row i before.
TEST(RelativeOnly, PrependingQueryRowsWithLowerOffset) {
  for (bool causal : {false, true}) {
    AttentionCase a = MakeCase("a", 2, 2, 5, 7, 3, 4, 2);
    a.options.causal = causal;
    a.options.key_lengths = {7, 4};
    const AttentionData<double> da = MakeRandomData<double>(a, 21);
    const int64_t shift = 3;
    AttentionCase bcase = a;
    bcase.q_len = a.q_len + shift;
    bcase.options.query_offset = a.QueryOffset() - shift;
    AttentionData<double> db = MakeRandomData<double>(bcase, 22);
    db.k = da.k;
    db.v = da.v;
    db.ak = da.ak;
    db.av = da.av;
    for (int64_t bh = 0; bh < a.batch * a.heads; ++bh)
      for (int64_t i = 0; i < a.q_len; ++i)
        for (int64_t t = 0; t < a.dk; ++t)
          db.q[(bh * bcase.q_len + shift + i) * a.dk + t] =
              da.q[(bh * a.q_len + i) * a.dk + t];
    const AttentionOutputBuffers<double> ra = Forward(da), rb = Forward(db);
    const double tol = DoubleTolerance(da);
    for (int64_t bh = 0; bh < a.batch * a.heads; ++bh) {
      for (int64_t i = 0; i < a.q_len; ++i) {
        const int64_t ia = bh * a.q_len + i, ib = bh * bcase.q_len + shift + i;
        EXPECT_NEAR(rb.lse[ib], ra.lse[ia], tol) << "causal=" << causal;
        for (int64_t t = 0; t < a.dv; ++t)
          EXPECT_NEAR(rb.out[ib * a.dv + t], ra.out[ia * a.dv + t], tol);
      }
    }
  }
}

// Key side: call B drops the first c keys and lowers off by c, so every
// remaining key keeps its distance to every query. In call A those c keys
// must be invisible for the results to agree, and docs/math.md has no mask for
// leading keys; instead we make them invisible numerically: q[.., 0] = 1 for
// every query and k[j, 0] = -1e5 for the dropped keys, so their scores are
// below max - 1e4 and exp() underflows to exactly 0 in double. Causal and
// padding masks shift with the keys (key_lengths - c).
TEST(RelativeOnly, DroppingLeadingKeysWithLowerOffset) {
  for (bool causal : {false, true}) {
    for (bool per_head : {false, true}) {
      const int64_t shift = 3;
      AttentionCase a = MakeCase("a", 2, 2, 6, 9, 3, 2, 2);
      a.options.causal = causal;
      a.options.per_head_tables = per_head;
      a.options.key_lengths = {9, 7};
      a.options.query_offset = 4;  // explicit: default would change with Nk
      AttentionData<double> da = MakeRandomData<double>(a, 31);
      for (int64_t bh = 0; bh < a.batch * a.heads; ++bh) {
        for (int64_t i = 0; i < a.q_len; ++i)
          da.q[(bh * a.q_len + i) * a.dk] = 1.0;
        for (int64_t j = 0; j < shift; ++j)
          da.k[(bh * a.k_len + j) * a.dk] = -1e5;
      }
      AttentionCase bcase = a;
      bcase.k_len = a.k_len - shift;
      bcase.options.query_offset = *a.options.query_offset - shift;
      bcase.options.key_lengths = {9 - shift, 7 - shift};
      AttentionData<double> db = da;
      db.c = bcase;
      db.k.clear();
      db.v.clear();
      for (int64_t bh = 0; bh < a.batch * a.heads; ++bh) {
        db.k.insert(db.k.end(), da.k.begin() + (bh * a.k_len + shift) * a.dk,
                    da.k.begin() + (bh + 1) * a.k_len * a.dk);
        db.v.insert(db.v.end(), da.v.begin() + (bh * a.k_len + shift) * a.dv,
                    da.v.begin() + (bh + 1) * a.k_len * a.dv);
      }
      const AttentionOutputBuffers<double> ra = Forward(da), rb = Forward(db);
      // The exact zeros make the two sums identical term by term; allow
      // rounding anyway so a reordered implementation also passes.
      const double tol = DoubleTolerance(db);
      EXPECT_LE(MaxAbsError(rb.out, ra.out), tol)
          << "causal=" << causal << " per_head=" << per_head;
      EXPECT_LE(MaxAbsError(rb.lse, ra.lse), tol);
      // Sanity: the test is sensitive to distances. Without lowering the
      // offset (every distance moves by c), the outputs differ.
      AttentionData<double> dc = db;
      dc.c.options.query_offset = *a.options.query_offset;
      EXPECT_GT(MaxAbsError(Forward(dc).out, ra.out), 1e-3);
    }
  }
}

// Decoding with a key/value cache: row i of a causal self-attention over n
// positions equals a single-query call against the first i + 1 keys with
// the DEFAULT offset Nk - Nq = i (docs/math.md section 1: queries are the last
// Nq positions). A chunk of queries [i0, i1) against keys [0, i1) likewise.
TEST(RelativeOnly, IncrementalDecodingMatchesFullCausal) {
  for (bool per_head : {false, true}) {
    AttentionCase full = MakeCase("full", 1, 2, 9, 9, 3, 4, 3);
    full.options.causal = true;
    full.options.per_head_tables = per_head;
    const AttentionData<double> df = MakeRandomData<double>(full, 41);
    const AttentionOutputBuffers<double> rf = Forward(df);
    const double tol = DoubleTolerance(df);
    auto run_chunk = [&](int64_t i0, int64_t i1) {
      AttentionCase c = full;
      c.q_len = i1 - i0;
      c.k_len = i1;
      AttentionData<double> d;
      d.c = c;
      d.ak = df.ak;
      d.av = df.av;
      for (int64_t h = 0; h < full.heads; ++h) {
        d.q.insert(d.q.end(), df.q.begin() + (h * full.q_len + i0) * full.dk,
                   df.q.begin() + (h * full.q_len + i1) * full.dk);
        d.k.insert(d.k.end(), df.k.begin() + h * full.k_len * full.dk,
                   df.k.begin() + (h * full.k_len + i1) * full.dk);
        d.v.insert(d.v.end(), df.v.begin() + h * full.k_len * full.dv,
                   df.v.begin() + (h * full.k_len + i1) * full.dv);
      }
      // For a single query the cache holds no future key, so the call
      // without the causal mask must agree too; a chunk needs the mask.
      for (bool causal : {true, false}) {
        if (!causal && i1 - i0 > 1) continue;
        d.c.options.causal = causal;
        const AttentionOutputBuffers<double> r = Forward(d);
        for (int64_t h = 0; h < full.heads; ++h) {
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t row_full = h * full.q_len + i;
            const int64_t row = h * c.q_len + (i - i0);
            EXPECT_NEAR(r.lse[row], rf.lse[row_full], tol);
            for (int64_t t = 0; t < full.dv; ++t)
              EXPECT_NEAR(r.out[row * full.dv + t],
                          rf.out[row_full * full.dv + t], tol)
                  << "chunk [" << i0 << ", " << i1 << ") row " << i;
          }
        }
      }
    };
    for (int64_t i = 0; i < full.q_len; ++i) run_chunk(i, i + 1);
    run_chunk(2, 6);
    run_chunk(0, 9);
  }
}

// Trailing padding: appending keys that key_lengths hides changes nothing,
// provided the offset is explicit (the default Nk - Nq moves with Nk).
TEST(RelativeOnly, AppendingPaddedKeysChangesNothing) {
  AttentionCase a = MakeCase("a", 2, 1, 4, 5, 3, 2, 2);
  a.options.query_offset = 1;
  a.options.key_lengths = {5, 3};
  const AttentionData<double> da = MakeRandomData<double>(a, 51);
  AttentionCase bcase = a;
  bcase.k_len = 8;
  AttentionData<double> db = MakeRandomData<double>(bcase, 52);
  db.ak = da.ak;
  db.av = da.av;
  db.q = da.q;
  for (int64_t b = 0; b < a.batch; ++b) {
    std::copy(da.k.begin() + b * a.k_len * a.dk,
              da.k.begin() + (b + 1) * a.k_len * a.dk,
              db.k.begin() + b * bcase.k_len * a.dk);
    std::copy(da.v.begin() + b * a.k_len * a.dv,
              da.v.begin() + (b + 1) * a.k_len * a.dv,
              db.v.begin() + b * bcase.k_len * a.dv);
  }
  const double tol = DoubleTolerance(da);
  const AttentionOutputBuffers<double> ra = Forward(da), rb = Forward(db);
  EXPECT_LE(MaxAbsError(rb.out, ra.out), tol);
  EXPECT_LE(MaxAbsError(rb.lse, ra.lse), tol);
}

// ---- (c) far buckets ------------------------------------------------------

// Non-causal self-attention, Nq = Nk = 12, k = 3, off = 0: row i has a pair
// at distance <= -3 iff i >= 3 and one at distance >= +3 iff i <= 8.
class FarBucketTest : public testing::Test {
 protected:
  void SetUp() override {
    c_ = MakeCase("far", 1, 1, 12, 12, 4, 3, 3);
    d_ = MakeRandomData<double>(c_, 61);
    base_ = Forward(d_);
  }
  bool HasPairAt(int64_t i, int64_t row) const {
    const int64_t k = c_.options.max_distance;
    for (int64_t j = 0; j < c_.KeyEnd(0, i); ++j)
      if (std::clamp(j - (i + c_.QueryOffset()), -k, k) + k == row) return true;
    return false;
  }
  // Adds a random vector to row `row` of ak (key side) or av (value side).
  AttentionData<double> Perturbed(bool key_side, int64_t row) const {
    AttentionData<double> d = d_;
    std::vector<double>& t = key_side ? d.ak : d.av;
    const int64_t width = key_side ? c_.dk : c_.dv;
    const std::vector<double> delta = RandomVector<double>(width, 62);
    for (int64_t x = 0; x < width; ++x) t[row * width + x] += delta[x];
    return d;
  }
  AttentionCase c_;
  AttentionData<double> d_;
  AttentionOutputBuffers<double> base_;
};

// Changing AK row r changes the scores (hence lse and the output) of exactly
// the rows with a visible pair in bucket r; the others are bit-identical.
TEST_F(FarBucketTest, KeyTableRowAffectsOnlyItsPairs) {
  for (int64_t row : {int64_t{0}, int64_t{6}, int64_t{4}}) {  // -k, +k, +1
    const AttentionOutputBuffers<double> r = Forward(Perturbed(true, row));
    int changed = 0;
    for (int64_t i = 0; i < c_.q_len; ++i) {
      if (HasPairAt(i, row)) {
        EXPECT_GT(std::abs(r.lse[i] - base_.lse[i]), 1e-6)
            << "table row " << row << ", query " << i;
        ++changed;
      } else {
        EXPECT_EQ(r.lse[i], base_.lse[i]) << "row " << row << ", query " << i;
        for (int64_t t = 0; t < c_.dv; ++t)
          EXPECT_EQ(r.out[i * c_.dv + t], base_.out[i * c_.dv + t]);
      }
    }
    // Rows 3..11 use bucket 0, rows 0..8 bucket 6, rows 0..10 bucket 4.
    EXPECT_EQ(changed, row == 0 ? 9 : row == 6 ? 9 : 11);
  }
}

// Changing AV row r by delta leaves every score alone and moves o_i by
// exactly W[i, r] delta, W[i, r] = sum of p_ij over the pairs in bucket r
// (docs/math.md section 2), with p_ij = exp(s_ij - lse_i) from the test's own
// scores and the API's lse.
TEST_F(FarBucketTest, ValueTableRowMovesOutputByBucketMass) {
  const int64_t k = c_.options.max_distance;
  for (int64_t row : {int64_t{0}, int64_t{6}, int64_t{3}}) {
    const AttentionData<double> dp = Perturbed(false, row);
    const AttentionOutputBuffers<double> r = Forward(dp);
    const std::vector<double> delta = RandomVector<double>(c_.dv, 62);
    for (int64_t i = 0; i < c_.q_len; ++i) {
      EXPECT_EQ(r.lse[i], base_.lse[i]);
      double w = 0;
      for (int64_t j = 0; j < c_.KeyEnd(0, i); ++j)
        if (std::clamp(j - (i + c_.QueryOffset()), -k, k) + k == row)
          w += std::exp(Score(d_, 0, 0, i, j) - base_.lse[i]);
      EXPECT_EQ(w > 0, HasPairAt(i, row));
      for (int64_t t = 0; t < c_.dv; ++t)
        EXPECT_NEAR(r.out[i * c_.dv + t] - base_.out[i * c_.dv + t],
                    w * delta[t], DoubleTolerance(dp))
            << "table row " << row << ", query " << i;
    }
  }
}

// With a causal mask and off = 0 no pair has a positive distance: the +k row
// (and every row above k) is never used, and changing it changes nothing.
TEST_F(FarBucketTest, CausalNeverUsesPositiveRows) {
  c_.options.causal = true;
  d_.c = c_;
  base_ = Forward(d_);
  for (bool key_side : {true, false}) {
    for (int64_t row = c_.options.max_distance + 1; row < c_.TableRows();
         ++row) {
      AttentionData<double> d = Perturbed(key_side, row);
      d.c = c_;
      const AttentionOutputBuffers<double> r = Forward(d);
      EXPECT_EQ(r.out, base_.out);
      EXPECT_EQ(r.lse, base_.lse);
    }
  }
}

// ---- (d) rows that see no key ---------------------------------------------

template <typename T>
void CheckEmptyRows(const AttentionCase& c) {
  SCOPED_TRACE(c.Describe());
  const AttentionData<T> d = CastData<T>(MakeRandomData<double>(c, 71));
  AttentionOptions options = c.options;
  options.path = AttentionPath::kReference;
  AttentionOutputBuffers<T> fwd = Forward(d, options);
  const std::vector<T> dout = RandomVector<T>(c.OutNumel(), 72);
  AttentionGradBuffers<T> g = MakeGrads<T>(c, d);
  AttentionBackward<T>(d.Inputs(), fwd.Out(), fwd.Lse(), OutShaped(c, dout),
                       g.Grads(), options);
  EXPECT_TRUE(AllFinite(fwd.out));
  for (std::vector<T>* t : g.Tensors()) EXPECT_TRUE(AllFinite(*t));
  int empty_rows = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t row = (b * c.heads + h) * c.q_len + i;
        if (c.KeyEnd(b, i) > 0) continue;
        ++empty_rows;
        EXPECT_EQ(fwd.lse[row], -std::numeric_limits<T>::infinity());
        for (int64_t t = 0; t < c.dv; ++t)
          EXPECT_EQ(fwd.out[row * c.dv + t], 0);
        for (int64_t t = 0; t < c.dk; ++t) EXPECT_EQ(g.dq[row * c.dk + t], 0);
      }
    }
  }
  EXPECT_GT(empty_rows, 0) << "case has no empty row";
}

TEST(EmptyRows, CausalNegativeOffset) {
  AttentionCase c = MakeCase("neg", 2, 2, 6, 6, 3, 2, 2);
  c.options.causal = true;
  c.options.query_offset = -3;  // rows 0..2 see nothing
  CheckEmptyRows<double>(c);
  CheckEmptyRows<float>(c);
}

TEST(EmptyRows, CausalDefaultOffsetWithNqGreaterThanNk) {
  AttentionCase c = MakeCase("nq_gt_nk", 1, 2, 8, 3, 2, 3, 1);
  c.options.causal = true;  // off = -5: rows 0..4 see nothing
  CheckEmptyRows<double>(c);
  CheckEmptyRows<float>(c);
}

// Every row of every item sees nothing: all gradients, tables included, are
// zero.
TEST(EmptyRows, AllKeyLengthsZero) {
  AttentionCase c = MakeCase("all_empty", 2, 2, 3, 4, 3, 2, 2);
  c.options.key_lengths = {0, 0};
  c.options.per_head_tables = true;
  CheckEmptyRows<double>(c);
  CheckEmptyRows<float>(c);
  const AttentionData<double> d = MakeRandomData<double>(c, 73);
  AttentionOutputBuffers<double> fwd = Forward(d);
  const std::vector<double> dout = RandomVector<double>(c.OutNumel(), 74);
  AttentionGradBuffers<double> g = MakeGrads<double>(c, d);
  AttentionBackward<double>(d.Inputs(), fwd.Out(), fwd.Lse(),
                            OutShaped(c, dout), g.Grads(), c.options);
  for (std::vector<double>* t : g.Tensors())
    for (double x : *t) EXPECT_EQ(x, 0.0);
}

// ---- (e) float reference vs double reference -----------------------------
//
// Both runs see the same input values (float data, widened to double), so
// only float rounding inside the computation separates them. Forward bound,
// per row i, with u = 2^-24:
//   scores: |ds_ij| <= (dk + 3) u S_ij, S_ij = sum_t |q_it| (|k_jt| +
//           |AK_rt|) / sqrt(dk) (two dk-term dot products, add, scale);
//   probabilities: relative error <= 2 max_j |ds_ij| + (Nk + 4) u (the
//           shift by the max, exp, the Nk-term denominator, the division);
//   output: |do_i| <= (2 max_j |ds_ij| + (2 Nk + 6) u) max_j |w_ij|, with
//           the 2 Nk-term accumulation of p_ij w_ij added in;
//   lse: |dlse_i| <= max_j |ds_ij| + (Nk + 4) u.
// A factor 2 covers the libm exp/log error and first-order neglects.
// Gradients sum O(Nk + Nq) terms, each with a relative error of the forward
// kind, and cancel (sum_j dS_ij = 0: a far bucket's dAK is exactly zero in
// exact arithmetic), so their bound is relative to the sum of the absolute
// values of the terms, not to the gradient itself:
//   |dg| <= 4 (2 max|ds| + (Nq + Nk + dk + dv) u) sum |terms|.
class FloatVsDoubleTest : public testing::TestWithParam<AttentionCase> {};

TEST_P(FloatVsDoubleTest, ReferenceAgrees) {
  const AttentionCase& c = GetParam();
  SCOPED_TRACE(c.Describe());
  const AttentionData<float> df = MakeRandomData<float>(c, 81);
  const AttentionData<double> dd = CastData<double>(df);
  AttentionOptions options = c.options;
  options.path = AttentionPath::kReference;
  AttentionOutputBuffers<float> rf = Forward(df, options);
  AttentionOutputBuffers<double> rd = Forward(dd, options);

  const std::vector<float> dout_f = RandomVector<float>(c.OutNumel(), 82);
  const std::vector<double> dout_d(dout_f.begin(), dout_f.end());

  const double u = kUnitRoundoffF;
  double max_ds_all = 0;
  // Magnitudes of the terms the gradients sum (see the comment above the
  // class): per row, |dP_ij| and |D_i| are <= G_i = ||dO_i||_1 max_j |w_ij|,
  // so sum_j |dS_ij| <= 2 G_i / sqrt(dk).
  double max_row_ds = 0, sum_row_ds = 0, sum_row_dout = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h;
      const int64_t tab = (c.options.per_head_tables ? h : 0) * c.TableRows();
      const int64_t k = c.options.max_distance;
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t end = c.KeyEnd(b, i);
        const int64_t row = bh * c.q_len + i;
        if (end == 0) {
          EXPECT_EQ(rf.lse[row], -std::numeric_limits<float>::infinity());
          continue;
        }
        double max_ds = 0, max_w = 0;
        for (int64_t j = 0; j < end; ++j) {
          const int64_t r = std::clamp(j - (i + c.QueryOffset()), -k, k) + k;
          double s_abs = 0;
          for (int64_t t = 0; t < c.dk; ++t) {
            double kt = std::abs(dd.k[(bh * c.k_len + j) * c.dk + t]);
            if (!dd.ak.empty()) kt += std::abs(dd.ak[(tab + r) * c.dk + t]);
            s_abs += std::abs(dd.q[(bh * c.q_len + i) * c.dk + t]) * kt;
          }
          s_abs /= std::sqrt(static_cast<double>(c.dk));
          max_ds = std::max(max_ds, (c.dk + 3) * u * s_abs);
          for (int64_t t = 0; t < c.dv; ++t) {
            double w = std::abs(dd.v[(bh * c.k_len + j) * c.dv + t]);
            if (!dd.av.empty()) w += std::abs(dd.av[(tab + r) * c.dv + t]);
            max_w = std::max(max_w, w);
          }
        }
        max_ds_all = std::max(max_ds_all, max_ds);
        double dout_l1 = 0, dout_max = 0;
        for (int64_t t = 0; t < c.dv; ++t) {
          dout_l1 += std::abs(dout_d[row * c.dv + t]);
          dout_max = std::max(dout_max, std::abs(dout_d[row * c.dv + t]));
        }
        const double row_ds =
            2 * dout_l1 * max_w / std::sqrt(static_cast<double>(c.dk));
        max_row_ds = std::max(max_row_ds, row_ds);
        sum_row_ds += row_ds;
        sum_row_dout += dout_max;
        const double tol_out = 2 * (2 * max_ds + (2 * c.k_len + 6) * u) * max_w;
        const double tol_lse = 2 * (max_ds + (c.k_len + 4) * u);
        EXPECT_NEAR(rf.lse[row], rd.lse[row], tol_lse) << "row " << row;
        for (int64_t t = 0; t < c.dv; ++t)
          EXPECT_NEAR(rf.out[row * c.dv + t], rd.out[row * c.dv + t], tol_out)
              << "row " << row;
      }
    }
  }

  AttentionGradBuffers<float> gf = MakeGrads<float>(c, df);
  AttentionGradBuffers<double> gd = MakeGrads<double>(c, dd);
  AttentionBackward<float>(df.Inputs(), rf.Out(), rf.Lse(),
                           OutShaped(c, dout_f), gf.Grads(), options);
  AttentionBackward<double>(dd.Inputs(), rd.Out(), rd.Lse(),
                            OutShaped(c, dout_d), gd.Grads(), options);
  const char* names[] = {"dq", "dk", "dv", "dak", "dav"};
  // Upper bounds on sum |term| of one gradient element: dQ_i sums
  // dS_ij (k_j + AK_r) over j; dK_j and dAK_r sum dS_ij q_i over rows (at
  // most all rows); dV_j and dAV_r sum p_ij dO_i over rows.
  const double max_q = MaxAbs(dd.q), max_kak = MaxAbs(dd.k) + MaxAbs(dd.ak);
  const double term_mag[] = {max_row_ds * max_kak, sum_row_ds * max_q,
                             sum_row_dout, sum_row_ds * max_q, sum_row_dout};
  const double growth = c.q_len + c.k_len + c.dk + c.dv;
  for (int t = 0; t < 5; ++t) {
    const std::vector<float>& a = *gf.Tensors()[t];
    const std::vector<double>& e = *gd.Tensors()[t];
    const double tol = 4 * (2 * max_ds_all + growth * u) * term_mag[t];
    EXPECT_LE(MaxAbsError(a, e), tol) << names[t];
  }
}

std::vector<AttentionCase> FloatCases() {
  std::vector<AttentionCase> cases = StandardCases();
  // A few realistic sizes from the sweep (dk = dv = 64, n up to 129).
  for (const AttentionCase& c : SizeSweepCases()) {
    if (c.name == "sq65_causal" || c.name == "perhead_pad_dk64_dv32" ||
        c.name == "chunk_17x130" || c.name == "odd_dims_dk17_dv9" ||
        c.name == "n_lt_k")
      cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, FloatVsDoubleTest,
                         testing::ValuesIn(FloatCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace relpos
