// Beam search (model/beam_search.h): on constructed step models, beam search
// finds a better hypothesis than greedy, a beam as wide as every hypothesis
// finds the exact optimum (with and without a length penalty), and the
// length penalties are Wu et al.'s and CTranslate2's; on real seq2seq models
// of every scheme, greedy decoding with the cache equals a step-by-step full
// recomputation without it, and batching sentences changes no output.
#include "model/beam_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/rng.h"
#include "model/model_test_util.h"
#include "relpos/error.h"
#include "support/expect_invalid.h"

namespace relpos::model {
namespace {

// A step model whose next-token probabilities are a function of the
// hypothesis's sentence and tokens so far.
using ProbFn = std::function<std::vector<double>(
    int64_t sentence, const std::vector<int32_t>& prefix)>;

class TableModel final : public StepModel<double> {
 public:
  TableModel(int64_t vocab, int64_t sentences, ProbFn probs)
      : vocab_(vocab), probs_(std::move(probs)) {
    for (int64_t s = 0; s < sentences; ++s) hyps_.push_back({s, {}});
  }
  int64_t vocab_size() const override { return vocab_; }
  void Step(const std::vector<int32_t>& tokens,
            std::vector<double>* logits) override {
    ASSERT_EQ(tokens.size(), hyps_.size());
    logits->clear();
    for (size_t i = 0; i < hyps_.size(); ++i) {
      if (started_) hyps_[i].prefix.push_back(tokens[i]);
      for (double p : probs_(hyps_[i].sentence, hyps_[i].prefix)) {
        logits->push_back(std::log(p) + 3.0);  // any shift: softmax
      }
    }
    started_ = true;
    ++steps_;
  }
  void Reorder(const std::vector<int64_t>& parents) override {
    std::vector<Hyp> next;
    for (int64_t p : parents) next.push_back(hyps_.at(p));
    for (size_t i = 1; i < next.size(); ++i) {
      EXPECT_LE(next[i - 1].sentence, next[i].sentence) << "grouped";
    }
    hyps_ = next;
  }
  int64_t steps() const { return steps_; }

