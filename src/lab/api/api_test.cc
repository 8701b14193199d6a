// The public API of include/relpos/: configs by name, training, checkpoints,
// evaluation, and the attention layer's gradients.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "relpos/lab/config.h"
#include "relpos/error.h"
#include "relpos/lab/layer.h"
#include "relpos/lab/model.h"
#include "relpos/lab/training.h"

namespace relpos {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_api_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p.string();
}

ExperimentConfig Tiny() {
  ExperimentConfig c;
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"task", "reverse"}, {"--train-lengths", "1-4"}, {"steps", "6"},
           {"batch_size", "4"}, {"checkpoint_every", "0"}}) {
    c.Set("train", key, value);
  }
  c.Set("model", "d_model", "16");
  c.Set("model", "heads", "2");
  c.Set("model", "layers", "1");
  c.Set("model", "d_ff", "32");
  c.Set("model", "max_distance", "3");
  return c;
}

TEST(ExperimentConfig, SetGetByNameWithDeclaredLimits) {
  ExperimentConfig c;
  EXPECT_EQ(c.Get("model", "position"), "shaw");
  c.Set("model", "position", "relative");  // the old name of shaw
  EXPECT_EQ(c.Get("model", "position"), "shaw");
  c.Set("model", "--terms", "key");
  EXPECT_EQ(c.Get("model", "key_term"), "true");
  EXPECT_EQ(c.Get("model", "value_term"), "false");
  EXPECT_TRUE(c.Given("model", "--terms"));
  EXPECT_FALSE(c.Given("model", "d_model"));
  c.SetDefault("train", "steps", "50");
  EXPECT_FALSE(c.Given("train", "steps"));
  EXPECT_THROW(c.Set("model", "layers", "2000"), InvalidArgument);
  EXPECT_THROW(c.Set("model", "layers", "x"), InvalidArgument);
  EXPECT_THROW(c.Set("model", "nosuch", "1"), InvalidArgument);
  EXPECT_THROW(c.Set("train", "lr", "0"), InvalidArgument);
  try {
    c.Set("model", "dropout", "1", "--dropout");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--dropout"), std::string::npos);
  }
}

TEST(ExperimentConfig, JsonMergeAndResolve) {
  ExperimentConfig c;
  c.MergeJson(R"({"model": {"d_model": 32}, "train": {"task": "lm",
                  "steps": 50, "corpus_bytes": 4096}})",
              "test");
  EXPECT_EQ(c.Get("model", "d_model"), "32");
  EXPECT_THROW(c.MergeJson(R"({"optimizer": {}})", "t"), FormatError);
  EXPECT_THROW(c.MergeJson(R"({"model": {"d_model": "32"}})", "t"),
               FormatError);
  EXPECT_THROW(c.MergeJson("{", "t"), FormatError);
  c.Resolve();
  // lm: bytes and a causal decoder; the warm-up follows the short run.
  EXPECT_EQ(c.Get("model", "vocab_size"), "256");
  EXPECT_EQ(c.Get("model", "arch"), "decoder");
  EXPECT_EQ(c.Get("train", "warmup_steps"), "5");
  ExperimentConfig back;
  back.MergeJson(c.ToJson(), "round trip");
  EXPECT_EQ(back.ToJson(), c.ToJson());
}

// A source-target task resolves to a seq2seq model trained with label
// smoothing 0.1 unless the smoothing is given; the other tasks keep 0.
TEST(ExperimentConfig, Seq2seqTasksResolveArchAndLabelSmoothing) {
  ExperimentConfig c;
  c.Set("train", "task", "s2s_reverse");
  c.Resolve();
  EXPECT_EQ(c.Get("model", "arch"), "seq2seq");
  EXPECT_EQ(c.Get("train", "label_smoothing"), "0.1");
  EXPECT_EQ(c.Get("model", "vocab_size"), "10");
  ExperimentConfig given;
  given.Set("train", "task", "s2s_reverse");
  given.Set("train", "label_smoothing", "0");
  given.Resolve();
  EXPECT_EQ(given.Get("train", "label_smoothing"), "0");
  ExperimentConfig formal;
  formal.Set("train", "task", "reverse");
  formal.Resolve();
  EXPECT_EQ(formal.Get("model", "arch"), "encoder");
  EXPECT_EQ(formal.Get("train", "label_smoothing"), "0");
  // Written only where it is not 0: a formal task's config has no key.
  EXPECT_EQ(formal.ToJson().find("label_smoothing"), std::string::npos);
  EXPECT_NE(c.ToJson().find("\"label_smoothing\":0.1"), std::string::npos);
  ExperimentConfig wrong;
  wrong.Set("train", "task", "reverse");
  wrong.Set("model", "arch", "seq2seq");
  EXPECT_THROW(wrong.Resolve(), InvalidArgument);
}

