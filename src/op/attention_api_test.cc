// Argument validation of the public attention API (include/relpos/
// attention.h, src/op/attention.cc, src/op/core/attention_problem.cc): every check
// fires at least once, throws relpos::InvalidArgument, and its message starts
// with "relpos: " and names the argument and the offending value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "relpos/attention.h"
#include "relpos/error.h"
#include "support/attention_cases.h"

namespace relpos {
namespace {

// Runs `fn`, expects InvalidArgument whose message contains every fragment.
void ExpectInvalid(const std::function<void()>& fn,
                   std::initializer_list<const char*> fragments) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("relpos: ", 0), 0u) << msg;
    for (const char* f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos)
          << "message \"" << msg << "\" lacks \"" << f << "\"";
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return;
  }
  ADD_FAILURE() << "no exception; expected one mentioning "
                << *fragments.begin();
}

// A valid double problem (B=2, H=3, Nq=4, Nk=5, dk=6, dv=7, k=2, shared
// tables) whose pieces each test breaks one at a time.
class ApiTest : public testing::Test {
 protected:
  ApiTest() {
    c_.name = "api";
    c_.batch = 2;
    c_.heads = 3;
    c_.q_len = 4;
    c_.k_len = 5;
    c_.dk = 6;
    c_.dv = 7;
    c_.options.max_distance = 2;
    data_ = MakeRandomData<double>(c_, 1);
    in_ = data_.Inputs();
    fwd_ = MakeOutputs<double>(c_);
    dout_ = RandomVector<double>(c_.OutNumel(), 2);
    grads_ = MakeGrads<double>(c_, data_);
    // A buffer big enough for any wrong-shaped view below.
    scratch_.assign(4096, 0.0);
  }

  void Forward(const AttentionInputs<double>& in, TensorView<double> out,
               TensorView<double> lse, const AttentionOptions& o) {
    AttentionForward<double>(in, out, lse, o);
  }
  void Forward() { Forward(in_, fwd_.Out(), fwd_.Lse(), c_.options); }
  void Backward(const AttentionGrads<double>& g, const AttentionOptions& o) {
    AttentionForward<double>(in_, fwd_.Out(), fwd_.Lse(), o);
    AttentionBackward<double>(in_, fwd_.Out(), fwd_.Lse(), OutShaped(c_, dout_),
                              g, o);
  }
  TensorView<double> Scratch(std::initializer_list<int64_t> shape) {
    return TensorView<double>(scratch_.data(), shape);
  }

  AttentionCase c_;
  AttentionData<double> data_;
  AttentionInputs<double> in_;
  AttentionOutputBuffers<double> fwd_;
  std::vector<double> dout_;
  AttentionGradBuffers<double> grads_;
  std::vector<double> scratch_;
};

TEST_F(ApiTest, ValidProblemRuns) {
  EXPECT_NO_THROW(Forward());
  EXPECT_NO_THROW(Backward(grads_.Grads(), c_.options));
}

TEST_F(ApiTest, Options) {
  AttentionOptions o = c_.options;
  o.max_distance = -3;
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"max_distance", ">= 0", "-3"});
  o.max_distance = (int64_t{1} << 24) + 1;
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"max_distance", "16777217"});
  o = c_.options;
  o.num_threads = -1;
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"num_threads", "-1"});
  o = c_.options;
  o.query_offset = (int64_t{1} << 40) + 1;
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"query_offset", "1099511627777"});
  o.query_offset = -(int64_t{1} << 40) - 1;
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"query_offset", "-1099511627777"});
  // The limits themselves are accepted.
  o.query_offset = int64_t{1} << 40;
  EXPECT_NO_THROW(Forward(in_, fwd_.Out(), fwd_.Lse(), o));
  o.query_offset = -(int64_t{1} << 40);
  EXPECT_NO_THROW(Forward(in_, fwd_.Out(), fwd_.Lse(), o));
}

TEST_F(ApiTest, KeyLengths) {
  AttentionOptions o = c_.options;
  o.key_lengths = {5};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"key_lengths", "batch = 2", "got 1"});
  o.key_lengths = {5, 5, 5};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"key_lengths", "got 3"});
  o.key_lengths = {5, -1};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"key_lengths[1]", "Nk = 5", "-1"});
  o.key_lengths = {6, 0};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"key_lengths[0]", "Nk = 5", "got 6"});
  o.key_lengths = {0, 5};  // both ends of [0, Nk] are legal
  EXPECT_NO_THROW(Forward(in_, fwd_.Out(), fwd_.Lse(), o));
}

