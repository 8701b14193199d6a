// Whole-model tests: gradient checks in double for every position scheme and
// both architectures with padded batches, float-vs-double agreement,
// determinism, padding invariance, parameter names and weight-decay flags,
// the separate passes against their compositions, metrics and batch
// validation, and a short training run that must fit a fixed batch.
#include "model/transformer.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "model/model_test_util.h"
#include "model/positions.h"
#include "model/transformer_block.h"
#include "model/nn/grad_check_test_util.h"
#include "relpos/attention.h"
#include "relpos/error.h"

namespace relpos::model {
namespace {

using testing::AllSchemes;
ModelConfig Tiny(Arch arch, PositionScheme position) {
  return testing::TinyConfig(arch, position);
}

// Two sequences padded to length 6: one full, one of length 4 whose padded
// slots hold junk tokens (which must be ignored). Targets on a mix of
// positions, -1 elsewhere.
Batch TinyBatch() {
  Batch b;
  b.batch = 2;
  b.length = 6;
  b.tokens = {1, 5, 2, 6, 0, 3, /**/ 4, 4, 1, 2, 99, -7};
  b.targets = {-1, 2, 3, -1, 6, 0, /**/ 1, -1, 5, 2, -1, -1};
  b.lengths = {6, 4};
  return b;
}

struct SchemeCase {
  std::string name;
  Arch arch;
  PositionScheme position;
  bool per_head = false, key_term = true, value_term = true;
  double dropout = 0.0;
  bool rope_interleaved = false;
};

void PrintTo(const SchemeCase& c, std::ostream* os) { *os << c.name; }

std::vector<SchemeCase> SchemeCases() {
  std::vector<SchemeCase> cases;
  for (Arch arch : {Arch::kEncoder, Arch::kDecoder}) {
    for (PositionScheme p : AllSchemes()) {
      std::string name = ToString(arch) + "_" + ToString(p);
      std::replace(name.begin(), name.end(), '-', '_');
      cases.push_back({name, arch, p});
    }
  }
  cases.push_back({"encoder_relative_per_head_keys_only", Arch::kEncoder,
                   PositionScheme::kRelative, true, true, false});
  cases.push_back({"decoder_relative_values_only_dropout", Arch::kDecoder,
                   PositionScheme::kRelative, false, false, true, 0.3});
  cases.push_back({"decoder_shaw_asym_per_head", Arch::kDecoder,
                   PositionScheme::kShawAsym, true});
  cases.push_back({"encoder_shaw_log_per_head_keys_only", Arch::kEncoder,
                   PositionScheme::kShawLog, true, true, false});
  cases.push_back({"decoder_t5_dropout", Arch::kDecoder, PositionScheme::kT5,
                   false, true, true, 0.3});
  cases.push_back({"encoder_rope_interleaved", Arch::kEncoder,
                   PositionScheme::kRope, false, true, true, 0.0, true});
  cases.push_back({"decoder_xl_dropout", Arch::kDecoder, PositionScheme::kXl,
                   false, true, true, 0.3});
  return cases;
}

ModelConfig ConfigFor(const SchemeCase& sc) {
  ModelConfig c = Tiny(sc.arch, sc.position);
  c.scheme.per_head_tables = sc.per_head;
  c.scheme.key_term = sc.key_term;
  c.scheme.value_term = sc.value_term;
  c.dropout = sc.dropout;
  c.scheme.rope_layout =
      sc.rope_interleaved ? RopeLayout::kInterleaved : RopeLayout::kSplitHalves;
  return c;
}

class ModelGradTest : public ::testing::TestWithParam<SchemeCase> {};

// Every parameter tensor's gradient, up to 12 entries each
// (model_test_util.h).
TEST_P(ModelGradTest, EveryParameterMatchesFiniteDifferences) {
  const ModelConfig c = ConfigFor(GetParam());
  BasicTransformer<double> model(c);
  const int checked = testing::CheckEveryParameter(
      model, TinyBatch(), [](const std::string&) { return 12; });
  EXPECT_GT(checked, 150);
  // Rows of the learned table beyond the batch length get exactly zero.
  const int64_t pos = model.FindParameter("embed.position");
  if (pos >= 0) {
    const auto& g = model.parameters()[pos].grad;
    for (int64_t i = 6 * c.d_model; i < static_cast<int64_t>(g.size()); ++i) {
      ASSERT_EQ(g[i], 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, ModelGradTest,
                         ::testing::ValuesIn(SchemeCases()),
                         [](const auto& info) { return info.param.name; });

// Every scheme, both architectures (model_test_util.h).
TEST(TransformerTest, FloatModelMatchesDoubleModel) {
  for (const SchemeCase& sc : SchemeCases()) {
    if (sc.dropout > 0) continue;
    ModelConfig c = ConfigFor(sc);
    c.d_model = 32;
    c.heads = 4;
    c.d_ff = 48;
    c.scheme.max_distance = 3;
    testing::ExpectFloatMatchesDouble(c, TinyBatch(), 0.0, sc.name);
  }
}

TEST(TransformerTest, DeterministicForSeed) {
  ModelConfig c = Tiny(Arch::kEncoder, PositionScheme::kRelative);
  c.dropout = 0.2;
  c.d_model = 16;
  Transformer a(c), b(c);
  const Batch batch = TinyBatch();
  Rng ra(3), rb(3);
  Metrics ma, mb;
  const float la = a.ForwardBackward(batch, ra, &ma);
  const float lb = b.ForwardBackward(batch, rb, &mb);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(ra.state(), rb.state());
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    EXPECT_EQ(a.parameters()[i].value, b.parameters()[i].value);
    EXPECT_EQ(a.parameters()[i].grad, b.parameters()[i].grad)
        << a.parameters()[i].name;
  }
  // Dropout: another Rng state gives another loss; without dropout the
  // loss does not depend on the Rng at all.
  Rng rc(4);
  EXPECT_NE(a.ForwardBackward(batch, rc, nullptr), la);
  // Another seed gives other initial values.
  c.seed = 12;
  Transformer other(c);
  EXPECT_NE(other.parameters()[0].value, a.parameters()[0].value);
}

TEST(TransformerTest, ParameterNamesAndShapes) {
  ModelConfig c = Tiny(Arch::kEncoder, PositionScheme::kRelative);
  c.layers = 1;
  c.scheme.per_head_tables = true;
  Transformer m(c);
  std::vector<std::string> names;
  for (const auto& p : m.parameters()) names.push_back(p.name);
  const std::vector<std::string> want = {"embed.token",
                                         "blocks.0.ln1.gamma",
                                         "blocks.0.ln1.beta",
                                         "blocks.0.attn.q.weight",
                                         "blocks.0.attn.q.bias",
                                         "blocks.0.attn.k.weight",
                                         "blocks.0.attn.k.bias",
                                         "blocks.0.attn.v.weight",
                                         "blocks.0.attn.v.bias",
                                         "blocks.0.attn.out.weight",
                                         "blocks.0.attn.out.bias",
                                         "blocks.0.attn.rel_k",
                                         "blocks.0.attn.rel_v",
                                         "blocks.0.ln2.gamma",
                                         "blocks.0.ln2.beta",
                                         "blocks.0.ff.in.weight",
                                         "blocks.0.ff.in.bias",
                                         "blocks.0.ff.out.weight",
                                         "blocks.0.ff.out.bias",
                                         "final_ln.gamma",
                                         "final_ln.beta",
                                         "head.weight",
                                         "head.bias"};
  EXPECT_EQ(names, want);
  auto shape = [&](const std::string& n) {
    return m.parameters()[m.FindParameter(n)].shape;
  };
  EXPECT_EQ(shape("blocks.0.attn.rel_k"), (std::vector<int64_t>{2, 5, 4}));
  EXPECT_EQ(shape("blocks.0.ff.in.weight"), (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(shape("head.weight"), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(m.FindParameter("nope"), -1);
  int64_t total = 0;
  for (const auto& p : m.parameters()) {
    int64_t n = 1;
    for (int64_t e : p.shape) n *= e;
    EXPECT_EQ(n, p.numel()) << p.name;
    // Gradients are allocated by the first Backward, not before: a model
    // that only evaluates or decodes holds one copy of its weights.
    EXPECT_TRUE(p.grad.empty()) << p.name;
    total += n;
  }
  EXPECT_EQ(m.NumParameters(), total);
  m.AllocateGradients();
  for (const auto& p : m.parameters()) {
    EXPECT_EQ(p.grad, std::vector<float>(p.value.size(), 0.0f)) << p.name;
  }

  // Learned positions add embed.position [max_len, d]; no relative tables.
  Transformer learned(Tiny(Arch::kDecoder, PositionScheme::kLearned));
  EXPECT_EQ(learned.parameters()[1].name, "embed.position");
  EXPECT_EQ(learned.parameters()[1].shape, (std::vector<int64_t>{9, 8}));
  EXPECT_EQ(learned.FindParameter("blocks.0.attn.rel_k"), -1);
  // Shared tables are [2k+1, dh]; a switched-off term has no tensor.
  ModelConfig keys = Tiny(Arch::kEncoder, PositionScheme::kRelative);
  keys.scheme.value_term = false;
  Transformer km(keys);
  EXPECT_EQ(km.parameters()[km.FindParameter("blocks.1.attn.rel_k")].shape,
            (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(km.FindParameter("blocks.1.attn.rel_v"), -1);
}

// Each scheme's position tensors: names, shapes (docs/model.md), no decay.
TEST(TransformerTest, SchemeTensorsNamesAndShapes) {
  struct Want {
    PositionScheme scheme;
    std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  };
  // Tiny: H = 2, dh = 4, d = 8, k = 2, k_left 3 / k_right 1, 8 buckets.
  const std::vector<Want> wants = {
      {PositionScheme::kShaw, {{"attn.rel_k", {5, 4}}, {"attn.rel_v", {5, 4}}}},
      {PositionScheme::kShawAsym,
       {{"attn.rel_k", {5, 4}}, {"attn.rel_v", {5, 4}}}},
      {PositionScheme::kShawLog,
       {{"attn.rel_k", {8, 4}}, {"attn.rel_v", {8, 4}}}},
      {PositionScheme::kT5, {{"attn.t5_bias", {2, 8}}}},
      {PositionScheme::kAlibi, {}},
      {PositionScheme::kRope, {}},
      {PositionScheme::kXl,
       {{"attn.xl_w", {8, 8}}, {"attn.xl_u", {2, 4}}, {"attn.xl_v", {2, 4}}}},
  };
  const Transformer none(Tiny(Arch::kEncoder, PositionScheme::kNone));
  for (const Want& w : wants) {
    ModelConfig c = Tiny(Arch::kEncoder, w.scheme);
    c.scheme.k_left = 2;
    c.scheme.k_right = 2;
    const Transformer m(c);
    int64_t extra = 0;
    for (int64_t l = 0; l < c.layers; ++l) {
      for (const auto& [name, shape] : w.tensors) {
        const std::string full = "blocks." + std::to_string(l) + "." + name;
        const int64_t i = m.FindParameter(full);
        ASSERT_GE(i, 0) << ToString(w.scheme) << " " << full;
        EXPECT_EQ(m.parameters()[i].shape, shape) << full;
        EXPECT_FALSE(m.parameters()[i].decay) << full;
        extra += m.parameters()[i].numel();
      }
    }
    EXPECT_EQ(m.NumParameters(), none.NumParameters() + extra)
        << ToString(w.scheme);
  }
}

// Each tensor has its own random stream keyed by its name: the tensors a
// scheme adds change none of the others' initial values.
TEST(TransformerTest, SchemeTensorsLeaveOtherInitialValuesAlone) {
  const Transformer none(Tiny(Arch::kDecoder, PositionScheme::kNone));
  for (PositionScheme p : AllSchemes()) {
    const Transformer m(Tiny(Arch::kDecoder, p));
    for (const Parameter& q : none.parameters()) {
      const int64_t i = m.FindParameter(q.name);
      ASSERT_GE(i, 0) << q.name;
      EXPECT_EQ(m.parameters()[i].value, q.value) << ToString(p) << q.name;
    }
  }
}

// ALiBi and RoPE learn nothing, yet they change the model: the same weights
// give another loss than without positions.
TEST(TransformerTest, ParameterFreeSchemesChangeTheModel) {
  BasicTransformer<double> none(Tiny(Arch::kEncoder, PositionScheme::kNone));
  for (PositionScheme p : {PositionScheme::kAlibi, PositionScheme::kRope}) {
    BasicTransformer<double> m(Tiny(Arch::kEncoder, p));
    ASSERT_EQ(m.NumParameters(), none.NumParameters());
    EXPECT_NE(m.Evaluate(TinyBatch(), nullptr, nullptr),
              none.Evaluate(TinyBatch(), nullptr, nullptr))
        << ToString(p);
  }
}

// The float model runs the fused kernel for every scheme it supports: the
// options of model/positions.h, forced onto AttentionPath::kFused (which
// throws for a scheme the kernel does not support), run for every scheme
// but shaw-log, whose vector tables under T5 buckets still fall back to the
// reference (docs/model.md).
TEST(TransformerTest, SchemesTakeTheFusedKernel) {
  for (Arch arch : {Arch::kEncoder, Arch::kDecoder}) {
    for (PositionScheme p : AllSchemes()) {
      const ModelConfig c = Tiny(arch, p);
      const int64_t B = 2, H = c.heads, N = 6, dh = c.d_model / c.heads;
      AttentionOptions o = AttentionOptionsFor(c, N);
      o.path = AttentionPath::kFused;
      const int64_t rows = TableRows(o);
      std::vector<float> qkv(B * H * N * dh, 0.25f), out(qkv.size()),
          lse(B * H * N), table(H * std::max<int64_t>(rows, 1) * dh, 0.1f),
          bias(H * std::max<int64_t>(rows, 1), 0.1f), pb(H * dh, 0.1f);
      const ConstView<float> x(qkv.data(), {B, H, N, dh});
      AttentionInputs<float> in{x, x, x};
      const bool per_head = o.per_head_tables;
      auto tab = [&] {
        return per_head ? ConstView<float>(table.data(), {H, rows, dh})
                        : ConstView<float>(table.data(), {rows, dh});
      };
      if (o.key_term && o.score_term == ScoreTerm::kVector) in.ak = tab();
      if (o.value_term) in.av = tab();
      if (o.key_term && o.score_term == ScoreTerm::kScalarTable) {
        in.bias = ConstView<float>(bias.data(), {H, rows});
      }
      if (o.position_query_bias) in.pb = ConstView<float>(pb.data(), {H, dh});
      auto run = [&] {
        AttentionForward<float>(in,
                                TensorView<float>(out.data(), {B, H, N, dh}),
                                TensorView<float>(lse.data(), {B, H, N}), o);
      };
      EXPECT_NO_THROW(run()) << ToString(arch) << " " << ToString(p);
    }
  }
}

// Weight decay is declared with each tensor. It must equal the rule the
// trainer applied to names before (matrices, except position tables and
// norms), so that moving the decision into the model changes no training run.
TEST(TransformerTest, DecayIsDeclaredPerParameter) {
  auto name_rule = [](const Parameter& p) {
    if (p.shape.size() < 2) return false;
    auto has = [&](const char* s) {
      return p.name.find(s) != std::string::npos;
    };
    // Position tensors of the later schemes never decay either.
    return !(has("pos") || has("rel") || has("norm") || has("ln") ||
             has("t5_bias") || has("xl_"));
  };
  for (const SchemeCase& sc : SchemeCases()) {
    ModelConfig c = ConfigFor(sc);
    // Both table layouts overall, where the scheme has Shaw's tables.
    if (FindScheme(c.position).Reads(SchemeSetting::kPerHeadTables)) {
      c.scheme.per_head_tables = !c.scheme.per_head_tables;
    }
    Transformer m(c);
    for (const Parameter& p : m.parameters()) {
      EXPECT_EQ(p.decay, name_rule(p)) << sc.name << " " << p.name;
    }
  }
  // Spelled out for one config: what decays.
  ModelConfig c = Tiny(Arch::kEncoder, PositionScheme::kLearned);
  c.layers = 1;
  Transformer m(c);
  std::vector<std::string> decayed;
  for (const Parameter& p : m.parameters()) {
    if (p.decay) decayed.push_back(p.name);
  }
  const std::vector<std::string> want = {"embed.token",
                                         "blocks.0.attn.q.weight",
                                         "blocks.0.attn.k.weight",
                                         "blocks.0.attn.v.weight",
                                         "blocks.0.attn.out.weight",
                                         "blocks.0.ff.in.weight",
                                         "blocks.0.ff.out.weight",
                                         "head.weight"};
  EXPECT_EQ(decayed, want);
}

// ForwardBackward and Evaluate are the passes composed; calling the passes
// one by one gives the same numbers bit for bit, and an inference Forward
// (shared block buffers, updated in place) gives the training Forward's loss
// and predictions when dropout is off.
TEST(TransformerTest, PassesComposeToForwardBackwardAndEvaluate) {
  for (const SchemeCase& sc : SchemeCases()) {
    const ModelConfig c = ConfigFor(sc);
    const Batch batch = TinyBatch();
    BasicTransformer<double> a(c), b(c);
    Rng ra(9), rb(9);
    Metrics ma, mb;
    const double la = a.ForwardBackward(batch, ra, &ma);
    const double lb = b.Forward(batch, ForwardMode::kTraining, &rb);
    b.AddMetrics(&mb);
    b.Backward();
    EXPECT_EQ(la, lb) << sc.name;
    EXPECT_EQ(ra.state(), rb.state()) << sc.name;
    EXPECT_EQ(ma.loss_sum, mb.loss_sum) << sc.name;
    EXPECT_EQ(ma.correct_sequences, mb.correct_sequences) << sc.name;
    for (size_t i = 0; i < a.parameters().size(); ++i) {
      ASSERT_EQ(a.parameters()[i].grad, b.parameters()[i].grad)
          << sc.name << " " << a.parameters()[i].name;
    }

    Metrics me, mi;
    std::vector<int32_t> pe, pi;
    const double le = a.Evaluate(batch, &me, &pe);
    const double li = b.Forward(batch, ForwardMode::kInference, nullptr);
    b.AddMetrics(&mi);
    b.Predictions(&pi);
    EXPECT_EQ(le, li) << sc.name;
    EXPECT_EQ(pe, pi) << sc.name;
    EXPECT_EQ(me.correct_tokens, mi.correct_tokens) << sc.name;
    if (c.dropout == 0.0) {
      // Inference keeps one block's buffers and x in place; training keeps
      // all of them. Same operations, same values.
      std::vector<int32_t> pt;
      EXPECT_EQ(b.Forward(batch, ForwardMode::kTraining, &rb), li) << sc.name;
      b.Predictions(&pt);
      EXPECT_EQ(pt, pi) << sc.name;
    } else {
      EXPECT_NE(la, le) << sc.name;  // dropout really is off in inference
    }
  }
}

TEST(TransformerTest, BackwardNeedsATrainingForward) {
  Transformer m(Tiny(Arch::kDecoder, PositionScheme::kRelative));
  const Batch batch = TinyBatch();
  auto expect_bad = [](auto f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "accepted; expected '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << e.what();
    }
  };
  expect_bad([&] { m.Backward(); }, "Backward");  // no Forward yet
  m.Forward(batch, ForwardMode::kInference, nullptr);
  expect_bad([&] { m.Backward(); }, "kTraining");
  expect_bad([&] { m.Forward(batch, ForwardMode::kTraining, nullptr); }, "rng");
  // A rejected batch changes nothing: Backward still differentiates the
  // previous training Forward.
  Transformer ref(Tiny(Arch::kDecoder, PositionScheme::kRelative));
  Rng rng(1), ref_rng(1);
  ref.ForwardBackward(batch, ref_rng, nullptr);
  m.Forward(batch, ForwardMode::kTraining, &rng);
  Batch bad = batch;
  bad.tokens[0] = 99;
  expect_bad([&] { m.Forward(bad, ForwardMode::kTraining, &rng); },
             "batch.tokens[0, 0]");
  m.Backward();
  for (size_t i = 0; i < m.parameters().size(); ++i) {
    EXPECT_EQ(m.parameters()[i].grad, ref.parameters()[i].grad)
        << m.parameters()[i].name;
  }
  // An inference Forward between a training Forward and Backward overwrites
  // the kept activations, so Backward refuses rather than use them.
  m.Forward(batch, ForwardMode::kTraining, &rng);
  m.Evaluate(batch, nullptr, nullptr);
  expect_bad([&] { m.Backward(); }, "kTraining");
}

TEST(TransformerTest, RelativeTablesFollowInitScale) {
  // rel_init_scale multiplies the Xavier std sqrt(2 / (rows + d)); a scale of
  // 0 gives zero tables, and doubling it doubles every entry (same stream).
  ModelConfig c = Tiny(Arch::kEncoder, PositionScheme::kRelative);
  c.scheme.rel_init_scale = 1.0;
  Transformer one(c);
  c.scheme.rel_init_scale = 2.0;
  Transformer two(c);
  c.scheme.rel_init_scale = 0.0;
  Transformer zero(c);
  const int64_t i = one.FindParameter("blocks.0.attn.rel_v");
  const auto& a = one.parameters()[i].value;
  const auto& b = two.parameters()[i].value;
  for (size_t j = 0; j < a.size(); ++j) {
    EXPECT_FLOAT_EQ(b[j], 2 * a[j]);
    EXPECT_EQ(zero.parameters()[i].value[j], 0.0f);
  }
  // Other tensors do not move with the table scale.
  EXPECT_EQ(one.parameters()[0].value, two.parameters()[0].value);
  // The tables of different layers and of K vs V differ.
  EXPECT_NE(a,
            one.parameters()[one.FindParameter("blocks.0.attn.rel_k")].value);
  EXPECT_NE(a,
            one.parameters()[one.FindParameter("blocks.1.attn.rel_v")].value);
}

TEST(TransformerTest, RelativeWithBothTermsOffIsPlainAttention) {
  // Shaw's "neither" ablation: no tables, and the same function as `none`
  // (same tensor names, hence the same initial values).
  ModelConfig c = Tiny(Arch::kDecoder, PositionScheme::kRelative);
  c.scheme.key_term = false;
  c.scheme.value_term = false;
  BasicTransformer<double> neither(c);
  BasicTransformer<double> none(Tiny(Arch::kDecoder, PositionScheme::kNone));
  EXPECT_EQ(neither.FindParameter("blocks.0.attn.rel_k"), -1);
  EXPECT_EQ(neither.NumParameters(), none.NumParameters());
  Rng r1(1), r2(1);
  EXPECT_EQ(neither.ForwardBackward(TinyBatch(), r1, nullptr),
            none.ForwardBackward(TinyBatch(), r2, nullptr));
}

// The loss and metrics of a padded sequence equal those of the same sequence
// alone, unpadded, for both architectures and every scheme: padding is
// invisible as keys and its targets are ignored.
TEST(TransformerTest, PaddingIsInvisible) {
  for (Arch arch : {Arch::kEncoder, Arch::kDecoder}) {
    for (PositionScheme p : AllSchemes()) {
      BasicTransformer<double> m(Tiny(arch, p));
      Batch padded = TinyBatch();
      Batch alone;
      alone.batch = 1;
      alone.length = 4;
      alone.tokens = {4, 4, 1, 2};
      alone.targets = {1, -1, 5, 2};
      alone.lengths = {4};
      Batch second_only = padded;
      // Drop the first sequence's targets so only the padded one counts.
      for (int i = 0; i < 6; ++i) second_only.targets[i] = -1;
      Metrics mp, ma;
      std::vector<int32_t> pred_p, pred_a;
      const double lp = m.Evaluate(second_only, &mp, &pred_p);
      const double la = m.Evaluate(alone, &ma, &pred_a);
      EXPECT_NEAR(lp, la, 1e-12) << ToString(arch) << " " << ToString(p);
      EXPECT_EQ(mp.tokens, 3);
      EXPECT_EQ(mp.correct_tokens, ma.correct_tokens);
      for (int i = 0; i < 4; ++i) EXPECT_EQ(pred_p[6 + i], pred_a[i]);
      EXPECT_EQ(pred_p[10], -1);
      EXPECT_EQ(pred_p[11], -1);
      // Junk in padded slots changes nothing, bitwise.
      Batch junk = second_only;
      junk.tokens[10] = 3;
      junk.tokens[11] = 0;
      Metrics mj;
      EXPECT_EQ(m.Evaluate(junk, &mj, nullptr), lp);
    }
  }
}

TEST(TransformerTest, DecoderIsCausal) {
  // Changing a later token must not change earlier predictions' losses in
  // the decoder, and must in the encoder.
  for (Arch arch : {Arch::kEncoder, Arch::kDecoder}) {
    for (PositionScheme p : AllSchemes()) {
      BasicTransformer<double> m(Tiny(arch, p));
      Batch a;
      a.batch = 1;
      a.length = 5;
      a.tokens = {1, 2, 3, 4, 5};
      a.targets = {2, 3, -1, -1, -1};
      a.lengths = {5};
      Batch b = a;
      b.tokens[4] = 0;
      const double la = m.Evaluate(a, nullptr, nullptr);
      const double lb = m.Evaluate(b, nullptr, nullptr);
      if (arch == Arch::kDecoder) {
        EXPECT_EQ(la, lb) << ToString(p);
      } else {
        EXPECT_NE(la, lb) << ToString(p);
      }
    }
  }
}

TEST(TransformerTest, MetricsAndNoTargetBatch) {
  Transformer m(Tiny(Arch::kEncoder, PositionScheme::kSinusoidal));
  Batch b = TinyBatch();
  Metrics metrics;
  std::vector<int32_t> pred;
  const float loss = m.Evaluate(b, &metrics, &pred);
  EXPECT_EQ(metrics.tokens, 7);
  EXPECT_EQ(metrics.sequences, 2);
  EXPECT_NEAR(metrics.loss_sum / metrics.tokens, loss, 1e-5);
  int64_t correct = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    if (b.targets[i] >= 0) correct += pred[i] == b.targets[i];
  }
  EXPECT_EQ(metrics.correct_tokens, correct);
  // A batch without targets: loss 0, every gradient zero, no sequence counted.
  for (int32_t& t : b.targets) t = -1;
  Rng rng(1);
  Metrics none;
  EXPECT_EQ(m.ForwardBackward(b, rng, &none), 0.0f);
  EXPECT_EQ(none.sequences, 0);
  for (const auto& p : m.parameters()) {
    for (float g : p.grad) ASSERT_EQ(g, 0.0f) << p.name;
  }
}

TEST(TransformerTest, FullyPaddedSequenceStaysFinite) {
  // A sequence of length 0 (every query sees no key) must not produce NaN.
  Transformer m(Tiny(Arch::kDecoder, PositionScheme::kRelative));
  Batch b = TinyBatch();
  b.lengths = {6, 0};
  for (int i = 6; i < 12; ++i) b.targets[i] = -1;
  Rng rng(2);
  const float loss = m.ForwardBackward(b, rng, nullptr);
  EXPECT_TRUE(std::isfinite(loss));
  for (const auto& p : m.parameters()) {
    for (float g : p.grad) ASSERT_TRUE(std::isfinite(g)) << p.name;
  }
}

TEST(TransformerTest, RejectsBadBatches) {
  Transformer m(Tiny(Arch::kEncoder, PositionScheme::kLearned));
  Rng rng(1);
  auto expect_bad = [&](Batch b, const std::string& needle) {
    try {
      m.ForwardBackward(b, rng, nullptr);
      ADD_FAILURE() << "accepted a batch; expected '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << e.what();
    }
  };
  Batch b = TinyBatch();
  b.tokens[0] = 7;
  expect_bad(b, "batch.tokens[0, 0]");
  b = TinyBatch();
  b.targets[3] = 9;
  expect_bad(b, "batch.targets[0, 3]");
  b = TinyBatch();
  b.targets[10] = 2;
  expect_bad(b, "padded");
  b = TinyBatch();
  b.lengths = {6};
  expect_bad(b, "batch.lengths");
  b = TinyBatch();
  b.lengths[1] = 7;
  expect_bad(b, "batch.lengths[1]");
  b = TinyBatch();
  b.tokens.pop_back();
  expect_bad(b, "batch.tokens");
  // Longer than the learned table (max_len 9).
  b.batch = 1;
  b.length = 10;
  b.tokens.assign(10, 1);
  b.targets.assign(10, -1);
  b.lengths = {10};
  expect_bad(b, "max_len");
}

// Plain gradient descent (step 0.1) on TinyBatch with a 1-layer, width-16
// version of `c`: the loss before each step and after the last.
std::vector<float> SgdLosses(ModelConfig c, int steps) {
  c.d_model = 16;
  c.d_ff = 32;
  c.layers = 1;
  Transformer m(c);
  const Batch b = TinyBatch();
  Rng rng(1);
  std::vector<float> losses = {m.ForwardBackward(b, rng, nullptr)};
  for (int step = 0; step < steps; ++step) {
    for (auto& p : m.parameters()) {
      for (size_t i = 0; i < p.value.size(); ++i)
        p.value[i] -= 0.1f * p.grad[i];
    }
    losses.push_back(m.ForwardBackward(b, rng, nullptr));
  }
  return losses;
}

TEST(TransformerTest, SgdFitsAFixedBatch) {
  // End to end: plain gradient descent on one batch must drive the loss well
  // below its initial value (~log 7 plus init noise) if the gradients point
  // downhill. 60 steps of a 1-layer model take milliseconds.
  for (Arch arch : {Arch::kEncoder, Arch::kDecoder}) {
    const std::vector<float> l =
        SgdLosses(Tiny(arch, PositionScheme::kRelative), 60);
    EXPECT_LT(l.back(), 0.2f * l.front()) << ToString(arch);
  }
}

// Every scheme, both architectures: a few steps of gradient descent on one
// batch keep the loss below its start at every step, and lower it by a
// clear margin after 20 steps (the float model, so the fused kernel's
// backward is what trains).
TEST(TransformerTest, EverySchemeTrainsATinyModel) {
  for (Arch arch : {Arch::kEncoder, Arch::kDecoder}) {
    for (PositionScheme p : AllSchemes()) {
      const std::vector<float> l = SgdLosses(Tiny(arch, p), 20);
      for (size_t i = 1; i < l.size(); ++i) {
        EXPECT_LT(l[i], l.front()) << ToString(arch) << " " << ToString(p);
      }
      EXPECT_LT(l.back(), 0.7f * l.front())
          << ToString(arch) << " " << ToString(p);
    }
  }
}

}  // namespace
}  // namespace relpos::model

namespace relpos::model {
namespace {

// RowDropout over packed rows draws the masks of the padded layout: each
// valid element keeps its padded index, so packing changes no mask.
TEST(RowDropoutTest, PackedRowsUseThePaddedMasks) {
  const std::vector<int64_t> lengths = {3, 0, 5, 1};
  const int64_t B = 4, N = 5, d = 3;
  const BlockShape padded{B, N, d, 1, 1};
  const BlockShape packed{B, N, d, 1, 1, lengths.data()};
  std::vector<double> x(B * N * d), xp;
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0 + static_cast<double>(i);
  for (int64_t b = 0; b < B; ++b) {
    xp.insert(xp.end(), x.begin() + b * N * d,
              x.begin() + (b * N + lengths[b]) * d);
  }
  ASSERT_EQ(packed.rows(), 9);
  for (bool forward : {true, false}) {
    std::vector<double> y(x.size()), yp(xp.size());
    RowDropout<double>(forward, x.data(), y.data(), padded, 0.5, 11);
    RowDropout<double>(forward, xp.data(), yp.data(), packed, 0.5, 11);
    int64_t r = 0, dropped = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < lengths[b] * d; ++i, ++r) {
        EXPECT_EQ(yp[r], y[b * N * d + i]) << b << "," << i;
        dropped += yp[r] == 0.0;
      }
    }
    EXPECT_GT(dropped, 0);
    EXPECT_LT(dropped, r);
  }
}

}  // namespace
}  // namespace relpos::model
