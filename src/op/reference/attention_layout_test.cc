// The row-layout options of include/relpos/attention.h are what they claim
// to be, on the reference path in double, for every case of LayoutCases
// (every scheme): each equals an equivalent call without the option.
//   - Left padding (key_starts): item b equals the call on its keys
//     [s_b, Nk) alone with the query offset lowered by s_b, i.e. distances
//     count from the first real key (docs/conventions.md, "Left padding");
//     the keys before s_b get zero dK / dV.
//   - Per-row query offsets: item b equals a call with the scalar offset
//     off_b.
//   - Grouped-query attention: equals multi-head attention on k and v
//     repeated per query head (transformers' repeat_kv), and dK / dV are
//     the sums of the repeated heads' gradients.
// Together with the fused-vs-reference comparisons (fused_attention_test)
// and the finite-difference checks (attention_grad_test) on the same cases,
// this ties the new options to the ones tested before them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "relpos/attention.h"
#include "support/attention_cases.h"

namespace relpos {
namespace {

struct RefRun {
  AttentionOutputBuffers<double> fwd;
  AttentionGradBuffers<double> grads;
};

// Forward and backward on the reference with dout = r.
RefRun RunReference(const AttentionData<double>& d,
                    const std::vector<double>& r) {
  AttentionOptions o = d.c.options;
  o.path = AttentionPath::kReference;
  RefRun run{MakeOutputs<double>(d.c), MakeGrads<double>(d.c, d)};
  AttentionForward<double>(d.Inputs(), run.fwd.Out(), run.fwd.Lse(), o);
  AttentionBackward<double>(d.Inputs(), run.fwd.Out(), run.fwd.Lse(),
                            OutShaped(d.c, r), run.grads.Grads(), o);
  return run;
}

// Unit roundoff of double: the comparisons below hold two summation orders
// of the same terms to TermScales' rounding bound (docs/math.md sections 2-3).
constexpr double kU = std::numeric_limits<double>::epsilon() / 2;

// Copies `n` contiguous values per (outer index) from src rows to dst rows.
void CopyRows(const std::vector<double>& src, int64_t src_offset,
              std::vector<double>& dst, int64_t dst_offset, int64_t n) {
  std::copy(src.begin() + src_offset, src.begin() + src_offset + n,
            dst.begin() + dst_offset);
}

void ExpectNear(const std::vector<double>& got, int64_t got_offset,
                const std::vector<double>& want, int64_t want_offset, int64_t n,
                double tol, const char* what) {
  for (int64_t e = 0; e < n; ++e) {
    const double a = got[got_offset + e], b = want[want_offset + e];
    if (a == b) continue;  // equal infinities (lse of rows that see nothing)
    EXPECT_NEAR(a, b, tol) << what << "[" << e << "]";
  }
}

// Item b of `c` as a call of its own: batch 1, keys [s_b, Nk) (when
// `drop_padding`, else all keys), the scalar query offset off_b - s_b, the
// key length len_b - s_b, no key starts or per-row offsets.
AttentionCase ItemAlone(const AttentionCase& c, int64_t b, bool drop_padding) {
  AttentionCase one = c;
  one.batch = 1;
  const int64_t s = drop_padding ? c.KeyBegin(b) : 0;
  one.k_len = c.k_len - s;
  one.options.query_offsets.clear();
  one.options.query_offset = c.QueryOffset(b) - s;
  const int64_t len =
      c.options.key_lengths.empty() ? c.k_len : c.options.key_lengths[b];
  one.options.key_lengths = {len - s};
  one.options.key_starts.clear();
  if (!drop_padding && c.KeyBegin(b) > 0)
    one.options.key_starts = {c.KeyBegin(b)};
  return one;
}

// Data of ItemAlone(c, b, drop_padding) taken from `d`: q and dout of item
// b, k and v of its keys from s_b on; the tables are shared by all items.
AttentionData<double> ItemData(const AttentionData<double>& d,
                               const AttentionCase& one, int64_t b, int64_t s) {
  const AttentionCase& c = d.c;
  AttentionData<double> e = d;
  e.c = one;
  const int64_t hkv = c.KvHeads();
  e.q.assign(one.QNumel(), 0);
  e.k.assign(one.KNumel(), 0);
  e.v.assign(one.VNumel(), 0);
  CopyRows(d.q, b * c.heads * c.q_len * c.dk, e.q, 0, one.QNumel());
  for (int64_t h = 0; h < hkv; ++h) {
    CopyRows(d.k, ((b * hkv + h) * c.k_len + s) * c.dk, e.k,
             h * one.k_len * c.dk, one.k_len * c.dk);
    CopyRows(d.v, ((b * hkv + h) * c.k_len + s) * c.dv, e.v,
             h * one.k_len * c.dv, one.k_len * c.dv);
  }
  return e;
}

class LayoutTest : public testing::TestWithParam<AttentionCase> {};
class GroupedQueryTest : public testing::TestWithParam<AttentionCase> {};

// The cases of LayoutCases with fewer key/value heads than query heads.
std::vector<AttentionCase> GroupedQueryCases() {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : LayoutCases())
    if (c.KvHeads() < c.heads) cases.push_back(c);
  return cases;
}

// Every item of a left-padded, per-row-offset call equals the item alone
// without its padding (distances from the first real key), and equals the
// item alone with its padding kept (per-row offsets = scalar offsets). The
// table gradients are sums over items, so they are compared summed.
TEST_P(LayoutTest, EachItemEqualsItsOwnCall) {
  const AttentionCase& c = GetParam();
  SCOPED_TRACE(c.Describe());
  const AttentionData<double> d = MakeRandomData<double>(c, 41);
  const std::vector<double> r = RandomVector<double>(c.OutNumel(), 42);
  const RefRun all = RunReference(d, r);
  const TermScales ts = ComputeTermScales(d, r);
  for (bool drop : {true, false}) {
    std::vector<double> dak_sum(all.grads.dak.size(), 0),
        dav_sum(all.grads.dav.size(), 0), dbias_sum(all.grads.dbias.size(), 0),
        dpb_sum(all.grads.dpb.size(), 0);
    for (int64_t b = 0; b < c.batch; ++b) {
      SCOPED_TRACE(testing::Message() << "item " << b << " drop " << drop);
      const int64_t s = drop ? c.KeyBegin(b) : 0;
      const AttentionCase one = ItemAlone(c, b, drop);
      const AttentionData<double> e = ItemData(d, one, b, s);
      std::vector<double> r_one(one.OutNumel());
      CopyRows(r, b * one.OutNumel(), r_one, 0, one.OutNumel());
      const RefRun alone = RunReference(e, r_one);
      ExpectNear(all.fwd.out, b * one.OutNumel(), alone.fwd.out, 0,
                 one.OutNumel(), ts.Tolerance(kU, ts.out), "out");
      ExpectNear(all.fwd.lse, b * one.LseNumel(), alone.fwd.lse, 0,
                 one.LseNumel(), ts.Tolerance(kU, ts.lse), "lse");
      ExpectNear(all.grads.dq, b * one.QNumel(), alone.grads.dq, 0,
                 one.QNumel(), ts.Tolerance(kU, ts.dq), "dq");
      const int64_t hkv = c.KvHeads();
      for (int64_t h = 0; h < hkv; ++h) {
        const int64_t kv = b * hkv + h;
        // Keys before the first real one: no row sees them.
        for (int64_t j = 0; j < s; ++j) {
          for (int64_t t = 0; t < c.dk; ++t)
            EXPECT_EQ(all.grads.dk[(kv * c.k_len + j) * c.dk + t], 0.0);
          for (int64_t t = 0; t < c.dv; ++t)
            EXPECT_EQ(all.grads.dv[(kv * c.k_len + j) * c.dv + t], 0.0);
        }
        ExpectNear(all.grads.dk, (kv * c.k_len + s) * c.dk, alone.grads.dk,
                   h * one.k_len * c.dk, one.k_len * c.dk,
                   ts.Tolerance(kU, ts.dk), "dk");
        ExpectNear(all.grads.dv, (kv * c.k_len + s) * c.dv, alone.grads.dv,
                   h * one.k_len * c.dv, one.k_len * c.dv,
                   ts.Tolerance(kU, ts.dv), "dv");
      }
      auto add = [](std::vector<double>& sum, const std::vector<double>& g) {
        for (size_t x = 0; x < g.size(); ++x) sum[x] += g[x];
      };
      add(dak_sum, alone.grads.dak);
      add(dav_sum, alone.grads.dav);
      add(dbias_sum, alone.grads.dbias);
      add(dpb_sum, alone.grads.dpb);
    }
    ExpectNear(all.grads.dak, 0, dak_sum, 0, dak_sum.size(),
               ts.Tolerance(kU, ts.dak), "dak");
    ExpectNear(all.grads.dav, 0, dav_sum, 0, dav_sum.size(),
               ts.Tolerance(kU, ts.dav), "dav");
    ExpectNear(all.grads.dbias, 0, dbias_sum, 0, dbias_sum.size(),
               ts.Tolerance(kU, ts.dbias), "dbias");
    ExpectNear(all.grads.dpb, 0, dpb_sum, 0, dpb_sum.size(),
               ts.Tolerance(kU, ts.dpb), "dpb");
  }
}

// Grouped-query attention equals multi-head attention on repeated k, v.
TEST_P(GroupedQueryTest, EqualsRepeatedHeads) {
  const AttentionCase& c = GetParam();
  SCOPED_TRACE(c.Describe());
  const AttentionData<double> d = MakeRandomData<double>(c, 43);
  const std::vector<double> r = RandomVector<double>(c.OutNumel(), 44);
  AttentionCase mha = c;
  mha.kv_heads = 0;
  AttentionData<double> e = d;
  e.c = mha;
  e.k.assign(mha.KNumel(), 0);
  e.v.assign(mha.VNumel(), 0);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h, kv = c.KvSlice(b, h);
      CopyRows(d.k, kv * c.k_len * c.dk, e.k, bh * c.k_len * c.dk,
               c.k_len * c.dk);
      CopyRows(d.v, kv * c.k_len * c.dv, e.v, bh * c.k_len * c.dv,
               c.k_len * c.dv);
    }
  }
  const RefRun gqa = RunReference(d, r), rep = RunReference(e, r);
  // Every query head's computation is the same sequence of operations.
  EXPECT_EQ(gqa.fwd.out, rep.fwd.out);
  EXPECT_EQ(gqa.fwd.lse, rep.fwd.lse);
  EXPECT_EQ(gqa.grads.dq, rep.grads.dq);
  EXPECT_EQ(gqa.grads.dak, rep.grads.dak);
  EXPECT_EQ(gqa.grads.dav, rep.grads.dav);
  EXPECT_EQ(gqa.grads.dbias, rep.grads.dbias);
  EXPECT_EQ(gqa.grads.dpb, rep.grads.dpb);
  // dK, dV of a key/value head: the sum over its group's query heads.
  std::vector<double> dk(c.KNumel(), 0), dv(c.VNumel(), 0);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h, kv = c.KvSlice(b, h);
      for (int64_t x = 0; x < c.k_len * c.dk; ++x)
        dk[kv * c.k_len * c.dk + x] += rep.grads.dk[bh * c.k_len * c.dk + x];
      for (int64_t x = 0; x < c.k_len * c.dv; ++x)
        dv[kv * c.k_len * c.dv + x] += rep.grads.dv[bh * c.k_len * c.dv + x];
    }
  }
  const TermScales ts = ComputeTermScales(d, r);
  ExpectNear(gqa.grads.dk, 0, dk, 0, dk.size(), ts.Tolerance(kU, ts.dk), "dk");
  ExpectNear(gqa.grads.dv, 0, dv, 0, dv.size(), ts.Tolerance(kU, ts.dv), "dv");
}

INSTANTIATE_TEST_SUITE_P(Layout, LayoutTest, testing::ValuesIn(LayoutCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Layout, GroupedQueryTest,
                         testing::ValuesIn(GroupedQueryCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace relpos