// Per-row query offsets and key starts (left padding), and the score scale.
TEST_F(ApiTest, PerRowOptionsAndScale) {
  AttentionOptions o = c_.options;
  o.query_offsets = {1};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"query_offsets", "batch = 2", "got 1"});
  o.query_offsets = {0, (int64_t{1} << 40) + 1};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"query_offsets[b]", "+-2^40", "1099511627777",
                 "batch item 1"});
  o.query_offsets = {3, -2};
  o.query_offset = 1;
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"query_offset and query_offsets", "query_offset = 1"});
  o.query_offset.reset();
  EXPECT_NO_THROW(Forward(in_, fwd_.Out(), fwd_.Lse(), o));

  o = c_.options;
  o.key_starts = {0};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"key_starts", "batch = 2", "got 1"});
  o.key_starts = {-1, 0};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"key_starts[0]", "key_lengths[0] = 5", "-1"});
  o.key_lengths = {5, 3};
  o.key_starts = {2, 4};
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"key_starts[1]", "key_lengths[1] = 3", "got 4"});
  o.key_starts = {5, 3};  // both ends: an item that sees nothing
  EXPECT_NO_THROW(Forward(in_, fwd_.Out(), fwd_.Lse(), o));

  o = c_.options;
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    o.scale = bad;
    ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                  {"scale must be finite and > 0"});
  }
  o.scale = 1.0;
  EXPECT_NO_THROW(Backward(grads_.Grads(), o));
}

// Grouped-query attention: k and v with Hkv heads (Hkv dividing H); their
// gradients are shaped like them.
TEST_F(ApiTest, GroupedQueryShapes) {
  AttentionCase c = c_;
  c.heads = 4;
  c.kv_heads = 2;
  const AttentionData<double> data = MakeRandomData<double>(c, 3);
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  EXPECT_NO_THROW(
      Forward(data.Inputs(), fwd.Out(), fwd.Lse(), c.options));
  AttentionInputs<double> in = data.Inputs();
  in.v = ConstView<double>(data.v.data(), {2, 1, 5, 7});
  ExpectInvalid([&] { Forward(in, fwd.Out(), fwd.Lse(), c.options); },
                {"v has shape [2, 1, 5, 7]", "heads of k = 2"});
  in = data.Inputs();
  in.k = ConstView<double>(data.k.data(), {2, 3, 5, 6});
  in.v = ConstView<double>(data.v.data(), {2, 3, 5, 7});
  ExpectInvalid([&] { Forward(in, fwd.Out(), fwd.Lse(), c.options); },
                {"Hkv = 3", "H = 4"});
  AttentionGradBuffers<double> g = MakeGrads<double>(c, data);
  AttentionGrads<double> grads = g.Grads();
  grads.dk = TensorView<double>(g.dk.data(), {2, 4, 5, 3});
  std::vector<double> dout = RandomVector<double>(c.OutNumel(), 4);
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(data.Inputs(), fwd.Out(), fwd.Lse(),
                                  OutShaped(c, dout), grads, c.options);
      },
      {"dk must have shape [2, 2, 5, 6]"});
}

// CheckAttention: the forward pass's checks on shapes alone (the views point
// at one number that is never read), and what they resolve.
TEST_F(ApiTest, CheckAttentionResolvesAndRefusesAsForwardDoes) {
  AttentionCase c = c_;
  c.heads = 4;
  c.kv_heads = 2;
  const AttentionData<double> data = MakeRandomData<double>(c, 3);
  const double unread = 0;
  AttentionInputs<double> shapes = data.Inputs();
  shapes.q = ConstView<double>(&unread, {2, 4, 4, 6});
  shapes.k = ConstView<double>(&unread, {2, 2, 5, 6});
  shapes.v = ConstView<double>(&unread, {2, 2, 5, 7});
  AttentionOptions o = c.options;
  o.key_lengths = {5, 3};
  o.query_offset = 1;
  const ResolvedAttention r = CheckAttention<double>(shapes, o);
  EXPECT_EQ(r.heads, 4);
  EXPECT_EQ(r.kv_heads, 2);
  EXPECT_EQ(r.table_rows, 2 * 2 + 1);
  EXPECT_EQ(r.query_offsets, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(r.key_lengths, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(r.key_starts, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(r.min_offset, 1);
  EXPECT_EQ(r.max_offset, 1);
  // The same refusals as the forward pass, with the same words.
  shapes.k = ConstView<double>(&unread, {2, 3, 5, 6});
  shapes.v = ConstView<double>(&unread, {2, 3, 5, 7});
  ExpectInvalid([&] { CheckAttention<double>(shapes, o); },
                {"Hkv = 3", "H = 4"});
  shapes = data.Inputs();
  o.key_lengths = {6, 1};
  ExpectInvalid([&] { CheckAttention<double>(shapes, o); },
                {"key_lengths"});
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  ExpectInvalid([&] { Forward(shapes, fwd.Out(), fwd.Lse(), o); },
                {"key_lengths"});
}

TEST_F(ApiTest, EmptyAndRankOfQkv) {
  AttentionInputs<double> in = in_;
  in.q = ConstView<double>();
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"q must not be empty"});
  in = in_;
  in.k = ConstView<double>();
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"k must not be empty"});
  in = in_;
  in.v = ConstView<double>();
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"v must not be empty"});
  in = in_;
  in.q = ConstView<double>(data_.q.data(), {6, 4, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"q must have rank 4", "[6, 4, 6]"});
  in = in_;
  in.k = ConstView<double>(data_.k.data(), {30, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"k must have rank 4", "[30, 6]"});
  in = in_;
  in.v = ConstView<double>(data_.v.data(), {2, 3, 35});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"v must have rank 4", "[2, 3, 35]"});
}

