// Tests of the shared test infrastructure itself: the helpers other tests
// rely on to fail must be able to fail.
#include "support/attention_cases.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace relpos {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(ErrorNorms, MaxAbsError) {
  EXPECT_EQ(
      MaxAbsError(std::vector<double>{1, 2, 3}, std::vector<double>{1, 2.5, 2}),
      1.0);
  EXPECT_EQ(MaxAbsError(std::vector<double>{1}, std::vector<double>{1, 2}),
            kInf);
  // A NaN anywhere is an infinite error, also when later entries are fine.
  EXPECT_EQ(
      MaxAbsError(std::vector<double>{kNan, 1}, std::vector<double>{0, 1.5}),
      kInf);
  EXPECT_EQ(MaxAbsError(std::vector<float>{0}, std::vector<double>{kNan}),
            kInf);
  // Equal infinities (lse of empty rows) are no error; unequal ones are.
  EXPECT_EQ(
      MaxAbsError(std::vector<double>{-kInf, 1}, std::vector<double>{-kInf, 1}),
      0.0);
  EXPECT_EQ(MaxAbsError(std::vector<double>{-kInf}, std::vector<double>{0}),
            kInf);
}

TEST(ErrorNorms, RelFrobeniusAndNmse) {
  const std::vector<double> e = {3, 4}, a = {3, 4.5};
  EXPECT_DOUBLE_EQ(RelFrobeniusError(a, e), 0.5 / 5);
  EXPECT_DOUBLE_EQ(Nmse(a, e), 0.01);
  EXPECT_DOUBLE_EQ(
      RelFrobeniusError(std::vector<double>{0, 2}, std::vector<double>{0, 0}),
      2.0);  // absolute norm for an all-zero reference
  EXPECT_EQ(RelFrobeniusError(std::vector<double>{kNan, 4}, e), kInf);
}

TEST(Cases, NamesUniqueAndValid) {
  for (const auto& list : {StandardCases(), SizeSweepCases()}) {
    std::set<std::string> names;
    for (const AttentionCase& c : list) {
      EXPECT_TRUE(names.insert(c.name).second) << "duplicate " << c.name;
      for (char ch : c.name)
        EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')
            << c.name;
      EXPECT_TRUE(c.options.key_lengths.empty() ||
                  static_cast<int64_t>(c.options.key_lengths.size()) == c.batch)
          << c.name;
    }
  }
}

TEST(Cases, Flops) {
  AttentionCase c;
  c.batch = 2;
  c.heads = 3;
  c.q_len = 5;
  c.k_len = 7;
  c.dk = 8;
  c.dv = 4;
  c.options.max_distance = 2;
  // 4 B H Nq Nk d with d = (dk + dv) / 2 = 6.
  EXPECT_EQ(c.Flops(), 4.0 * 2 * 3 * 5 * 7 * 6);
  EXPECT_EQ(c.RelativeFlops(), 2.0 * 2 * 3 * 5 * 5 * (8 + 4));
  c.options.value_term = false;
  EXPECT_EQ(c.RelativeFlops(), 2.0 * 2 * 3 * 5 * 5 * 8);
}

TEST(Data, ReproducibleAndFloatIsRoundedDouble) {
  for (const AttentionCase& c : StandardCases()) {
    const AttentionData<double> a = MakeRandomData<double>(c, 42);
    const AttentionData<double> b = MakeRandomData<double>(c, 42);
    const AttentionData<float> f = MakeRandomData<float>(c, 42);
    EXPECT_EQ(a.q, b.q);
    EXPECT_EQ(a.ak, b.ak);
    EXPECT_EQ(f.v, CastData<float>(a).v);
    EXPECT_EQ(a.ak.empty(), !c.options.key_term) << c.name;
    EXPECT_EQ(a.av.empty(), !c.options.value_term) << c.name;
    EXPECT_EQ(static_cast<int64_t>(a.q.size()), c.QNumel());
    EXPECT_EQ(static_cast<int64_t>(a.v.size()), c.VNumel());
    EXPECT_NE(MakeRandomData<double>(c, 43).q, a.q);
    const AttentionInputs<double> in = a.Inputs();
    EXPECT_EQ(in.q.numel(), c.QNumel());
    EXPECT_EQ(in.ak.empty(), a.ak.empty());
    if (!in.ak.empty()) {
      EXPECT_EQ(in.ak.rank(), c.options.per_head_tables ? 3 : 2);
      EXPECT_EQ(in.ak.numel(), c.AkNumel());
    }
  }
}

TEST(Data, BuffersStartAsNan) {
  const AttentionCase c = StandardCases().front();
  const AttentionData<float> d = MakeRandomData<float>(c, 1);
  AttentionOutputBuffers<float> o = MakeOutputs<float>(c);
  AttentionGradBuffers<float> g = MakeGrads<float>(c, d);
  EXPECT_FALSE(AllFinite(o.out));
  EXPECT_FALSE(AllFinite(o.lse));
  for (std::vector<float>* t : g.Tensors()) {
    EXPECT_FALSE(t->empty());
    EXPECT_TRUE(std::isnan((*t)[0]));
  }
  EXPECT_EQ(g.Grads().dak.numel(), c.AkNumel());
}

}  // namespace
}  // namespace relpos