TEST(Training, TrainSaveLoadEvaluate) {
  const std::string dir = TempDir("run");
  Training run(Tiny());
  const TrainSummary s = run.Run({.checkpoint_dir = dir});
  EXPECT_TRUE(s.completed);
  EXPECT_EQ(s.steps_run, 6);
  EXPECT_EQ(run.step(), 6);
  EXPECT_TRUE(std::isfinite(s.final_loss));
  EXPECT_TRUE(HasCheckpoint(dir));

  const EvalOptions eo{.lengths = {2, 4, 6}, .sequences_per_length = 8};
  const std::vector<LengthMetrics> a = Evaluate(run.model(), eo);
  Model loaded = Model::Load(dir);
  EXPECT_EQ(loaded.step(), 6);
  EXPECT_EQ(loaded.NumParameters(), run.model().NumParameters());
  const std::vector<LengthMetrics> b = Evaluate(loaded, eo);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].length, b[i].length);
    EXPECT_EQ(a[i].sequence_length, 2 * a[i].length);  // reverse: 2 per symbol
    EXPECT_EQ(a[i].token_accuracy, b[i].token_accuracy);
    EXPECT_EQ(a[i].loss, b[i].loss);
    EXPECT_GE(a[i].token_accuracy, 0.0);
    EXPECT_LE(a[i].token_accuracy, 1.0);
  }
  EXPECT_THROW(Evaluate(loaded, {.lengths = {0}}), InvalidArgument);

  // Resume to a longer run continues from step 6.
  Training more = Training::Resume(dir);
  more.SetTotalSteps(8);
  EXPECT_EQ(more.Run({.checkpoint_dir = dir}).steps_run, 2);
  EXPECT_EQ(Model::Load(dir).step(), 8);
}

TEST(Model, ForwardBackwardAndSaveRoundTrip) {
  Model m(Tiny());
  TokenBatch b{.batch = 2, .length = 4, .tokens = {1, 2, 0, 0, 2, 2, 1, 1},
               .targets = {-1, 2, -1, -1, 1, -1, 2, -1},
               .lengths = {3, 4}};
  const ForwardResult f = m.Forward(b);
  EXPECT_EQ(f.tokens, 3);
  EXPECT_EQ(f.predictions.size(), 8u);
  EXPECT_EQ(f.predictions[3], -1);  // padding
  const double loss = m.ForwardBackward(b);
  EXPECT_NEAR(loss, f.loss, 1e-5 * std::fabs(f.loss));
  double norm = 0;
  for (const std::string& name : m.ParameterNames()) {
    const ConstView<float> g = m.Gradient(name);
    for (int64_t i = 0; i < g.numel(); ++i) norm += g.data()[i] * g.data()[i];
  }
  EXPECT_GT(norm, 0);
  const std::string dir = TempDir("saved");
  m.Save(dir);
  Model back = Model::Load(dir);
  EXPECT_EQ(back.Forward(b).loss, f.loss);
  EXPECT_THROW(m.Parameter("nosuch"), InvalidArgument);
}