TEST_F(ApiTest, ZeroHeadDims) {
  AttentionInputs<double> in = in_;
  in.q = ConstView<double>(data_.q.data(), {2, 3, 4, 0});
  in.k = ConstView<double>(data_.k.data(), {2, 3, 5, 0});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"q has shape [2, 3, 4, 0]", "dk must be > 0"});
  in = in_;
  in.v = ConstView<double>(data_.v.data(), {2, 3, 5, 0});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"v has shape [2, 3, 5, 0]", "dv must be > 0"});
}

TEST_F(ApiTest, MismatchedQkvDims) {
  struct Bad {
    const char* which;  // "k" or "v"
    std::initializer_list<int64_t> shape;
    std::initializer_list<const char*> fragments;
  };
  const Bad bad[] = {
      {"k",
       {1, 3, 5, 6},
       {"k has shape [1, 3, 5, 6]", "dim 0", "batch of q = 2"}},
      // Grouped-query attention: Hkv must divide H.
      {"k",
       {2, 2, 5, 6},
       {"k has shape [2, 2, 5, 6]", "Hkv = 2", "must divide the heads of q, "
        "H = 3"}},
      {"k", {2, 3, 5, 5}, {"k has shape [2, 3, 5, 5]", "dim 3", "dk of q = 6"}},
      {"v",
       {1, 3, 5, 7},
       {"v has shape [1, 3, 5, 7]", "dim 0", "batch of q = 2"}},
      {"v",
       {2, 1, 5, 7},
       {"v has shape [2, 1, 5, 7]", "dim 1", "heads of k = 3"}},
      {"v", {2, 3, 4, 7}, {"v has shape [2, 3, 4, 7]", "dim 2", "Nk of k = 5"}},
  };
  for (const Bad& b : bad) {
    AttentionInputs<double> in = in_;
    const ConstView<double> view(scratch_.data(), b.shape);
    (std::string(b.which) == "k" ? in.k : in.v) = view;
    ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                  b.fragments);
  }
}

TEST_F(ApiTest, SharedTableShapes) {
  AttentionInputs<double> in = in_;
  in.ak = ConstView<double>();
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"ak must not be empty"});
  in = in_;
  in.av = ConstView<double>();
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"av must not be empty"});
  // A per-head-shaped table where a shared one is expected.
  in = in_;
  in.ak = Scratch({3, 5, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"ak must have rank 2", "[3, 5, 6]"});
  in = in_;
  in.ak = Scratch({4, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"ak has shape [4, 6]", "2*max_distance+1 = 5"});
  in = in_;
  in.ak = Scratch({5, 7});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"ak has shape [5, 7]", "dk = 6"});
  in = in_;
  in.av = Scratch({5, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"av has shape [5, 6]", "dv = 7"});
  in = in_;
  in.av = Scratch({3, 5, 7});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), c_.options); },
                {"av must have rank 2", "[3, 5, 7]"});
}

