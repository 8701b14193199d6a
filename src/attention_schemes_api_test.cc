// Validation and path choice of the scheme options of include/relpos/
// attention.h (docs/math.md section 8): every bad bucket map, score term,
// slope list, bias or position query bias is an InvalidArgument naming the
// argument and its value; an explicit fused request for a scheme the fused
// kernel lacks is refused; unused scheme inputs get zero gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "relpos/attention.h"
#include "testing/attention_cases.h"
#include "testing/expect_invalid.h"

namespace relpos {
namespace {

// B = 2, H = 3, Nq = 4, Nk = 5, dk = 6, dv = 7.
AttentionCase Base() { return MakeCase("api", 2, 3, 4, 5, 6, 7, 2); }

template <typename T = double>
void Forward(const AttentionCase& c, const AttentionData<T>& d,
             const AttentionOptions& o) {
  AttentionOutputBuffers<T> fwd = MakeOutputs<T>(c);
  AttentionForward<T>(d.Inputs(), fwd.Out(), fwd.Lse(), o);
}

AttentionCase T5Case() {
  AttentionCase c = Base();
  c.options.buckets.kind = BucketKind::kT5;
  c.options.buckets.t5 = {8, 10, true};
  c.options.score_term = ScoreTerm::kScalarTable;
  c.options.value_term = false;
  return c;
}

TEST(SchemeValidation, BucketMaps) {
  AttentionCase c = Base();
  c.options.buckets.kind = BucketKind::kClip;
  c.options.buckets.clip = {3, 1};
  AttentionData<double> d = MakeRandomData<double>(c, 1);  // 5-row tables
  EXPECT_NO_THROW(Forward(c, d, c.options));
  AttentionOptions o = c.options;
  o.buckets.clip = {-1, 1};
  ExpectInvalid([&] { Forward(c, d, o); }, {"left", ">= 0", "-1"});
  o.buckets.clip = {3, -2};
  ExpectInvalid([&] { Forward(c, d, o); }, {"right", ">= 0", "-2"});
  o.buckets.clip = {(int64_t{1} << 24) + 1, 0};
  ExpectInvalid([&] { Forward(c, d, o); }, {"buckets.clip", "16777217"});
  o.buckets.clip = {2, 1};  // 4 rows, tables have 5
  ExpectInvalid([&] { Forward(c, d, o); },
                {"ak has shape [5, 6]",
                 "buckets.clip.left+buckets.clip.right+1 = 4"});
  o = c.options;
  o.buckets.kind = BucketKind::kT5;
  o.buckets.t5 = {3, 10, true};
  ExpectInvalid([&] { Forward(c, d, o); },
                {"num_buckets", ">= 4", "bidirectional", "got 3"});
  o.buckets.t5 = {8, 2, true};  // exact = 2: max_distance must exceed it
  ExpectInvalid([&] { Forward(c, d, o); }, {"max_distance", "> 2", "got 2"});
  o.buckets.t5 = {6, 10, true};  // 6 rows, tables have 5
  ExpectInvalid([&] { Forward(c, d, o); },
                {"ak has shape [5, 6]", "buckets.t5.num_buckets = 6"});
  o.buckets.t5 = {5, 10, false};  // causal, 5 rows: fits
  EXPECT_NO_THROW(Forward(c, d, o));
  o.buckets.kind = static_cast<BucketKind>(7);
  ExpectInvalid([&] { Forward(c, d, o); }, {"buckets.kind", "got 7"});
}

TEST(SchemeValidation, ScalarTable) {
  const AttentionCase c = T5Case();
  AttentionData<double> d = MakeRandomData<double>(c, 2);
  ASSERT_EQ(d.bias.size(), 3u * 8u);
  EXPECT_NO_THROW(Forward(c, d, c.options));
  AttentionData<double> none = d;
  none.bias.clear();
  ExpectInvalid([&] { Forward(c, none, c.options); },
                {"bias must not be empty"});
  AttentionData<double> wrong = d;
  wrong.bias.resize(3 * 7);
  AttentionCase c7 = c;
  c7.options.buckets.t5.num_buckets = 7;  // view [3, 7] against 8 buckets
  wrong.c = c7;
  ExpectInvalid([&] { Forward(c, wrong, c.options); },
                {"bias has shape [3, 7]", "buckets.t5.num_buckets = 8"});
  AttentionOptions o = c.options;
  o.score_term = static_cast<ScoreTerm>(5);
  ExpectInvalid([&] { Forward(c, d, o); }, {"score_term", "got 5"});
  // Key term off: the bias may be absent, and is ignored if present.
  o = c.options;
  o.key_term = false;
  EXPECT_NO_THROW(Forward(c, none, o));
  EXPECT_NO_THROW(Forward(c, d, o));
  // The value term needs AV with the bucket map's rows.
  o = c.options;
  o.value_term = true;
  ExpectInvalid([&] { Forward(c, d, o); }, {"av must not be empty"});
}

TEST(SchemeValidation, AlibiSlopes) {
  AttentionCase c = Base();
  c.options.score_term = ScoreTerm::kAlibi;
  c.options.value_term = false;
  const AttentionData<double> d = MakeRandomData<double>(c, 3);
  EXPECT_NO_THROW(Forward(c, d, c.options));  // the paper's slopes
  AttentionOptions o = c.options;
  o.alibi_slopes = {0.5, 0.25};
  ExpectInvalid([&] { Forward(c, d, o); },
                {"alibi_slopes", "heads = 3", "got 2"});
  o.alibi_slopes = {0.5, std::numeric_limits<double>::quiet_NaN(), 0.1};
  ExpectInvalid([&] { Forward(c, d, o); }, {"alibi_slopes[1]", "nan"});
  o.alibi_slopes = {0.5, 0.1, 2e6};
  ExpectInvalid([&] { Forward(c, d, o); }, {"alibi_slopes[2]", "2e+06"});
  o.alibi_slopes = {0.5, -0.1, 0};
  EXPECT_NO_THROW(Forward(c, d, o));
  o.score_term = ScoreTerm::kVector;
  ExpectInvalid([&] { Forward(c, d, o); },
                {"alibi_slopes given", "not kAlibi"});
}

TEST(SchemeValidation, PositionQueryBias) {
  AttentionCase c = Base();
  c.options.position_query_bias = true;
  const AttentionData<double> d = MakeRandomData<double>(c, 4);
  ASSERT_EQ(d.pb.size(), 3u * 6u);
  EXPECT_NO_THROW(Forward(c, d, c.options));
  AttentionData<double> none = d;
  none.pb.clear();
  ExpectInvalid([&] { Forward(c, none, c.options); }, {"pb must not be empty"});
  AttentionOptions o = c.options;
  o.key_term = false;
  ExpectInvalid([&] { Forward(c, d, o); },
                {"position_query_bias", "key_term = 0"});
  o = c.options;
  o.score_term = ScoreTerm::kAlibi;
  ExpectInvalid([&] { Forward(c, d, o); },
                {"position_query_bias", "score_term = kAlibi"});
  // A pb of the wrong shape is reported even when unused.
  AttentionCase wrong_c = c;
  wrong_c.dk = 5;
  AttentionData<double> wrong = d;
  wrong.c = wrong_c;  // pb view [3, 5]; q etc. keep their sizes
  AttentionInputs<double> in = d.Inputs();
  in.pb = wrong.Inputs().pb;
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  o = c.options;
  o.position_query_bias = false;
  ExpectInvalid([&] { AttentionForward<double>(in, fwd.Out(), fwd.Lse(), o); },
                {"pb has shape [3, 5]", "dk = 6"});
}

TEST(SchemeValidation, GradientShapes) {
  const AttentionCase c = T5Case();
  const AttentionData<double> d = MakeRandomData<double>(c, 5);
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  AttentionForward<double>(d.Inputs(), fwd.Out(), fwd.Lse(), c.options);
  std::vector<double> dout(c.OutNumel(), 1.0), scratch(100);
  AttentionGradBuffers<double> g = MakeGrads<double>(c, d);
  AttentionGrads<double> grads = g.Grads();
  grads.dbias = TensorView<double>(scratch.data(), {3, 7});
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(d.Inputs(), fwd.Out(), fwd.Lse(),
                                  OutShaped(c, dout), grads, c.options);
      },
      {"dbias must have shape [3, 8]", "got [3, 7]"});
  grads = g.Grads();
  grads.dpb = TensorView<double>(scratch.data(), {3, 6});
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(d.Inputs(), fwd.Out(), fwd.Lse(),
                                  OutShaped(c, dout), grads, c.options);
      },
      {"dpb given but pb is empty"});
}

