// The encoder-decoder model (Arch::kSeq2seq): whole-model gradient checks in
// double for every position scheme, with source and target lengths that
// differ per sequence, padding on both sides, dropout and label smoothing
// variants, and every entry of the tied embedding (its three uses: encoder
// input, decoder input, output head); float against double for every
// scheme; tensor names and shapes; each side's own position tensors and
// direction; causality of the decoder, the source reaching every target
// position, padding invisibility on both sides; the embedding scale and the
// tied head; label smoothing; batch validation; and a short run that fits a
// fixed batch for every scheme.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "base/rng.h"
#include "model/model_test_util.h"
#include "model/positions.h"
#include "model/transformer.h"
#include "model/nn/grad_check_test_util.h"
#include "relpos/error.h"

namespace relpos::model {
namespace {

// Vocabulary of the tiny batches: symbols 0..5, 6 unused, BOS 7, EOS 8.
constexpr int32_t kBos = 7, kEos = 8;

// transformer_test's tiny model as an encoder-decoder of 2 + 1 blocks.
ModelConfig Tiny(PositionScheme position) {
  ModelConfig c = testing::TinyConfig(Arch::kSeq2seq, position);
  c.vocab_size = 9;
  c.decoder_layers = 1;
  c.seed = 13;
  return c;
}

using testing::AllSchemes;

// Two pairs: source lengths 5 and 2 (padded to 6, junk in the padding),
// target lengths 4 and 2 (padded to 5). Ids 0-2 occur only in the sources,
// BOS only as a decoder input, EOS only as a target, 3-5 on the target
// side, 6 nowhere: the tied embedding's rows see each use alone.
Batch TinyBatch() {
  Batch b;
  b.batch = 2;
  b.length = 5;
  b.tokens = {kBos, 3, 4, 3, 0, /**/ kBos, 5, 99, -3, 1};
  b.targets = {3, 4, 3, kEos, -1, /**/ 5, kEos, -1, -1, -1};
  b.lengths = {4, 2};
  b.source_length = 6;
  b.source_tokens = {0, 1, 2, 1, 0, 4, /**/ 2, 0, 77, 5, -1, 3};
  b.source_lengths = {5, 2};
  return b;
}

struct Case {
  std::string name;
  PositionScheme position;
  bool per_head = false, key_term = true, value_term = true;
  double dropout = 0.0, label_smoothing = 0.0;
  bool rope_interleaved = false;
  int64_t layers = 2, decoder_layers = 1;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (PositionScheme p : AllSchemes()) {
    std::string name = ToString(p);
    std::replace(name.begin(), name.end(), '-', '_');
    cases.push_back({name, p});
  }
  cases.push_back({"shaw_per_head_keys_only_dropout", PositionScheme::kShaw,
                   true, true, false, 0.3});
  cases.push_back({"shaw_values_only_one_plus_two", PositionScheme::kShaw,
                   false, false, true, 0.0, 0.0, false, 1, 2});
  cases.push_back({"t5_label_smoothing", PositionScheme::kT5, false, true,
                   true, 0.0, 0.1});
  cases.push_back({"shaw_log_dropout_label_smoothing", PositionScheme::kShawLog,
                   false, true, true, 0.3, 0.2});
  cases.push_back({"rope_interleaved", PositionScheme::kRope, false, true,
                   true, 0.0, 0.0, true});
  cases.push_back({"xl_dropout", PositionScheme::kXl, false, true, true, 0.3});
  cases.push_back({"learned_one_plus_two", PositionScheme::kLearned, false,
                   true, true, 0.0, 0.0, false, 1, 2});
  return cases;
}

ModelConfig ConfigFor(const Case& k) {
  ModelConfig c = Tiny(k.position);
  c.scheme.per_head_tables = k.per_head;
  c.scheme.key_term = k.key_term;
  c.scheme.value_term = k.value_term;
  c.dropout = k.dropout;
  c.scheme.rope_layout =
      k.rope_interleaved ? RopeLayout::kInterleaved : RopeLayout::kSplitHalves;
  c.layers = k.layers;
  c.decoder_layers = k.decoder_layers;
  return c;
}

class Seq2seqGradTest : public ::testing::TestWithParam<Case> {};

// Every parameter tensor's gradient against central differences of the
// double model's loss (model_test_util.h; up to 12 entries each, every
// entry of the tied embedding). The encoder's tensors reach the loss only
// through the decoder's cross-attention, so their check is the check of
// that path; the embedding's rows sum its three uses.
TEST_P(Seq2seqGradTest, EveryParameterMatchesFiniteDifferences) {
  const Case& k = GetParam();
  BasicTransformer<double> model(ConfigFor(k));
  model.set_label_smoothing(k.label_smoothing);
  const int checked = testing::CheckEveryParameter(
      model, TinyBatch(), [](const std::string& name) {
        return name == "embed.token" ? 1000 : 12;
      });
  EXPECT_GT(checked, 300);
  // Id 6 occurs nowhere: its row gets only the head's softmax share, which
  // is not zero. The encoder's tensors get a gradient at all (the path
  // through cross-attention is live).
  const auto& wq = model.parameters()[model.FindParameter(
      "encoder.blocks.0.attn.q.weight")];
  double norm = 0;
  for (double g : wq.grad) norm += g * g;
  EXPECT_GT(norm, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Schemes, Seq2seqGradTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// The float model (fused kernel wherever it supports the scheme,
// cross-attention included) against the double one (model_test_util.h).
TEST(Seq2seqTest, FloatModelMatchesDoubleModel) {
  for (const Case& k : Cases()) {
    if (k.dropout > 0) continue;
    ModelConfig c = ConfigFor(k);
    c.d_model = 32;
    c.heads = 4;
    c.d_ff = 48;
    c.scheme.max_distance = 3;
    testing::ExpectFloatMatchesDouble(c, TinyBatch(), k.label_smoothing,
                                      k.name);
  }
}

TEST(Seq2seqTest, ParameterNamesAndShapes) {
  ModelConfig c = Tiny(PositionScheme::kShaw);
  c.layers = 1;
  const Transformer m(c);
  std::vector<std::string> names;
  for (const auto& p : m.parameters()) names.push_back(p.name);
  auto block = [](const std::string& p, bool cross) {
    std::vector<std::string> n = {
        p + "ln1.gamma",       p + "ln1.beta",          p + "attn.q.weight",
        p + "attn.q.bias",     p + "attn.k.weight",     p + "attn.k.bias",
        p + "attn.v.weight",   p + "attn.v.bias",       p + "attn.out.weight",
        p + "attn.out.bias",   p + "attn.rel_k",        p + "attn.rel_v"};
    if (cross) {
      for (const char* s :
           {"cross_ln.gamma", "cross_ln.beta", "cross.q.weight", "cross.q.bias",
            "cross.k.weight", "cross.k.bias", "cross.v.weight", "cross.v.bias",
            "cross.out.weight", "cross.out.bias"}) {
        n.push_back(p + s);
      }
    }
    for (const char* s : {"ln2.gamma", "ln2.beta", "ff.in.weight", "ff.in.bias",
                          "ff.out.weight", "ff.out.bias"}) {
      n.push_back(p + s);
    }
    return n;
  };
  std::vector<std::string> want = {"embed.token"};
  for (const auto& n : block("encoder.blocks.0.", false)) want.push_back(n);
  want.push_back("encoder.final_ln.gamma");
  want.push_back("encoder.final_ln.beta");
  for (const auto& n : block("decoder.blocks.0.", true)) want.push_back(n);
  want.push_back("decoder.final_ln.gamma");
  want.push_back("decoder.final_ln.beta");
  want.push_back("head.bias");
  EXPECT_EQ(names, want);
  // Tied: no head.weight; the head reads embed.token.
  EXPECT_EQ(m.FindParameter("head.weight"), -1);
  const DecoderWeights<float> w = m.decoder_weights();
  EXPECT_EQ(w.head_w, w.token);
  EXPECT_FLOAT_EQ(w.embed_scale, std::sqrt(8.0f));
  EXPECT_EQ(w.blocks.size(), 1u);
  EXPECT_TRUE(w.blocks[0].has_cross());
  auto shape = [&](const std::string& n) {
    return m.parameters()[m.FindParameter(n)].shape;
  };
  EXPECT_EQ(shape("decoder.blocks.0.cross.k.weight"),
            (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(shape("embed.token"), (std::vector<int64_t>{9, 8}));
  EXPECT_TRUE(m.parameters()[m.FindParameter("decoder.blocks.0.cross.q.weight")]
                  .decay);
  EXPECT_FALSE(m.parameters()[m.FindParameter("decoder.blocks.0.cross_ln.beta")]
                   .decay);
  // The embedding: N(0, 1/d_model) (scaled by sqrt(d_model) at the inputs).
  const auto& e = m.parameters()[0].value;
  double ss = 0;
  for (float v : e) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(e.size())), 1 / std::sqrt(8.0),
              0.06);
  // Learned positions: a table per side.
  const Transformer learned(Tiny(PositionScheme::kLearned));
  EXPECT_EQ(learned.parameters()[1].name, "encoder.embed.position");
  EXPECT_GE(learned.FindParameter("decoder.embed.position"), 0);
  EXPECT_EQ(learned.FindParameter("embed.position"), -1);
}

// Every scheme's position tensors exist on both sides, each with its own
// initial values; T5's buckets are bidirectional on the encoder side and
// causal on the decoder side, the decoder side is causal for every scheme.
TEST(Seq2seqTest, EachSideHasItsOwnPositionsAndDirection) {
  for (PositionScheme p : AllSchemes()) {
    const ModelConfig c = Tiny(p);
    const Transformer m(c);
    const AttentionOptions enc = AttentionOptionsFor(EncoderSide(c), 6);
    const AttentionOptions dec = AttentionOptionsFor(DecoderSide(c), 6);
    EXPECT_FALSE(enc.causal) << ToString(p);
    EXPECT_TRUE(dec.causal) << ToString(p);
    if (p == PositionScheme::kT5 || p == PositionScheme::kShawLog) {
      EXPECT_TRUE(enc.buckets.t5.bidirectional);
      EXPECT_FALSE(dec.buckets.t5.bidirectional);
    }
    for (const Parameter& q : m.parameters()) {
      const std::string prefix = "encoder.blocks.0.attn.";
      if (q.name.rfind(prefix, 0) != 0) continue;
      const std::string rest = q.name.substr(prefix.size());
      if (rest.rfind("rel_", 0) != 0 && rest.rfind("t5_", 0) != 0 &&
          rest.rfind("xl_", 0) != 0) {
        continue;
      }
      const int64_t other = m.FindParameter("decoder.blocks.0.attn." + rest);
      ASSERT_GE(other, 0) << q.name;
      EXPECT_EQ(m.parameters()[other].shape, q.shape) << q.name;
      EXPECT_NE(m.parameters()[other].value, q.value) << q.name;
    }
  }
}

// Changing a later decoder input leaves earlier positions' losses alone;
// changing any valid source token changes the loss of every target position
// (cross-attention sees the whole source, the encoder is bidirectional);
// a padded source token changes nothing.
TEST(Seq2seqTest, DecoderIsCausalAndTheSourceIsSeenWhole) {
  for (PositionScheme p : AllSchemes()) {
    BasicTransformer<double> m(Tiny(p));
    Batch a;
    a.batch = 1;
    a.length = 4;
    a.tokens = {kBos, 3, 4, 5};
    a.targets = {3, 4, -1, -1};
    a.lengths = {4};
    a.source_length = 5;
    a.source_tokens = {0, 1, 2, 1, 9};  // the last is padding
    a.source_lengths = {4};
    const double la = m.Evaluate(a, nullptr, nullptr);
    Batch later = a;
    later.tokens[3] = 0;
    EXPECT_EQ(m.Evaluate(later, nullptr, nullptr), la) << ToString(p);
    Batch pad = a;
    pad.source_tokens[4] = 3;
    EXPECT_EQ(m.Evaluate(pad, nullptr, nullptr), la) << ToString(p);
    // The last source token reaches the first target position.
    Batch src = a;
    src.source_tokens[3] = 5;
    src.targets = {3, -1, -1, -1};
    Batch first = a;
    first.targets = {3, -1, -1, -1};
    EXPECT_NE(m.Evaluate(src, nullptr, nullptr),
              m.Evaluate(first, nullptr, nullptr))
        << ToString(p);
  }
}

// A pair in a batch (its source and target each padded, by different
// amounts, with junk) gives the loss and predictions of the same pair
// alone; also with many pairs of spread lengths, where the attention
// layer splits the batch into length groups. In double the attention of a
// sequence does not depend on its group, so only the matrix products'
// summation order (none here: loops) could differ: 1e-12.
TEST(Seq2seqTest, PaddingIsInvisibleOnBothSides) {
  for (PositionScheme p : AllSchemes()) {
    BasicTransformer<double> m(Tiny(p));
    Batch both = TinyBatch();
    for (int i = 0; i < 5; ++i) both.targets[i] = -1;  // only pair 1 counts
    Batch alone;
    alone.batch = 1;
    alone.length = 2;
    alone.tokens = {kBos, 5};
    alone.targets = {5, kEos};
    alone.lengths = {2};
    alone.source_length = 2;
    alone.source_tokens = {2, 0};
    alone.source_lengths = {2};
    std::vector<int32_t> pb, pa;
    const double lb = m.Evaluate(both, nullptr, &pb);
    const double la = m.Evaluate(alone, nullptr, &pa);
    EXPECT_NEAR(lb, la, 1e-12) << ToString(p);
    EXPECT_EQ(pb[5], pa[0]);
    EXPECT_EQ(pb[6], pa[1]);
    EXPECT_EQ(pb[7], -1);
  }
  // Many pairs: the summed loss over the batch equals the pairs alone.
  BasicTransformer<double> m(Tiny(PositionScheme::kShaw));
  Rng rng(3);
  Batch big;
  big.batch = 12;
  big.length = 9;
  big.source_length = 9;
  std::vector<Batch> singles;
  for (int64_t s = 0; s < big.batch; ++s) {
    const int64_t n = 1 + static_cast<int64_t>(rng.Below(9));
    const int64_t t = 1 + static_cast<int64_t>(rng.Below(9));
    Batch one;
    one.batch = 1;
    one.length = t;
    one.source_length = n;
    for (int64_t i = 0; i < 9; ++i) {
      const int32_t tok = static_cast<int32_t>(rng.Below(9));
      const int32_t src = static_cast<int32_t>(rng.Below(9));
      big.tokens.push_back(i < t ? tok : 0);
      big.targets.push_back(i < t ? (tok + 1) % 9 : -1);
      big.source_tokens.push_back(i < n ? src : 0);
      if (i < t) {
        one.tokens.push_back(tok);
        one.targets.push_back((tok + 1) % 9);
      }
      if (i < n) one.source_tokens.push_back(src);
    }
    big.lengths.push_back(t);
    big.source_lengths.push_back(n);
    one.lengths = {t};
    one.source_lengths = {n};
    singles.push_back(one);
  }
  Metrics all;
  m.Evaluate(big, &all, nullptr);
  double sum = 0;
  for (const Batch& one : singles) {
    Metrics mo;
    m.Evaluate(one, &mo, nullptr);
    sum += mo.loss_sum;
  }
  EXPECT_NEAR(all.loss_sum, sum, 1e-11 * sum);
}

// No blocks on either side: logits = LayerNormF(sqrt(d) E[t]) E^T + b, the
// embedding scale and the tied head written out.
TEST(Seq2seqTest, EmbeddingScaleAndTiedHead) {
  ModelConfig c = Tiny(PositionScheme::kNone);
  c.layers = 0;
  c.decoder_layers = 0;
  BasicTransformer<double> m(c);
  auto& bias = m.parameters()[m.FindParameter("head.bias")].value;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1 * i;
  const auto& e = m.parameters()[0].value;
  Batch b;
  b.batch = 1;
  b.length = 1;
  b.tokens = {4};
  b.targets = {2};
  b.lengths = {1};
  b.source_length = 1;
  b.source_tokens = {1};
  b.source_lengths = {1};
  m.Evaluate(b, nullptr, nullptr);
  const int64_t d = 8;
  std::vector<double> x(d);
  double mean = 0, var = 0;
  for (int64_t j = 0; j < d; ++j) {
    x[j] = std::sqrt(8.0) * e[4 * d + j];
    mean += x[j] / d;
  }
  for (int64_t j = 0; j < d; ++j) var += (x[j] - mean) * (x[j] - mean) / d;
  for (int64_t j = 0; j < d; ++j) x[j] = (x[j] - mean) / std::sqrt(var + 1e-5);
  for (int64_t v = 0; v < 9; ++v) {
    double z = bias[v];
    for (int64_t j = 0; j < d; ++j) z += x[j] * e[v * d + j];
    EXPECT_NEAR(m.LastLogits()[v], z, 1e-12) << v;
  }
}

// Label smoothing (eps 0.1) changes the training loss to PyTorch's
// definition and leaves Evaluate (and the metrics' loss_sum) plain.
TEST(Seq2seqTest, LabelSmoothingAppliesToTrainingOnly) {
  BasicTransformer<double> m(Tiny(PositionScheme::kT5));
  const Batch b = TinyBatch();
  const double plain = m.Evaluate(b, nullptr, nullptr);
  m.set_label_smoothing(0.1);
  Rng rng(1);
  Metrics metrics;
  const double smoothed = m.ForwardBackward(b, rng, &metrics);
  EXPECT_NEAR(metrics.loss_sum / metrics.tokens, plain, 1e-12);
  // (1 - eps) NLL + eps * mean over the vocabulary of -log p, per target.
  const std::vector<double>& z = m.LastLogits();
  double want = 0;
  int64_t row = 0, count = 0;
  for (int64_t s = 0; s < b.batch; ++s) {
    for (int64_t i = 0; i < b.lengths[s]; ++i, ++row) {
      const int32_t y = b.targets[s * b.length + i];
      if (y < 0) continue;
      double mx = -1e300, sum = 0, mean_z = 0;
      for (int64_t v = 0; v < 9; ++v) mx = std::max(mx, z[row * 9 + v]);
      for (int64_t v = 0; v < 9; ++v) {
        sum += std::exp(z[row * 9 + v] - mx);
        mean_z += z[row * 9 + v] / 9;
      }
      const double lse = mx + std::log(sum);
      want += 0.9 * (lse - z[row * 9 + y]) + 0.1 * (lse - mean_z);
      ++count;
    }
  }
  EXPECT_NEAR(smoothed, want / count, 1e-12);
  EXPECT_NE(smoothed, plain);
  EXPECT_EQ(m.Evaluate(b, nullptr, nullptr), plain);
  EXPECT_THROW(m.set_label_smoothing(1.0), InvalidArgument);
  EXPECT_THROW(m.set_label_smoothing(-0.1), InvalidArgument);
}

TEST(Seq2seqTest, RejectsBadBatches) {
  Transformer m(Tiny(PositionScheme::kLearned));
  Rng rng(1);
  auto expect_bad = [&](Transformer& model, const Batch& b,
                        const std::string& needle) {
    try {
      model.ForwardBackward(b, rng, nullptr);
      ADD_FAILURE() << "accepted a batch; expected '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << e.what();
    }
  };
  Batch b = TinyBatch();
  b.source_length = 0;
  b.source_tokens.clear();
  b.source_lengths.clear();
  expect_bad(m, b, "batch.source_length must be >= 1");
  b = TinyBatch();
  b.source_tokens[3] = 9;
  expect_bad(m, b, "batch.source_tokens[0, 3]");
  b = TinyBatch();
  b.source_lengths[1] = 7;
  expect_bad(m, b, "batch.source_lengths[1]");
  b = TinyBatch();
  b.source_lengths = {5};
  expect_bad(m, b, "batch.source_lengths");
  b = TinyBatch();
  b.source_tokens.pop_back();
  expect_bad(m, b, "batch.source_tokens must have");
  b = TinyBatch();
  b.source_length = 10;  // beyond the learned tables' max_len 9
  b.source_tokens.assign(20, 1);
  expect_bad(m, b, "max_len");
  // An encoder takes no source.
  ModelConfig enc = Tiny(PositionScheme::kShaw);
  enc.arch = Arch::kEncoder;
  enc.decoder_layers = -1;
  Transformer e(enc);
  expect_bad(e, TinyBatch(), "are for seq2seq models");
  // Encode refuses other models and bad ids.
  std::vector<float> memory;
  EXPECT_THROW(e.Encode({{1, 2}}, &memory), InvalidArgument);
  EXPECT_THROW(m.Encode({{1, 9}}, &memory), InvalidArgument);
  EXPECT_THROW(m.Encode({}, &memory), InvalidArgument);
  EXPECT_THROW(m.Encode({std::vector<int32_t>(10, 1)}, &memory),
               InvalidArgument);
}

TEST(Seq2seqTest, NoTargetAndEmptySourceStayFinite) {
  Transformer m(Tiny(PositionScheme::kShaw));
  Batch b = TinyBatch();
  b.source_lengths = {5, 0};  // the second pair has an empty source
  Rng rng(2);
  EXPECT_TRUE(std::isfinite(m.ForwardBackward(b, rng, nullptr)));
  for (const auto& p : m.parameters()) {
    for (float g : p.grad) ASSERT_TRUE(std::isfinite(g)) << p.name;
  }
  // Every source empty (the encoder's attention has no key at all), in the
  // double model's reference attention too.
  b.source_lengths = {0, 0};
  EXPECT_TRUE(std::isfinite(m.ForwardBackward(b, rng, nullptr)));
  BasicTransformer<double> md(Tiny(PositionScheme::kShaw));
  EXPECT_TRUE(std::isfinite(md.ForwardBackward(b, rng, nullptr)));
  for (int32_t& t : b.targets) t = -1;
  EXPECT_EQ(m.ForwardBackward(b, rng, nullptr), 0.0f);
  for (const auto& p : m.parameters()) {
    for (float g : p.grad) ASSERT_EQ(g, 0.0f) << p.name;
  }
}

// Plain gradient descent (step 0.05) on TinyBatch, the float model of each
// scheme at width 16: the loss falls below its start at every step and by a
// clear margin after 30.
TEST(Seq2seqTest, EverySchemeTrainsATinyModel) {
  for (PositionScheme p : AllSchemes()) {
    ModelConfig c = Tiny(p);
    c.d_model = 16;
    c.d_ff = 32;
    Transformer m(c);
    const Batch b = TinyBatch();
    Rng rng(1);
    const float first = m.ForwardBackward(b, rng, nullptr);
    float last = first;
    for (int step = 0; step < 30; ++step) {
      for (auto& q : m.parameters()) {
        for (size_t i = 0; i < q.value.size(); ++i) {
          q.value[i] -= 0.05f * q.grad[i];
        }
      }
      last = m.ForwardBackward(b, rng, nullptr);
      EXPECT_LT(last, first) << ToString(p) << " step " << step;
    }
    EXPECT_LT(last, 0.6f * first) << ToString(p);
  }
}

}  // namespace
}  // namespace relpos::model