// A seq2seq model through the public API: the batch carries the sources;
// Forward, ForwardBackward and a saved copy agree; a missing source is an
// InvalidArgument.
TEST(Model, Seq2seqTakesSourcesInTheBatch) {
  ExperimentConfig c;
  c.Set("train", "task", "s2s_copy");
  c.Set("model", "d_model", "16");
  c.Set("model", "d_ff", "32");
  c.Set("model", "layers", "1");
  Model m(c);
  EXPECT_EQ(m.config().Get("model", "arch"), "seq2seq");
  // Pairs (3 1 -> 3 1) and (5 -> 5): BOS 8, EOS 9.
  TokenBatch b{.batch = 2, .length = 3, .tokens = {8, 3, 1, 8, 5, 0},
               .targets = {3, 1, 9, 5, 9, -1}, .lengths = {3, 2},
               .source_length = 2, .source_tokens = {3, 1, 5, 0},
               .source_lengths = {2, 1}};
  const ForwardResult f = m.Forward(b);
  EXPECT_EQ(f.tokens, 5);
  EXPECT_EQ(f.predictions[5], -1);
  EXPECT_NEAR(m.ForwardBackward(b), f.loss, 0.5);  // label-smoothed
  const std::string dir = TempDir("seq2seq");
  m.Save(dir);
  EXPECT_EQ(Model::Load(dir).Forward(b).loss, m.Forward(b).loss);
  // Decoding through the public API: greedy and beam search, BOS / EOS
  // from the task; an unknown penalty and an encoder are refused.
  const std::vector<Translation> greedy =
      m.Translate({{3, 1}, {5}}, {.beam_size = 1});
  ASSERT_EQ(greedy.size(), 2u);
  EXPECT_LE(greedy[0].tokens.size(), 4u);  // ratio 2
  EXPECT_LE(greedy[0].score, 0.0);
  EXPECT_EQ(m.Translate({{3, 1}}, {.beam_size = 4}).size(), 1u);
  EXPECT_THROW(m.Translate({{3}}, {.length_penalty = "avg"}), InvalidArgument);
  // The search's caches are planned before they are allocated: 256
  // sentences at the largest beam, 4096 (2^20 hypotheses, about 1 GiB of
  // key/value cache), are refused under a 256 MiB limit that a beam of 4
  // fits.
  ::setenv("RELPOS_MEMORY_LIMIT", "256M", 1);
  EXPECT_EQ(m.Translate({{3, 1}}, {.beam_size = 4}).size(), 1u);
  try {
    m.Translate(std::vector<std::vector<int32_t>>(256, {3, 1}),
                {.beam_size = 4096});
    ADD_FAILURE() << "no ResourceError";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("translation needs about"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("RELPOS_MEMORY_LIMIT");
  Model encoder(Tiny());
  EXPECT_THROW(encoder.Translate({{1}}), InvalidArgument);
  EXPECT_EQ(m.BosEos(), std::make_pair(8, 9));
  EXPECT_THROW(encoder.BosEos(), InvalidArgument);
  // SetParameter: the values land (and change the model's outputs); an
  // unknown name or another size is refused and changes nothing.
  std::vector<float> bias(10, 0.f);
  bias[9] = 100.f;  // EOS first, always
  m.SetParameter("head.bias", bias);
  EXPECT_EQ(m.Parameter("head.bias").data()[9], 100.f);
  EXPECT_TRUE(m.Translate({{3, 1}}, {.beam_size = 1})[0].tokens.empty());
  EXPECT_THROW(m.SetParameter("head.bias", std::vector<float>(9)),
               InvalidArgument);
  EXPECT_THROW(m.SetParameter("no.such", bias), InvalidArgument);
  EXPECT_EQ(m.Parameter("head.bias").data()[9], 100.f);
  TokenBatch no_source = b;
  no_source.source_length = 0;
  no_source.source_tokens.clear();
  no_source.source_lengths.clear();
  EXPECT_THROW(m.Forward(no_source), InvalidArgument);
}

// Quantize: int8 once for all, its float32 weights freed; it decodes as a
// per-call int8 Translate does, with its compute type only, and refuses
// every use of the float32 weights.
TEST(Model, QuantizeDecodesAsPerCallInt8AndRefusesFloatUse) {
  ExperimentConfig c;
  c.Set("train", "task", "s2s_copy");
  c.Set("model", "d_model", "16");
  c.Set("model", "d_ff", "32");
  c.Set("model", "layers", "2");
  const std::string dir = TempDir("quantize");
  Model(c).Save(dir);
  const std::vector<std::vector<int32_t>> sources = {{3, 1}, {5}, {1, 2, 3}};
  for (const std::string type : {"int8", "int8_a8"}) {
    SCOPED_TRACE(type);
    Model per_call = Model::Load(dir), once = Model::Load(dir);
    const int64_t params = once.NumParameters();
    EXPECT_EQ(once.compute_type(), "float32");
    once.Quantize(type);
    EXPECT_EQ(once.compute_type(), type);
    EXPECT_EQ(once.NumParameters(), params);
    // Loaded quantized: the same model, never holding the float32 matrices.
    Model loaded = Model::Load(dir, type);
    EXPECT_EQ(loaded.compute_type(), type);
    EXPECT_EQ(loaded.NumParameters(), params);
    for (const int beam : {1, 3}) {
      const std::vector<Translation> want = per_call.Translate(
          sources, {.beam_size = beam, .compute_type = type});
      for (Model* m : {&once, &loaded}) {
        const std::vector<Translation> got =
            m->Translate(sources, {.beam_size = beam, .compute_type = type});
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i].tokens, want[i].tokens);
          EXPECT_EQ(got[i].log_prob, want[i].log_prob);
        }
      }
    }
    EXPECT_THROW(loaded.Translate(sources, {.beam_size = 1}),
                 InvalidArgument);
    EXPECT_THROW(loaded.Save(TempDir("loaded-save")), InvalidArgument);
    EXPECT_THROW(loaded.Quantize(type), InvalidArgument);
    const auto refused = [&](const std::function<void()>& f,
                             const std::string& what) {
      try {
        f();
        ADD_FAILURE() << what << ": no InvalidArgument";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos)
            << e.what();
      }
    };
    refused([&] { once.Translate(sources, {.beam_size = 1}); },
            "compute_type must be " + type);
    refused([&] { once.Save(TempDir("quantized-save")); }, "Save: ");
    refused([&] { once.Parameter("head.bias"); }, "Parameter: ");
    refused([&] { once.SetParameter("head.bias", std::vector<float>(10)); },
            "SetParameter: ");
    TokenBatch b{.batch = 1, .length = 2, .tokens = {8, 3},
                 .targets = {3, 9}, .lengths = {2}, .source_length = 1,
                 .source_tokens = {3}, .source_lengths = {1}};
    refused([&] { once.Forward(b); }, "Forward: ");
    refused([&] { once.ForwardBackward(b); }, "ForwardBackward: ");
    refused([&] { once.Quantize(type); }, "already quantized");
  }
  Model m = Model::Load(dir);
  EXPECT_THROW(m.Quantize("float32"), InvalidArgument);
  EXPECT_THROW(m.Quantize("int4"), InvalidArgument);
  EXPECT_THROW(Model::Load(dir, "int4"), InvalidArgument);
  EXPECT_EQ(Model::Load(dir, "float32").compute_type(), "float32");
  Model encoder(Tiny());
  EXPECT_THROW(encoder.Quantize("int8"), InvalidArgument);
  EXPECT_EQ(encoder.compute_type(), "float32");
  const std::string encoder_dir = TempDir("quantize-encoder");
  encoder.Save(encoder_dir);
  EXPECT_THROW(Model::Load(encoder_dir, "int8"), InvalidArgument);
}