TEST(SchemeDispatch, ExplicitFusedRefusesUnsupportedSchemes) {
  struct Bad {
    const char* needle;
    const char* got;
    AttentionCase c;
  };
  std::vector<Bad> bad;
  {
    AttentionCase c = Base();  // shaw-log: the vector terms under T5 buckets
    c.options.buckets.kind = BucketKind::kT5;
    c.options.buckets.t5 = {8, 10, true};
    bad.push_back({"asymmetric clip", "kT5", c});
  }
  for (Bad& b : bad) {
    SCOPED_TRACE(b.c.Describe());
    const AttentionData<float> d =
        CastData<float>(MakeRandomData<double>(b.c, 6));
    AttentionOptions o = b.c.options;
    o.path = AttentionPath::kFused;
    ExpectInvalid([&] { Forward<float>(b.c, d, o); },
                  {"fused kernel", b.needle, b.got, "kAuto or kReference"});
    o.path = AttentionPath::kAuto;
    EXPECT_NO_THROW(Forward<float>(b.c, d, o));
  }
  // ALiBi with its term off, or T5 buckets with no term that uses them, is
  // plain attention, which the kernel runs.
  AttentionCase c = Base();
  c.options.score_term = ScoreTerm::kAlibi;
  c.options.key_term = c.options.value_term = false;
  const AttentionData<float> d = CastData<float>(MakeRandomData<double>(c, 7));
  AttentionOptions o = c.options;
  o.path = AttentionPath::kFused;
  EXPECT_NO_THROW(Forward<float>(c, d, o));
  o.buckets.kind = BucketKind::kT5;
  o.buckets.t5 = {8, 10, true};
  EXPECT_NO_THROW(Forward<float>(c, d, o));
  // T5 (scalar table, log buckets) runs fused.
  {
    const AttentionCase t5 = T5Case();
    const AttentionData<float> d5 =
        CastData<float>(MakeRandomData<double>(t5, 10));
    AttentionOptions o5 = t5.options;
    o5.path = AttentionPath::kFused;
    EXPECT_NO_THROW(Forward<float>(t5, d5, o5));
  }
  // ALiBi runs fused whatever the bucket map (its score uses none), but not
  // with a value table under T5 buckets. The asymmetric clip (shaw-asym)
  // runs fused.
  o = c.options;
  o.key_term = true;
  o.buckets.kind = BucketKind::kT5;
  o.buckets.t5 = {8, 10, true};
  o.path = AttentionPath::kFused;
  EXPECT_NO_THROW(Forward<float>(c, d, o));
  {
    AttentionCase asym = Base();
    asym.options.buckets.kind = BucketKind::kClip;
    asym.options.buckets.clip = {3, 1};
    asym.options.path = AttentionPath::kFused;
    const AttentionData<float> da =
        CastData<float>(MakeRandomData<double>(asym, 11));
    EXPECT_NO_THROW(Forward<float>(asym, da, asym.options));
  }
  AttentionCase cv = c;
  cv.options = o;
  cv.options.value_term = true;
  const AttentionData<float> dv =
      CastData<float>(MakeRandomData<double>(cv, 9));
  ExpectInvalid([&] { Forward<float>(cv, dv, cv.options); },
                {"asymmetric clip", "kT5"});
}