TEST_F(ApiTest, PerHeadTableShapes) {
  AttentionOptions o = c_.options;
  o.per_head_tables = true;
  AttentionInputs<double> in = in_;
  // The shared [5, 6] table of the fixture is now the wrong rank.
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), o); },
                {"ak must have rank 3", "[5, 6]"});
  in.ak = Scratch({2, 5, 6});
  in.av = Scratch({3, 5, 7});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), o); },
                {"ak has shape [2, 5, 6]", "dim 0", "heads = 3"});
  in.ak = Scratch({3, 3, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), o); },
                {"ak has shape [3, 3, 6]", "2*max_distance+1 = 5"});
  in.ak = Scratch({3, 5, 6});
  in.av = Scratch({3, 5, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), o); },
                {"av has shape [3, 5, 6]", "dv = 7"});
  in.av = Scratch({3, 5, 7});
  EXPECT_NO_THROW(Forward(in, fwd_.Out(), fwd_.Lse(), o));
}

// A term that is off accepts an empty table, but a table that is passed must
// still have the right shape (a wrong one is a caller bug worth reporting).
TEST_F(ApiTest, TablesOfTermsThatAreOff) {
  AttentionOptions o = c_.options;
  o.key_term = o.value_term = false;
  AttentionInputs<double> in = in_;
  in.ak = in.av = ConstView<double>();
  EXPECT_NO_THROW(Forward(in, fwd_.Out(), fwd_.Lse(), o));
  in.ak = Scratch({4, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), o); },
                {"ak has shape [4, 6]", "2*max_distance+1 = 5"});
  in.ak = ConstView<double>();
  in.av = Scratch({5, 6});
  ExpectInvalid([&] { Forward(in, fwd_.Out(), fwd_.Lse(), o); },
                {"av has shape [5, 6]", "dv = 7"});
}

TEST_F(ApiTest, OutAndLse) {
  ExpectInvalid(
      [&] { Forward(in_, TensorView<double>(), fwd_.Lse(), c_.options); },
      {"out must not be empty"});
  struct Bad {
    std::initializer_list<int64_t> shape;
    std::initializer_list<const char*> fragments;
  };
  const Bad bad_out[] = {
      {{2, 3, 28}, {"out must have rank 4", "[2, 3, 28]"}},
      {{1, 3, 4, 7}, {"out has shape [1, 3, 4, 7]", "batch = 2"}},
      {{2, 2, 4, 7}, {"out has shape [2, 2, 4, 7]", "heads = 3"}},
      {{2, 3, 5, 7}, {"out has shape [2, 3, 5, 7]", "Nq = 4"}},
      {{2, 3, 4, 6}, {"out has shape [2, 3, 4, 6]", "dv = 7"}},
  };
  for (const Bad& b : bad_out)
    ExpectInvalid(
        [&] { Forward(in_, Scratch(b.shape), fwd_.Lse(), c_.options); },
        b.fragments);
  const Bad bad_lse[] = {
      {{2, 12}, {"lse must have rank 3", "[2, 12]"}},
      {{3, 3, 4}, {"lse has shape [3, 3, 4]", "batch = 2"}},
      {{2, 4, 4}, {"lse has shape [2, 4, 4]", "heads = 3"}},
      {{2, 3, 5}, {"lse has shape [2, 3, 5]", "Nq = 4"}},
  };
  for (const Bad& b : bad_lse)
    ExpectInvalid(
        [&] { Forward(in_, fwd_.Out(), Scratch(b.shape), c_.options); },
        b.fragments);
  // lse is optional in the forward pass.
  EXPECT_NO_THROW(Forward(in_, fwd_.Out(), TensorView<double>(), c_.options));
}

TEST_F(ApiTest, BackwardRequiredArguments) {
  Forward();
  const AttentionGrads<double> g = grads_.Grads();
  const ConstView<double> dout = OutShaped(c_, dout_);
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(in_, ConstView<double>(), fwd_.Lse(), dout, g,
                                  c_.options);
      },
      {"out must not be empty"});
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(in_, fwd_.Out(), ConstView<double>(), dout, g,
                                  c_.options);
      },
      {"lse must not be empty in the backward pass"});
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(in_, fwd_.Out(), fwd_.Lse(),
                                  ConstView<double>(), g, c_.options);
      },
      {"dout must not be empty"});
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(in_, fwd_.Out(), fwd_.Lse(),
                                  ConstView<double>(dout_.data(), {2, 3, 28}),
                                  g, c_.options);
      },
      {"dout must have shape [2, 3, 4, 7]", "[2, 3, 28]"});
  // Validation of the inputs runs in the backward pass too.
  AttentionOptions o = c_.options;
  o.max_distance = -1;
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(in_, fwd_.Out(), fwd_.Lse(), dout, g, o);
      },
      {"max_distance", "-1"});
}

