// Decode throughput of the decoder model (issue 14): the time to produce the
// next-byte distribution of a prefix of n + 1 tokens, with the key/value cache
// (model::DecoderSession: one incremental step with n tokens cached) and
// without it (Forward(ForwardMode::kInference) over the whole prefix, what a
// model without a cache does for every new token). Reported as tokens per
// second (counter `tokens_per_second`); the target is cached >= 20x
// recomputation at n = 2048. Compare the two within one run (the machine may
// be shared): e.g.
//   decode_bench --benchmark_counters_tabular=true
// Model: d_model 512, 8 heads, d_ff 2048, 2 layers, byte vocabulary, decoder;
// positions: Shaw et al.'s relative representations, k = 16, both terms
// (the `relative` benchmarks) or none at all (`none`).
// RELPOS_BENCH_LAYERS / RELPOS_BENCH_D_MODEL / RELPOS_BENCH_HEADS /
// RELPOS_BENCH_D_FF override the model for quick runs.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "base/rng.h"
#include "model/decoder_session.h"
#include "model/transformer.h"

namespace relpos::model {
namespace {

int64_t EnvOr(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoll(v);
}

ModelConfig BenchConfig(PositionScheme position, int64_t max_len) {
  ModelConfig c;
  c.arch = Arch::kDecoder;
  c.vocab_size = 256;
  c.d_model = EnvOr("RELPOS_BENCH_D_MODEL", 512);
  c.heads = EnvOr("RELPOS_BENCH_HEADS", 8);
  c.d_ff = EnvOr("RELPOS_BENCH_D_FF", 2048);
  c.layers = EnvOr("RELPOS_BENCH_LAYERS", 2);
  c.scheme.max_len = max_len;
  c.position = position;
  c.scheme.max_distance = 16;
  c.seed = 1;
  return c;
}

std::vector<int32_t> RandomTokens(int64_t n) {
  Rng rng(3);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.Below(256));
  return t;
}

// One step at cache length n: Step appends token n, then Truncate(n) puts
// the cache back, so every iteration measures the same step.
void BM_DecodeCached(benchmark::State& state, PositionScheme position) {
  const int64_t n = state.range(0);
  const Transformer model(BenchConfig(position, n + 1));
  DecoderSession session(model, 1, n + 1);
  const std::vector<int32_t> tokens = RandomTokens(n + 1);
  std::vector<float> logits;
  session.Append({std::vector<int32_t>(tokens.begin(), tokens.begin() + n)},
                 &logits);
  for (auto _ : state) {
    session.Step({tokens[n]}, &logits);
    benchmark::DoNotOptimize(logits.data());
    session.Truncate(n);
  }
  state.counters["n"] = static_cast<double>(n);
  state.counters["tokens_per_second"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

// The same next-token distribution by the inference forward over all n + 1
// tokens.
void BM_DecodeRecompute(benchmark::State& state, PositionScheme position) {
  const int64_t n = state.range(0);
  Transformer model(BenchConfig(position, n + 1));
  Batch batch;
  batch.batch = 1;
  batch.length = n + 1;
  batch.tokens = RandomTokens(n + 1);
  batch.targets.assign(n + 1, -1);
  batch.lengths = {n + 1};
  for (auto _ : state) {
    model.Forward(batch, ForwardMode::kInference, nullptr);
    benchmark::DoNotOptimize(model.LastLogits().data());
  }
  state.counters["n"] = static_cast<double>(n);
  state.counters["tokens_per_second"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void Lengths(benchmark::internal::Benchmark* b) {
  for (int64_t n : {128, 256, 512, 1024, 2048}) b->Arg(n);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_DecodeCached, relative, PositionScheme::kRelative)
    ->Apply(Lengths);
BENCHMARK_CAPTURE(BM_DecodeRecompute, relative, PositionScheme::kRelative)
    ->Apply(Lengths);
BENCHMARK_CAPTURE(BM_DecodeCached, none, PositionScheme::kNone)
    ->Apply(Lengths);
BENCHMARK_CAPTURE(BM_DecodeRecompute, none, PositionScheme::kNone)
    ->Apply(Lengths);

}  // namespace
}  // namespace relpos::model

BENCHMARK_MAIN();