 private:
  struct Hyp {
    int64_t sentence;
    std::vector<int32_t> prefix;  // tokens after BOS
  };
  int64_t vocab_;
  ProbFn probs_;
  std::vector<Hyp> hyps_;
  bool started_ = false;
  int64_t steps_ = 0;
};

// Tokens a = 0, b = 1, EOS = 2, BOS = 3. After BOS: a 0.5, b 0.4, EOS 0.1.
// After b: EOS 0.95. After a (and anything starting with a): EOS 0.3, a and
// b 0.35 each. Greedy takes a, then a again (0.35 > 0.3, ties to the lower
// id) until the limit; "b EOS" has probability 0.38, more than any path
// through a.
std::vector<double> GreedyTrap(int64_t, const std::vector<int32_t>& prefix) {
  if (prefix.empty()) return {0.5, 0.4, 0.1, 1e-9};
  if (prefix[0] == 1) return {0.025, 0.025, 0.95, 1e-9};
  return {0.35, 0.35, 0.3, 1e-9};
}

BeamSearchOptions Options(int64_t beam, LengthPenalty lp, double alpha) {
  BeamSearchOptions o;
  o.beam_size = beam;
  o.length_penalty = lp;
  o.alpha = alpha;
  o.bos = 3;
  o.eos = 2;
  return o;
}

TEST(BeamSearchTest, FindsABetterHypothesisThanGreedy) {
  for (LengthPenalty lp :
       {LengthPenalty::kWu, LengthPenalty::kPower, LengthPenalty::kNone}) {
    TableModel g(4, 1, GreedyTrap), b(4, 1, GreedyTrap);
    const Hypothesis greedy =
        BeamSearch<double>(g, {6}, Options(1, lp, 0.6)).at(0);
    const Hypothesis beam = BeamSearch<double>(b, {6}, Options(4, lp, 0.6)).at(0);
    // Greedy: a a a a a a (the limit, no EOS): 0.5 * 0.35^5.
    EXPECT_EQ(greedy.tokens, (std::vector<int32_t>{0, 0, 0, 0, 0, 0}));
    EXPECT_FALSE(greedy.ended_by_eos);
    EXPECT_NEAR(greedy.log_prob, std::log(0.5 * std::pow(0.35, 5)), 1e-7);
    EXPECT_EQ(g.steps(), 6);
    EXPECT_EQ(beam.tokens, (std::vector<int32_t>{1}));
    EXPECT_TRUE(beam.ended_by_eos);
    EXPECT_NEAR(beam.log_prob, std::log(0.4 * 0.95), 1e-7);
    EXPECT_GT(beam.score, greedy.score);
    EXPECT_NEAR(beam.score,
                beam.log_prob / LengthPenaltyOf(Options(4, lp, 0.6), 1, true),
                1e-12);
  }
}

// Every hypothesis of up to 3 tokens over a random model with 2 symbols +
// EOS, scored exactly; a beam wide enough to keep them all finds the best.
TEST(BeamSearchTest, AWideBeamFindsTheExactOptimum) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::map<std::vector<int32_t>, std::vector<double>> table;
    Rng rng(seed);
    auto probs = [&](int64_t, const std::vector<int32_t>& prefix) {
      auto it = table.find(prefix);
      if (it == table.end()) {
        std::vector<double> p(4);
        double sum = 0;
        for (int v = 0; v < 3; ++v) sum += p[v] = 0.05 + rng.Uniform();
        for (int v = 0; v < 3; ++v) p[v] /= sum * (1 + 1e-9);
        p[3] = 1e-9;  // BOS
        it = table.emplace(prefix, p).first;
      }
      return it->second;
    };
    for (LengthPenalty lp : {LengthPenalty::kWu, LengthPenalty::kNone}) {
      const BeamSearchOptions o = Options(64, lp, 1.0);
      // Exhaustive: every path ending in EOS before the limit, and every
      // path of 3 tokens that reaches it.
      double best = -1e300;
      std::vector<int32_t> prefix;  // the path walked so far
      std::function<void(double)> walk = [&](double lpr) {
        const std::vector<double> p = probs(0, prefix);
        const int64_t n = static_cast<int64_t>(prefix.size());
        const double sum = p[0] + p[1] + p[2] + p[3];
        for (int32_t v = 0; v < 3; ++v) {
          const double l = lpr + std::log(p[v] / sum);
          if (v == 2) {  // EOS
            best = std::max(best, l / LengthPenaltyOf(o, n, true));
          } else if (n + 1 == 3) {  // the limit: ends with v
            best = std::max(best, l / LengthPenaltyOf(o, n + 1, false));
          } else {
            prefix.push_back(v);
            walk(l);
            prefix.pop_back();
          }
        }
      };
      walk(0.0);
      TableModel m(4, 1, probs);
      const Hypothesis h = BeamSearch<double>(m, {3}, o).at(0);
      EXPECT_NEAR(h.score, best, 1e-9) << "seed " << seed;
      // Beam 2 is never better than the optimum.
      TableModel m2(4, 1, probs);
      EXPECT_LE(BeamSearch<double>(m2, {3}, Options(2, lp, 1.0)).at(0).score,
                best + 1e-12);
    }
  }
}

// Sentences decode independently: a batch of three equals each alone, and
// each stops at its own limit.
TEST(BeamSearchTest, SentencesAreIndependent) {
  auto probs = [](int64_t s, const std::vector<int32_t>& prefix) {
    return GreedyTrap(s, s == 1 ? std::vector<int32_t>{1} : prefix);
  };
  TableModel batch(4, 3, probs);
  const std::vector<Hypothesis> all =
      BeamSearch<double>(batch, {6, 2, 4}, Options(2, LengthPenalty::kWu, 0.6));
  ASSERT_EQ(all.size(), 3u);
  for (int64_t s = 0; s < 3; ++s) {
    auto alone_probs = [&](int64_t, const std::vector<int32_t>& prefix) {
      return probs(s, prefix);
    };
    TableModel alone(4, 1, alone_probs);
    const int64_t steps[3] = {6, 2, 4};
    const Hypothesis h = BeamSearch<double>(
        alone, {steps[s]}, Options(2, LengthPenalty::kWu, 0.6)).at(0);
    EXPECT_EQ(all[s].tokens, h.tokens) << s;
    EXPECT_EQ(all[s].score, h.score) << s;
  }
}