// A bias or pb passed to a call that does not use it gets a zero gradient on
// both paths (include/relpos/attention.h), and changes nothing else.
TEST(SchemeGradients, UnusedBiasAndPbGetZeroGradient) {
  AttentionCase c = Base();  // Shaw: the fused kernel for float
  for (AttentionPath path : {AttentionPath::kFused, AttentionPath::kReference}) {
    AttentionData<float> d = CastData<float>(MakeRandomData<double>(c, 8));
    d.bias.assign(3 * 5, 0.5f);  // [H, 2k+1]
    d.pb.assign(3 * 6, 0.25f);   // [H, dk]
    AttentionOptions o = c.options;
    o.path = path;
    AttentionOutputBuffers<float> fwd = MakeOutputs<float>(c);
    AttentionForward<float>(d.Inputs(), fwd.Out(), fwd.Lse(), o);
    const std::vector<float> dout(c.OutNumel(), 1.0f);
    AttentionGradBuffers<float> g = MakeGrads<float>(c, d);
    ASSERT_EQ(g.dbias.size(), 15u);
    AttentionBackward<float>(d.Inputs(), fwd.Out(), fwd.Lse(),
                             OutShaped(c, dout), g.Grads(), o);
    for (float x : g.dbias) EXPECT_EQ(x, 0.0f);
    for (float x : g.dpb) EXPECT_EQ(x, 0.0f);
    AttentionData<float> plain = d;
    plain.bias.clear();
    plain.pb.clear();
    AttentionOutputBuffers<float> fwd0 = MakeOutputs<float>(c);
    AttentionForward<float>(plain.Inputs(), fwd0.Out(), fwd0.Lse(), o);
    EXPECT_EQ(fwd.out, fwd0.out);
  }
}

}  // namespace
}  // namespace relpos