TEST_F(ApiTest, GradientShapes) {
  Forward();
  struct Bad {
    int which;  // 0..4: dq, dk, dv, dak, dav
    std::initializer_list<int64_t> shape;
    std::initializer_list<const char*> fragments;
  };
  const Bad bad[] = {
      {0, {2, 3, 4, 5}, {"dq must have shape [2, 3, 4, 6]", "[2, 3, 4, 5]"}},
      {1, {2, 3, 4, 6}, {"dk must have shape [2, 3, 5, 6]", "[2, 3, 4, 6]"}},
      {2, {2, 3, 5, 6}, {"dv must have shape [2, 3, 5, 7]", "[2, 3, 5, 6]"}},
      {3, {3, 5, 6}, {"dak must have shape [5, 6]", "[3, 5, 6]"}},
      {4, {5, 6}, {"dav must have shape [5, 7]", "[5, 6]"}},
  };
  for (const Bad& b : bad) {
    AttentionGrads<double> g = grads_.Grads();
    TensorView<double>* slot[] = {&g.dq, &g.dk, &g.dv, &g.dak, &g.dav};
    *slot[b.which] = Scratch(b.shape);
    ExpectInvalid(
        [&] {
          AttentionBackward<double>(in_, fwd_.Out(), fwd_.Lse(),
                                    OutShaped(c_, dout_), g, c_.options);
        },
        b.fragments);
  }
  // Every gradient is optional.
  EXPECT_NO_THROW(AttentionBackward<double>(
      in_, fwd_.Out(), fwd_.Lse(), OutShaped(c_, dout_),
      AttentionGrads<double>{}, c_.options));
}

TEST_F(ApiTest, TableGradientWithoutTable) {
  AttentionOptions o = c_.options;
  o.key_term = o.value_term = false;
  AttentionInputs<double> in = in_;
  in.ak = in.av = ConstView<double>();
  Forward(in, fwd_.Out(), fwd_.Lse(), o);
  AttentionGrads<double> g = grads_.Grads();  // dak [5, 6], dav [5, 7]
  g.dav = TensorView<double>();
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(in, fwd_.Out(), fwd_.Lse(),
                                  OutShaped(c_, dout_), g, o);
      },
      {"dak given but ak is empty"});
  g = grads_.Grads();
  g.dak = TensorView<double>();
  ExpectInvalid(
      [&] {
        AttentionBackward<double>(in, fwd_.Out(), fwd_.Lse(),
                                  OutShaped(c_, dout_), g, o);
      },
      {"dav given but av is empty"});
}

TEST_F(ApiTest, FusedPathRejectsDouble) {
  AttentionOptions o = c_.options;
  o.path = AttentionPath::kFused;
  ExpectInvalid([&] { Forward(in_, fwd_.Out(), fwd_.Lse(), o); },
                {"path", "fused", "float only"});
  ExpectInvalid([&] { Backward(grads_.Grads(), o); },
                {"path", "fused", "float only"});
}

// The float entry points share the validation (spot check, every path).
TEST(ApiFloat, ValidationAppliesToFloat) {
  AttentionCase c = StandardCases().front();
  const AttentionData<float> d = MakeRandomData<float>(c, 3);
  AttentionOutputBuffers<float> fwd = MakeOutputs<float>(c);
  for (AttentionPath path : {AttentionPath::kAuto, AttentionPath::kFused,
                             AttentionPath::kReference}) {
    AttentionOptions o = c.options;
    o.path = path;
    o.max_distance = -2;
    ExpectInvalid(
        [&] { AttentionForward<float>(d.Inputs(), fwd.Out(), fwd.Lse(), o); },
        {"max_distance", "-2"});
    o = c.options;
    o.path = path;
    o.key_lengths = {1, 2, 3};
    ExpectInvalid(
        [&] { AttentionForward<float>(d.Inputs(), fwd.Out(), fwd.Lse(), o); },
        {"key_lengths", "got 3"});
  }
}

TEST(TensorViewTest, ConstructorChecks) {
  double x = 0;
  ExpectInvalid(
      [&] {
        TensorView<double>(&x, {1, 1, 1, 1, 1});
      },
      {"rank must be <= 4", "got 5"});
  ExpectInvalid(
      [&] {
        TensorView<double>(&x, {2, -1});
      },
      {"extents must be >= 0", "got -1"});
}

}  // namespace
}  // namespace relpos