TEST(BeamSearchTest, LengthPenaltiesAndLimits) {
  const BeamSearchOptions wu = Options(4, LengthPenalty::kWu, 0.6);
  // Wu et al.: ((5 + |y|) / 6)^alpha, |y| with the EOS (OpenNMT-py).
  EXPECT_NEAR(LengthPenaltyOf(wu, 3, true), std::pow(9.0 / 6.0, 0.6), 1e-15);
  EXPECT_NEAR(LengthPenaltyOf(wu, 3, false), std::pow(8.0 / 6.0, 0.6), 1e-15);
  // CTranslate2: |y|^alpha with the EOS.
  const BeamSearchOptions power = Options(4, LengthPenalty::kPower, 0.6);
  EXPECT_NEAR(LengthPenaltyOf(power, 3, true), std::pow(4.0, 0.6), 1e-15);
  EXPECT_NEAR(LengthPenaltyOf(power, 3, false), std::pow(3.0, 0.6), 1e-15);
  EXPECT_EQ(LengthPenaltyOf(Options(4, LengthPenalty::kNone, 0.6), 7, true),
            1.0);
  BeamSearchOptions o = wu;
  o.max_length_ratio = 1.5;
  o.max_length = 10;
  EXPECT_EQ(MaxDecodingSteps(0, o), 1);
  EXPECT_EQ(MaxDecodingSteps(3, o), 5);  // ceil(4.5)
  EXPECT_EQ(MaxDecodingSteps(100, o), 10);
  EXPECT_EQ(MaxDecodingSteps(int64_t{1} << 62, o), 10);
  ExpectInvalid([&] { BeamSearchOptions b = wu; b.beam_size = 0; Validate(b, 4); },
                {"beam size", "0"});
  ExpectInvalid([&] { BeamSearchOptions b = wu; b.alpha = -1; Validate(b, 4); },
                {"alpha"});
  ExpectInvalid(
      [&] { BeamSearchOptions b = wu; b.max_length_ratio = 0; Validate(b, 4); },
      {"ratio"});
  ExpectInvalid([&] { BeamSearchOptions b = wu; b.eos = 4; Validate(b, 4); },
                {"EOS", "vocab_size = 4"});
}

// ---- On real seq2seq models ----

ModelConfig Seq2seq(PositionScheme p) {
  ModelConfig c = testing::TinyConfig(Arch::kSeq2seq, p);
  c.vocab_size = 10;
  c.d_model = 16;
  c.d_ff = 24;
  c.scheme.max_len = 40;
  c.decoder_layers = 2;
  c.layers = 1;
  return c;
}

// Perturbed weights (the initial biases and gains would hide a swap), and
// an EOS made likely enough that some sentences end before their limit.
template <typename T>
void Perturb(BasicTransformer<T>* model, int32_t eos) {
  Rng rng(3);
  for (auto& p : model->parameters()) {
    for (T& v : p.value) v += static_cast<T>(0.3 * rng.Normal());
  }
  auto& bias = model->parameters()[model->FindParameter("head.bias")].value;
  bias[eos] += T(1.5);
}

// Greedy by full recomputation: at each step the model's inference forward
// over (source, BOS + prefix) and the argmax (ties to the lowest id) of the
// last position, until EOS or `steps` tokens.
std::vector<int32_t> GreedyByRecomputation(BasicTransformer<double>& model,
                                           const std::vector<int32_t>& source,
                                           int64_t steps, int32_t bos,
                                           int32_t eos) {
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> prefix = {bos}, out;
  for (int64_t t = 0; t < steps; ++t) {
    Batch b;
    b.batch = 1;
    b.length = static_cast<int64_t>(prefix.size());
    b.tokens = prefix;
    b.targets.assign(prefix.size(), -1);
    b.lengths = {b.length};
    b.source_length = std::max<int64_t>(1, source.size());
    b.source_tokens = source;
    b.source_tokens.resize(b.source_length, 0);
    b.source_lengths = {static_cast<int64_t>(source.size())};
    model.Forward(b, ForwardMode::kInference, nullptr);
    const double* z = model.LastLogits().data() + (b.length - 1) * V;
    int32_t arg = 0;
    for (int32_t v = 1; v < V; ++v) {
      if (z[v] > z[arg]) arg = v;
    }
    if (arg == eos) break;
    out.push_back(arg);
    prefix.push_back(arg);
  }
  return out;
}

// Greedy (beam 1) with the cache, batched, equals greedy by recomputation
// for every scheme, sentence by sentence; so does each sentence alone. Some
// sentences end with EOS, others at their limit.
TEST(TranslateTest, GreedyEqualsStepByStepRecomputation) {
  const std::vector<std::vector<int32_t>> sources = {
      {1, 2, 3, 4, 5}, {7}, {0, 0, 6, 2, 1, 3, 3}, {}};
  int ended = 0, limited = 0;
  for (PositionScheme p : testing::AllSchemes()) {
    BasicTransformer<double> model(Seq2seq(p));
    Perturb(&model, 9);
    BeamSearchOptions o = Options(1, LengthPenalty::kWu, 0.6);
    o.bos = 8;
    o.eos = 9;
    o.max_length_ratio = 1.5;
    const std::vector<Hypothesis> batch = Translate(model, sources, o);
    ASSERT_EQ(batch.size(), sources.size());
    for (size_t s = 0; s < sources.size(); ++s) {
      const int64_t steps = MaxDecodingSteps(sources[s].size(), o);
      EXPECT_EQ(batch[s].tokens,
                GreedyByRecomputation(model, sources[s], steps, 8, 9))
          << ToString(p) << " sentence " << s;
      EXPECT_EQ(Translate(model, {sources[s]}, o).at(0).tokens,
                batch[s].tokens);
      ended += batch[s].ended_by_eos;
      limited += !batch[s].ended_by_eos;
    }
  }
  EXPECT_GT(ended, 5);
  EXPECT_GT(limited, 5);
}

