// Uses only the installed public headers, as a user's program would: the
// README's C++ examples. Forward and backward of causal relative attention,
// then two checks that need no oracle; a relative-attention layer's forward
// and backward; then a few training steps, a checkpoint and an evaluation
// by length.
#include <cmath>
#include <cstdio>
#include <vector>

#include <string>

#include "relpos/relpos.h"

// A layer maps [B, N, d] to [B, N, d], finite, and its backward fills dx
// and the table gradients.
bool LayerWorks() {
  relpos::RelativeAttentionLayer layer(
      {.d_model = 16, .heads = 2, .max_distance = 3, .causal = true});
  const int64_t B = 2, N = 7, d = 16;
  std::vector<float> x(B * N * d), y(x.size()), dx(x.size()), dy(x.size());
  for (size_t t = 0; t < x.size(); ++t) {
    x[t] = std::sin(0.37f * t), dy[t] = std::cos(0.11f * t);
  }
  layer.Forward({x.data(), {B, N, d}}, {y.data(), {B, N, d}});
  layer.Backward({dy.data(), {B, N, d}}, {dx.data(), {B, N, d}});
  double dx_norm = 0, table_norm = 0;
  for (float v : dx) dx_norm += double(v) * v;
  const relpos::ConstView<float> g = layer.Gradient("rel_k");
  for (int64_t t = 0; t < g.numel(); ++t) table_norm += g.data()[t] * g.data()[t];
  for (float v : y) {
    if (!std::isfinite(v)) return false;
  }
  if (!(dx_norm > 0) || !(table_norm > 0)) {
    std::printf("consumer: layer gradients are zero\n");
    return false;
  }
  return true;
}

// Trains a tiny model for a few steps, saves a checkpoint, loads it back
// and evaluates it by length: accuracies in [0, 1], the same from the
// trained and the loaded model.
bool TrainingWorks() {
  relpos::ExperimentConfig config;
  config.Set("train", "task", "reverse");
  config.Set("train", "--train-lengths", "1-4");
  config.Set("train", "steps", "5");
  config.Set("train", "batch_size", "4");
  config.Set("model", "d_model", "16");
  config.Set("model", "heads", "2");
  config.Set("model", "layers", "1");
  config.Set("model", "d_ff", "32");
  relpos::Training training(config);
  const std::string dir = "consumer_checkpoint";
  const relpos::TrainSummary summary = training.Run({.checkpoint_dir = dir});
  if (!summary.completed || summary.final_step != 5 ||
      !std::isfinite(summary.final_loss)) {
    std::printf("consumer: training did not complete\n");
    return false;
  }
  const relpos::EvalOptions eval{.lengths = {2, 4, 8},
                                 .sequences_per_length = 16};
  const auto trained = relpos::Evaluate(training.model(), eval);
  relpos::Model loaded = relpos::Model::Load(dir);
  const auto reloaded = relpos::Evaluate(loaded, eval);
  if (trained.size() != 3 || reloaded.size() != 3 || loaded.step() != 5) {
    std::printf("consumer: wrong evaluation size or step\n");
    return false;
  }
  for (size_t i = 0; i < trained.size(); ++i) {
    const double a = trained[i].token_accuracy;
    if (!(a >= 0 && a <= 1) || a != reloaded[i].token_accuracy) {
      std::printf("consumer: accuracy %f at length %lld\n", a,
                  static_cast<long long>(trained[i].length));
      return false;
    }
    std::printf("length %lld: accuracy %.3f, loss %.3f\n",
                static_cast<long long>(trained[i].length), a, trained[i].loss);
  }
  return true;
}

// Scores a tiny corpus: a perfect translation is 100 BLEU and 100 chrF, a
// wrong one less.
bool MetricsWork() {
  const std::vector<std::string> refs = {"Die Datei wurde gespeichert.",
                                         "Fehler: %s"};
  const std::vector<std::string> bad = {"Datei gespeichert.", "Fehler"};
  // (exp(log(100)) is 100 to rounding, as in sacrebleu.)
  if (std::fabs(relpos::CorpusBleu(refs, refs).score - 100.0) > 1e-9 ||
      std::fabs(relpos::CorpusChrf(refs, refs) - 100.0) > 1e-9 ||
      !(relpos::CorpusBleu(bad, refs).score < 100.0)) {
    std::printf("consumer: BLEU / chrF of a perfect corpus is not 100\n");
    return false;
  }
  return true;
}

int main() {
  const int64_t B = 1, H = 2, N = 40, d = 16, k = 4, rows = 2 * k + 1;
  std::vector<float> q(B * H * N * d), kk(q.size()), v(q.size());
  for (size_t t = 0; t < q.size(); ++t) {
    q[t] = std::sin(0.1f * t), kk[t] = std::cos(0.3f * t), v[t] = 1.0f;
  }
  std::vector<float> ak(rows * d), av(rows * d);
  relpos::InitRelativeTable({ak.data(), {rows, d}}, {.seed = 1});
  relpos::InitRelativeTable({av.data(), {rows, d}}, {.seed = 2});

  const relpos::AttentionInputs<float> in{
      .q = {q.data(), {B, H, N, d}}, .k = {kk.data(), {B, H, N, d}},
      .v = {v.data(), {B, H, N, d}}, .ak = {ak.data(), {rows, d}},
      .av = {av.data(), {rows, d}}};
  relpos::AttentionOptions opt;
  opt.max_distance = k;
  opt.causal = true;
  std::vector<float> out(B * H * N * d), lse(B * H * N);
  relpos::AttentionForward<float>(in, {out.data(), {B, H, N, d}},
                                  {lse.data(), {B, H, N}}, opt);

  std::vector<float> dout(out.size(), 1.0f), dq(q.size()), dk(kk.size()),
      dv(v.size()), dak(ak.size()), dav(av.size());
  relpos::AttentionBackward<float>(
      in, {out.data(), {B, H, N, d}}, {lse.data(), {B, H, N}},
      {dout.data(), {B, H, N, d}},
      {.dq = {dq.data(), {B, H, N, d}}, .dk = {dk.data(), {B, H, N, d}},
       .dv = {dv.data(), {B, H, N, d}}, .dak = {dak.data(), {rows, d}},
       .dav = {dav.data(), {rows, d}}},
      opt);

  // Every value row is all ones, so o_i = 1 + sum_j p_ij AV[r(i,j)]; and
  // since each row's probabilities sum to one, dAV's entries sum to
  // (number of rows) x d when dout is all ones.
  double dav_sum = 0;
  for (float x : dav) dav_sum += x;
  if (std::fabs(dav_sum - double(B * H * N * d)) > 1e-3 * B * H * N * d) {
    std::printf("consumer: sum of dAV is %f, want %lld\n", dav_sum,
                static_cast<long long>(B * H * N * d));
    return 1;
  }
  for (float x : out) {
    if (!std::isfinite(x)) {
      std::printf("consumer: non-finite output\n");
      return 1;
    }
  }
  if (!LayerWorks() || !TrainingWorks() || !MetricsWork()) return 1;
  std::printf("relpos %s: consumer ok\n", RELPOS_VERSION_STRING);
  return 0;
}
