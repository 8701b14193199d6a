// One token through a decoder's weights at batch 1: every matrix-vector
// product of a byte LM's decode step (per layer the q, k, v and output
// projections [d, d], the FFN's [4d, d] and [d, 4d]; then the head [256, d]),
// each weight matrix stored [n, k] row-major and read once, as a step of
// `relpos generate` does. Two ways to compute them:
//   gemv        relpos::Gemv (src/op/kernels/gemv.h), the path Sgemm takes
//               for one row;
//   dnnl_sgemm  oneDNN's dnnl_sgemm('N', 'T', 1, n, k, ...), the path every
//               other product takes.
// Arguments: d_model, layers (256 x 4 and 512 x 6, the models of
// docs/benchmarks.md "Generation vs CTranslate2's Generator"). bytes_per_second
// is the weights' bytes over the time. OMP_NUM_THREADS sets the threads. The
// two variants are meant to be interleaved:
//   gemv_bench --benchmark_repetitions=9 --benchmark_enable_random_interleaving
//              --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/gemv.h"

namespace {

struct Product {
  int64_t n, k;
  std::vector<float> w;
};

// The decode step's weight matrices, filled with small deterministic values.
std::vector<Product> DecoderWeights(int64_t d, int64_t layers) {
  std::vector<Product> out;
  auto add = [&](int64_t n, int64_t k) {
    Product p{n, k, std::vector<float>(static_cast<size_t>(n * k))};
    for (size_t i = 0; i < p.w.size(); ++i) {
      p.w[i] = static_cast<float>(static_cast<int64_t>(i % 97) - 48) / 512.0f;
    }
    out.push_back(std::move(p));
  };
  for (int64_t l = 0; l < layers; ++l) {
    for (int proj = 0; proj < 4; ++proj) add(d, d);
    add(4 * d, d);
    add(d, 4 * d);
  }
  add(256, d);
  return out;
}

enum class Path { kGemv, kDnnlSgemm };

void BM_DecodeWeights(benchmark::State& state, Path path) {
  const int64_t d = state.range(0), layers = state.range(1);
  const std::vector<Product> weights = DecoderWeights(d, layers);
  std::vector<float> x(static_cast<size_t>(4 * d), 0.5f);
  std::vector<float> y(static_cast<size_t>(4 * d), 0.0f);
  int64_t bytes = 0;
  for (const Product& p : weights) {
    bytes += p.n * p.k * static_cast<int64_t>(sizeof(float));
  }
  const int threads = omp_get_max_threads();
  for (auto _ : state) {
    for (const Product& p : weights) {
      if (path == Path::kGemv) {
        relpos::Gemv(p.n, p.k, 1.0f, p.w.data(), p.k, x.data(), 0.0f,
                     y.data(), threads);
      } else if (dnnl_sgemm('N', 'T', 1, p.n, p.k, 1.0f, x.data(), p.k,
                            p.w.data(), p.k, 0.0f, y.data(),
                            p.n) != dnnl_success) {
        state.SkipWithError("dnnl_sgemm failed");
        return;
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["threads"] = threads;
  state.SetLabel(path == Path::kGemv ? relpos::GemvTargetName() : "oneDNN");
}

BENCHMARK_CAPTURE(BM_DecodeWeights, gemv, Path::kGemv)
    ->Args({256, 4})
    ->Args({512, 6})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeWeights, dnnl_sgemm, Path::kDnnlSgemm)
    ->Args({256, 4})
    ->Args({512, 6})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
