// One training step (Transformer::ForwardBackward) of the reference
// model, relative position representations vs none (and, BM_Seq2seqTrainStep,
// of a small translation model):
//   d_model = 512, 8 heads, k = 16, sequence 512, batch 4, d_ff 2048,
//   2 layers, byte vocabulary (256).
// The target (docs/math.md section 6) is <= 3% overhead for the relative model.
// Compare the medians of the two benchmarks as a ratio (the machine is often
// shared): e.g.
//   train_step_bench --benchmark_repetitions=5
//                    --benchmark_report_aggregates_only=true
// Environment: RELPOS_BENCH_LAYERS / RELPOS_BENCH_BATCH / RELPOS_BENCH_SEQ
// override the defaults for quick runs, and RELPOS_BENCH_D_MODEL / _HEADS /
// _D_FF / _VOCAB / _K / _DECODER (0 or 1) the model. RELPOS_BENCH_LENGTHS, a
// comma-separated list of one valid length per sequence (the batch size is
// its count, the padded length its maximum unless RELPOS_BENCH_SEQ is
// larger), gives a padded batch like the trainer's; bench/train_step_torch.py
// drives it that way next to the same model in PyTorch.
// BM_Seq2seqTrainStep also reads RELPOS_BENCH_S2S_SOURCE_LENGTHS and
// _TARGET_LENGTHS (one length per pair each), RELPOS_BENCH_DROPOUT and
// RELPOS_BENCH_S2S_OPTIMIZER (1: each step also clips and takes the trainer's
// AdamW update); bench/train_step_seq2seq.py drives it that way next to
// OpenNMT-py and eole.
// RELPOS_BENCH_MAX_ISA=avx2 runs the step as an AVX2 machine would: Highway's
// AVX-512 targets are disabled before anything dispatches, and oneDNN is
// capped with ONEDNN_MAX_CPU_ISA=AVX2 unless that is already set. The
// targets used are printed in the benchmark's context (hwy_target,
// onednn_max_isa).
#include <benchmark/benchmark.h>
#include <hwy/targets.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "base/rng.h"
#include "kernels/fused_attention.h"
#include "model/transformer.h"
#include "relpos/attention.h"
#include "train/optimizer.h"

namespace relpos::model {
namespace {

int64_t EnvOr(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoll(v);
}

// A comma-separated list of numbers (RELPOS_BENCH_LENGTHS by default);
// empty when unset.
std::vector<int64_t> EnvLengths(const char* name = "RELPOS_BENCH_LENGTHS") {
  std::vector<int64_t> out;
  const char* v = std::getenv(name);
  if (v == nullptr) return out;
  std::stringstream in(v);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(std::atoll(item.c_str()));
  }
  return out;
}

void BM_TrainStep(benchmark::State& state, PositionScheme position) {
  ModelConfig c;
  c.arch =
      EnvOr("RELPOS_BENCH_DECODER", 0) != 0 ? Arch::kDecoder : Arch::kEncoder;
  c.vocab_size = EnvOr("RELPOS_BENCH_VOCAB", 256);
  c.d_model = EnvOr("RELPOS_BENCH_D_MODEL", 512);
  c.heads = EnvOr("RELPOS_BENCH_HEADS", 8);
  c.layers = EnvOr("RELPOS_BENCH_LAYERS", 2);
  c.d_ff = EnvOr("RELPOS_BENCH_D_FF", 2048);
  c.position = position;
  c.scheme.max_distance = EnvOr("RELPOS_BENCH_K", 16);
  c.scheme.max_len = 4096;
  c.seed = 1;
  Transformer model(c);
  Batch b;
  std::vector<int64_t> lengths = EnvLengths();
  b.batch = lengths.empty() ? EnvOr("RELPOS_BENCH_BATCH", 4)
                            : static_cast<int64_t>(lengths.size());
  b.length = EnvOr("RELPOS_BENCH_SEQ", 512);
  if (!lengths.empty()) {
    b.length = std::max(EnvOr("RELPOS_BENCH_SEQ", 0),
                        *std::max_element(lengths.begin(), lengths.end()));
  } else {
    lengths.assign(b.batch, b.length);
  }
  Rng data(7);
  for (int64_t s = 0; s < b.batch; ++s) {
    for (int64_t i = 0; i < b.length; ++i) {
      const bool valid = i < lengths[s];
      b.tokens.push_back(valid ? static_cast<int32_t>(data.Below(c.vocab_size))
                               : 0);
      b.targets.push_back(valid ? static_cast<int32_t>(data.Below(c.vocab_size))
                                : -1);
    }
  }
  b.lengths = lengths;
  Rng rng(3);
  model.ForwardBackward(b, rng, nullptr);  // warm-up: allocations
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.ForwardBackward(b, rng, nullptr));
  }
  state.counters["threads"] = omp_get_max_threads();
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(b.batch * b.length), benchmark::Counter::kIsRate);
}