// Outputs: logits are the head applied to the hidden states, their argmax is
// Forward's prediction, padding is zero, and a padded sequence gives what it
// gives alone.
TEST(Model, OutputsAreHiddenStatesAndLogits) {
  Model m(Tiny());
  TokenBatch b{.batch = 2, .length = 4, .tokens = {1, 2, 0, 0, 2, 2, 1, 1},
               .targets = {}, .lengths = {3, 4}};
  const ModelOutputs o = m.Outputs(b);
  const int64_t d = o.d_model, V = o.vocab_size;
  ASSERT_EQ(o.hidden.size(), static_cast<size_t>(8 * d));
  ASSERT_EQ(o.logits.size(), static_cast<size_t>(8 * V));
  const ForwardResult f = m.Forward(b);
  const ConstView<float> w = m.Parameter("head.weight");  // [V, d]
  const ConstView<float> bias = m.Parameter("head.bias");
  for (int64_t r = 0; r < 8; ++r) {
    const float* h = o.hidden.data() + r * d;
    const float* z = o.logits.data() + r * V;
    if (r == 3) {  // padding
      for (int64_t j = 0; j < d; ++j) EXPECT_EQ(h[j], 0.f);
      for (int64_t v = 0; v < V; ++v) EXPECT_EQ(z[v], 0.f);
      continue;
    }
    int64_t best = 0;
    for (int64_t v = 0; v < V; ++v) {
      double dot = bias.data()[v];
      for (int64_t j = 0; j < d; ++j) dot += double(h[j]) * w.data()[v * d + j];
      // A d-term float dot product: a few d * eps_float of its size.
      EXPECT_NEAR(z[v], dot, 1e-5 * (1 + std::fabs(dot)));
      if (z[v] > z[best]) best = v;
    }
    EXPECT_EQ(best, f.predictions[r]);
  }
  TokenBatch alone{.batch = 1, .length = 3, .tokens = {1, 2, 0}};
  const ModelOutputs a = m.Outputs(alone);
  for (int64_t j = 0; j < 3 * d; ++j) {
    EXPECT_NEAR(a.hidden[j], o.hidden[j], 1e-5);
  }
  TokenBatch bad{.batch = 1, .length = 2, .tokens = {1, 99}};
  EXPECT_THROW(m.Outputs(bad), InvalidArgument);
}