// log P(y | x) of a hypothesis (and its EOS, if it ended with one) by the
// model's inference forward under teacher forcing.
double LogProbByForward(Transformer& model, const std::vector<int32_t>& source,
                        const Hypothesis& h, int32_t bos, int32_t eos) {
  Batch b;
  b.batch = 1;
  b.tokens = {bos};
  b.tokens.insert(b.tokens.end(), h.tokens.begin(), h.tokens.end());
  b.targets = h.tokens;
  b.targets.push_back(eos);
  if (!h.ended_by_eos) {  // the last token has no successor scored
    b.tokens.pop_back();
    b.targets.pop_back();
  }
  b.length = static_cast<int64_t>(b.tokens.size());
  b.lengths = {b.length};
  b.source_length = std::max<int64_t>(1, source.size());
  b.source_tokens = source;
  b.source_tokens.resize(b.source_length, 0);
  b.source_lengths = {static_cast<int64_t>(source.size())};
  Metrics m;
  model.Evaluate(b, &m, nullptr);
  return -m.loss_sum;
}

// Beam search through the cached session (float model: the fused kernel),
// batched, equals beam search of each sentence alone, and each
// hypothesis's log-probability is what the model's full forward gives its
// tokens: the hypotheses' bookkeeping through Reorder is right. (Its score
// is not always above greedy's: with a length penalty the search stops once
// `beam` hypotheses have finished, as CTranslate2's does, and greedy's
// unfinished path can score higher at the length limit.)
TEST(TranslateTest, BatchedBeamEqualsEachSentenceAlone) {
  const std::vector<std::vector<int32_t>> sources = {
      {1, 2, 3, 4, 5}, {7, 7}, {0, 0, 6, 2, 1, 3, 3}};
  for (PositionScheme p : {PositionScheme::kShaw, PositionScheme::kT5,
                           PositionScheme::kRope, PositionScheme::kLearned}) {
    Transformer model(Seq2seq(p));
    Perturb(&model, 9);
    BeamSearchOptions o = Options(4, LengthPenalty::kWu, 0.6);
    o.bos = 8;
    o.eos = 9;
    const std::vector<Hypothesis> batch = Translate(model, sources, o);
    for (size_t s = 0; s < sources.size(); ++s) {
      const Hypothesis alone = Translate(model, {sources[s]}, o).at(0);
      EXPECT_EQ(batch[s].tokens, alone.tokens) << ToString(p) << " " << s;
      EXPECT_NEAR(batch[s].score, alone.score, 1e-5) << ToString(p) << " " << s;
      const double lp = LogProbByForward(model, sources[s], batch[s], 8, 9);
      EXPECT_NEAR(batch[s].log_prob, lp, 1e-4 * (1 + std::abs(lp)))
          << ToString(p) << " " << s;
      EXPECT_NEAR(batch[s].score,
                  batch[s].log_prob /
                      LengthPenaltyOf(o, batch[s].tokens.size(),
                                      batch[s].ended_by_eos),
                  1e-12);
    }
  }
}

TEST(TranslateTest, RefusesOtherModelsAndBadOptions) {
  ModelConfig c = Seq2seq(PositionScheme::kShaw);
  c.arch = Arch::kDecoder;
  c.decoder_layers = -1;
  const Transformer decoder(c);
  BeamSearchOptions o = Options(4, LengthPenalty::kWu, 0.6);
  o.bos = 8;
  o.eos = 9;
  ExpectInvalid([&] { Translate(decoder, {{1}}, o); }, {"seq2seq", "decoder"});
  const Transformer model(Seq2seq(PositionScheme::kShaw));
  ExpectInvalid([&] { Translate(model, {}, o); }, {"no source"});
  ExpectInvalid([&] { Translate(model, {{1, 10}}, o); }, {"vocab_size"});
  o.eos = -1;
  ExpectInvalid([&] { Translate(model, {{1}}, o); }, {"EOS"});
}

}  // namespace
}  // namespace relpos::model
