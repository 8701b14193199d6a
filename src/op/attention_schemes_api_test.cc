// Validation and path choice of the scheme options of include/relpos/
// attention.h (docs/math.md section 8): every bad bucket map, score term,
// slope list, bias or position query bias is an InvalidArgument naming the
// argument and its value; every scheme runs fused on an explicit float
// request; unused scheme inputs get zero gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "relpos/attention.h"
#include "support/attention_cases.h"
#include "support/expect_invalid.h"

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

// Every scheme runs fused on an explicit kFused float call, shaw-log (the
// vector terms under T5 buckets) included, and kAuto takes the same path:
// bit-identical results. Double calls refuse kFused.
TEST(SchemeDispatch, ExplicitFusedRunsEveryScheme) {
  std::vector<AttentionCase> cases = SchemeCases();
  AttentionCase log = Base();  // shaw-log at the API's shapes
  log.options.buckets.kind = BucketKind::kT5;
  log.options.buckets.t5 = {8, 10, true};
  cases.push_back(log);
  AttentionCase alibi_log = log;  // ALiBi with a value table under T5
  alibi_log.options.score_term = ScoreTerm::kAlibi;
  cases.push_back(alibi_log);
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.Describe());
    const AttentionData<float> d =
        CastData<float>(MakeRandomData<double>(c, 6));
    AttentionOptions fused = c.options;
    fused.path = AttentionPath::kFused;
    AttentionOutputBuffers<float> a = MakeOutputs<float>(c);
    AttentionOutputBuffers<float> b = MakeOutputs<float>(c);
    ASSERT_NO_THROW(AttentionForward<float>(d.Inputs(), a.Out(), a.Lse(), fused));
    AttentionOptions automatic = c.options;
    automatic.path = AttentionPath::kAuto;
    AttentionForward<float>(d.Inputs(), b.Out(), b.Lse(), automatic);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.lse, b.lse);
  }
  const AttentionData<double> d = MakeRandomData<double>(log, 7);
  AttentionOptions o = log.options;
  o.path = AttentionPath::kFused;
  ExpectInvalid([&] { Forward(log, d, o); }, {"fused kernel", "float only"});
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