// Directional finite differences of the layer's loss L = sum(y * w) against
// Backward. In float with step h the central difference has truncation error
// O(h^2 |L'''|) and rounding error O(eps |L| / h); with h = 1e-2, |L| ~ 10
// and eps = 6e-8 both are ~1e-4 of a derivative ~1, so 1e-2 relative (normwise
// over all directions tried) leaves a wide margin yet catches any wrong term.
TEST(RelativeAttentionLayer, BackwardMatchesFiniteDifferences) {
  for (const bool per_head : {false, true}) {
    RelativeAttentionLayer layer({.d_model = 8, .heads = 2, .max_distance = 2,
                                  .per_head_tables = per_head, .causal = true,
                                  .seed = 5});
    const int64_t B = 2, N = 5, d = 8;
    std::vector<float> x(B * N * d), y(x.size()), w(x.size()), dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::sin(0.7f * i);
      w[i] = std::cos(0.3f * i);
    }
    const std::vector<int64_t> lengths = {5, 3};
    auto loss = [&]() {
      layer.Forward({x.data(), {B, N, d}}, {y.data(), {B, N, d}}, lengths);
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += double(y[i]) * w[i];
      return l;
    };
    loss();
    layer.Backward({w.data(), {B, N, d}}, {dx.data(), {B, N, d}});
    double err = 0, ref = 0;
    for (const std::string& name : layer.ParameterNames()) {
      const ConstView<float> g = layer.Gradient(name);
      const std::vector<float> grad(g.data(), g.data() + g.numel());
      TensorView<float> p = layer.Parameter(name);
      // One direction per tensor: the sign pattern of a fixed hash.
      std::vector<float> dir(grad.size());
      double analytic = 0;
      for (size_t i = 0; i < dir.size(); ++i) {
        dir[i] = ((i * 2654435761u) >> 7) % 2 ? 1.0f : -1.0f;
        analytic += double(grad[i]) * dir[i];
      }
      const float h = 1e-2f;
      for (size_t i = 0; i < dir.size(); ++i) p.data()[i] += h * dir[i];
      const double plus = loss();
      for (size_t i = 0; i < dir.size(); ++i) p.data()[i] -= 2 * h * dir[i];
      const double minus = loss();
      for (size_t i = 0; i < dir.size(); ++i) p.data()[i] += h * dir[i];
      const double numeric = (plus - minus) / (2 * h);
      err += (numeric - analytic) * (numeric - analytic);
      ref += analytic * analytic;
    }
    EXPECT_LT(std::sqrt(err), 1e-2 * std::sqrt(ref)) << "per_head " << per_head;
    EXPECT_EQ(layer.ParameterNames().size(), 10u);
  }
  EXPECT_THROW(RelativeAttentionLayer({.d_model = 10, .heads = 3}),
               InvalidArgument);
}

}  // namespace
}  // namespace relpos