// The seq2seq batch: RELPOS_BENCH_S2S_SOURCE_LENGTHS / _TARGET_LENGTHS when
// both are set (one length per pair), else RELPOS_BENCH_S2S_PAIRS pairs of
// the default lengths; random tokens below `vocab`, padded per side.
Batch Seq2seqBatch(int64_t vocab) {
  Batch b;
  Rng data(7);
  std::vector<int64_t> src = EnvLengths("RELPOS_BENCH_S2S_SOURCE_LENGTHS");
  std::vector<int64_t> tgt = EnvLengths("RELPOS_BENCH_S2S_TARGET_LENGTHS");
  if (src.empty() || src.size() != tgt.size()) {
    b.batch = EnvOr("RELPOS_BENCH_S2S_PAIRS", 112);
    src.resize(b.batch);
    tgt.resize(b.batch);
    for (int64_t s = 0; s < b.batch; ++s) {
      src[s] = 4 + static_cast<int64_t>(data.Below(25));
      tgt[s] = (12 * src[s] + 5) / 10;
    }
  }
  b.batch = static_cast<int64_t>(src.size());
  b.source_length = *std::max_element(src.begin(), src.end());
  b.length = *std::max_element(tgt.begin(), tgt.end());
  for (int64_t s = 0; s < b.batch; ++s) {
    for (int64_t i = 0; i < b.source_length; ++i) {
      b.source_tokens.push_back(
          i < src[s] ? static_cast<int32_t>(data.Below(vocab)) : 0);
    }
    for (int64_t i = 0; i < b.length; ++i) {
      const bool valid = i < tgt[s];
      b.tokens.push_back(valid ? static_cast<int32_t>(data.Below(vocab)) : 0);
      b.targets.push_back(valid ? static_cast<int32_t>(data.Below(vocab)) : -1);
    }
  }
  b.lengths = tgt;
  b.source_lengths = src;
  return b;
}

// One training step of the translation model the evidence runs plan:
// seq2seq, d_model 256, 4 heads, d_ff 1024, 3 + 3 blocks, a shared
// vocabulary of 8000 (SentencePiece's default size here), dropout 0.1,
// label smoothing 0.1, on a batch of RELPOS_BENCH_S2S_PAIRS pairs (112)
// whose source lengths are uniform in [4, 28] and targets 1.2 times as long
// (about 4000 source + target tokens). RELPOS_BENCH_D_MODEL, _HEADS, _D_FF,
// _LAYERS, _VOCAB and _K override the model as above,
// RELPOS_BENCH_S2S_SOURCE_LENGTHS / _TARGET_LENGTHS the lengths,
// RELPOS_BENCH_DROPOUT the dropout, and RELPOS_BENCH_S2S_OPTIMIZER=1 adds the
// trainer's gradient norm, clipping and AdamW update (weight decay 0: Adam)
// to every step.
void BM_Seq2seqTrainStep(benchmark::State& state, PositionScheme position) {
  ModelConfig c;
  c.arch = Arch::kSeq2seq;
  c.vocab_size = EnvOr("RELPOS_BENCH_VOCAB", 8000);
  c.d_model = EnvOr("RELPOS_BENCH_D_MODEL", 256);
  c.heads = EnvOr("RELPOS_BENCH_HEADS", 4);
  c.layers = EnvOr("RELPOS_BENCH_LAYERS", 3);
  c.d_ff = EnvOr("RELPOS_BENCH_D_FF", 1024);
  c.position = position;
  c.scheme.max_distance = EnvOr("RELPOS_BENCH_K", 16);
  const char* dropout = std::getenv("RELPOS_BENCH_DROPOUT");
  c.dropout = dropout == nullptr ? 0.1 : std::atof(dropout);
  c.seed = 1;
  Transformer model(c);
  model.set_label_smoothing(0.1);
  const Batch b = Seq2seqBatch(c.vocab_size);
  int64_t tokens = 0;
  for (int64_t s = 0; s < b.batch; ++s)
    tokens += b.source_lengths[s] + b.lengths[s];
  const bool optimize = EnvOr("RELPOS_BENCH_S2S_OPTIMIZER", 0) != 0;
  std::vector<int64_t> sizes;
  for (const Parameter& p : model.parameters()) sizes.push_back(p.numel());
  train::AdamWConfig adam;
  adam.weight_decay = 0.0;
  train::AdamW optimizer(adam, sizes);
  auto step = [&](Rng& rng) {
    const float loss = model.ForwardBackward(b, rng, nullptr);
    if (optimize) {
      std::vector<train::ParamSlot> slots;
      for (Parameter& p : model.parameters()) {
        slots.push_back({std::span<float>(p.value),
                         std::span<const float>(p.grad), p.decay});
      }
      optimizer.Step(slots, 1e-4,
                     train::ClipScale(train::GradNorm(slots), 5.0));
    }
    return loss;
  };
  Rng rng(3);
  step(rng);  // warm-up: allocations
  for (auto _ : state) benchmark::DoNotOptimize(step(rng));
  state.counters["threads"] = omp_get_max_threads();
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["parameters"] = static_cast<double>(model.NumParameters());
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens),
                                                  benchmark::Counter::kIsRate);
}

// The attention part alone (forward + backward of one layer's attention at
// the same shape, through the public API with AttentionPath::kAuto), to
// attribute the training step's overhead: a step runs this once per layer.
void BM_AttentionStep(benchmark::State& state, bool relative) {
  const int64_t B = EnvOr("RELPOS_BENCH_BATCH", 4);
  const int64_t N = EnvOr("RELPOS_BENCH_SEQ", 512);
  const int64_t H = 8, dh = 64, k = 16, rows = 2 * k + 1;
  Rng rng(5);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(rng.Normal());
    return v;
  };
  const std::vector<float> q = random(B * H * N * dh),
                           kk = random(B * H * N * dh),
                           v = random(B * H * N * dh),
                           dout = random(B * H * N * dh),
                           ak = random(rows * dh), av = random(rows * dh);
  std::vector<float> out(B * H * N * dh), lse(B * H * N), dq(q.size()),
      dk(q.size()), dv(q.size()), dak(ak.size()), dav(av.size());
  AttentionOptions o;
  o.max_distance = relative ? k : 0;
  o.key_term = o.value_term = relative;
  o.key_lengths.assign(B, N);
  AttentionInputs<float> in;
  in.q = ConstView<float>(q.data(), {B, H, N, dh});
  in.k = ConstView<float>(kk.data(), {B, H, N, dh});
  in.v = ConstView<float>(v.data(), {B, H, N, dh});
  AttentionGrads<float> g;
  g.dq = TensorView<float>(dq.data(), {B, H, N, dh});
  g.dk = TensorView<float>(dk.data(), {B, H, N, dh});
  g.dv = TensorView<float>(dv.data(), {B, H, N, dh});
  if (relative) {
    in.ak = ConstView<float>(ak.data(), {rows, dh});
    in.av = ConstView<float>(av.data(), {rows, dh});
    g.dak = TensorView<float>(dak.data(), {rows, dh});
    g.dav = TensorView<float>(dav.data(), {rows, dh});
  }
  for (auto _ : state) {
    AttentionForward<float>(in, TensorView<float>(out.data(), {B, H, N, dh}),
                            TensorView<float>(lse.data(), {B, H, N}), o);
    AttentionBackward<float>(in, ConstView<float>(out.data(), {B, H, N, dh}),
                             ConstView<float>(lse.data(), {B, H, N}),
                             ConstView<float>(dout.data(), {B, H, N, dh}), g,
                             o);
    benchmark::DoNotOptimize(dq.data());
  }
}

BENCHMARK_CAPTURE(BM_AttentionStep, none, false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionStep, relative, true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, none, PositionScheme::kNone)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, relative, PositionScheme::kRelative)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// The rest of the family at its default settings (docs/model.md).
BENCHMARK_CAPTURE(BM_TrainStep, shaw_asym, PositionScheme::kShawAsym)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, shaw_log, PositionScheme::kShawLog)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, t5, PositionScheme::kT5)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, alibi, PositionScheme::kAlibi)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, rope, PositionScheme::kRope)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStep, xl, PositionScheme::kXl)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// CPU time: the whole process's (every thread), as the peers' side of
// bench/train_step_seq2seq.py measures it.
BENCHMARK_CAPTURE(BM_Seq2seqTrainStep, seq2seq_shaw, PositionScheme::kShaw)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Seq2seqTrainStep, seq2seq_sinusoidal,
                  PositionScheme::kSinusoidal)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// RELPOS_BENCH_MAX_ISA: "avx2" or unset (every target the CPU has).
// Returns false on any other value.
bool ApplyMaxIsa() {
  const char* isa = std::getenv("RELPOS_BENCH_MAX_ISA");
  if (isa != nullptr && std::string(isa) == "avx2") {
    hwy::DisableTargets(HWY_AVX3 | HWY_AVX3_DL);
    ::setenv("ONEDNN_MAX_CPU_ISA", "AVX2", /*overwrite=*/0);
  } else if (isa != nullptr && *isa != '\0') {
    return false;
  }
  // Highway 1.0's SupportedTargets() points the dispatch at every target the
  // CPU has before it applies DisableTargets' mask, so the masked set is
  // given to the dispatch again afterwards.
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  // The target the fused attention kernel dispatches to.
  benchmark::AddCustomContext("hwy_target", FusedTargetName());
  const char* onednn = std::getenv("ONEDNN_MAX_CPU_ISA");
  benchmark::AddCustomContext("onednn_max_isa",
                              onednn == nullptr ? "(all)" : onednn);
  return true;
}

}  // namespace
}  // namespace relpos::model

int main(int argc, char** argv) {
  if (!relpos::model::ApplyMaxIsa()) {
    std::fprintf(stderr,
                 "train_step_bench: RELPOS_BENCH_MAX_ISA must be avx2 or "
                 "unset\n");
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
