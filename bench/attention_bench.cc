// Google Benchmark timings of the attention kernels (SPEC.md section 7,
// docs/benchmarks.md):
//
//   fwd|bwd / vanilla   / n:N        fused path, both relative terms off
//   fwd|bwd / relative  / n:N / k:K  fused path, k in {16, 64}
//   fwd|bwd / reference / n:N / k:K  reference path, n <= 2048 (it is slow)
//   sgemm / size:S                   Sgemm (src/core/gemm.h), the same-run
//                                    yardstick for the machine's peak
//
// B = 1, H = 8, d = 64, n in {256, ..., 8192}. Counter "FLOP" (a rate,
// printed like "FLOP=14.9G/s", i.e. GFLOP/s) uses the
// vanilla FLOP count for every variant (forward 4 B H n^2 d, backward 2.5x),
// so GFLOP/s ratios equal speed ratios. Threads: OpenMP's default, i.e. set
// OMP_NUM_THREADS. Medians: --benchmark_repetitions=5
// --benchmark_report_aggregates_only=true.
#include <omp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/attention_workload.h"
#include "core/gemm.h"
#include "relpos/error.h"

namespace relpos::bench {
namespace {

constexpr int64_t kHeads = 8;
constexpr int64_t kDim = 64;
constexpr int64_t kReferenceMaxN = 2048;

enum class Pass { kForward, kBackward };

// Google Benchmark calls a benchmark function several times while it picks an
// iteration count; generating the inputs (up to 4 x 4M normals) each time
// would dominate the wall time. One workload is cached, so the memory held is
// that of a single problem.
AttentionWorkload& CachedWorkload(Variant variant, int64_t n, int64_t k) {
  static std::unique_ptr<AttentionWorkload> cached;
  static std::tuple<Variant, int64_t, int64_t> key;
  if (!cached || key != std::make_tuple(variant, n, k)) {
    cached.reset();  // free the old problem before allocating the new one
    WorkloadShape shape{.batch = 1, .heads = kHeads, .n = n, .dim = kDim,
                        .max_distance = k};
    cached = std::make_unique<AttentionWorkload>(variant, shape,
                                                 /*threads=*/0);
    key = std::make_tuple(variant, n, k);
  }
  return *cached;
}

void BM_Attention(benchmark::State& state, Pass pass, Variant variant,
                  int64_t n, int64_t k) {
  try {
    AttentionWorkload& w = CachedWorkload(variant, n, k);
    if (pass == Pass::kBackward) w.Forward();  // out and lse for the backward
    for (auto _ : state) {
      if (pass == Pass::kForward) {
        w.Forward();
      } else {
        w.Backward();
      }
    }
    const double flops = pass == Pass::kForward ? ForwardFlops(w.shape())
                                                : BackwardFlops(w.shape());
    // Multiplied by the iterations and divided by the (real) time; printed
    // as e.g. "FLOP=14.9G/s".
    state.counters["FLOP"] = benchmark::Counter(
        flops, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["extra_bytes"] = benchmark::Counter(
        static_cast<double>(w.ExtraBytes()), benchmark::Counter::kDefaults,
        benchmark::Counter::kIs1024);
    // The reference path is single-threaded whatever OpenMP says.
    state.counters["threads"] =
        variant == Variant::kReference ? 1 : omp_get_max_threads();
  } catch (const relpos::Error& e) {
    // e.g. the fused path is not built into this library yet.
    state.SkipWithError(e.what());
  }
}

void BM_Sgemm(benchmark::State& state) {
  const int64_t s = state.range(0);
  std::vector<float> a(s * s, 1.0f), b(s * s, 0.5f), c(s * s);
  for (auto _ : state) {
    Sgemm(Trans::kNo, Trans::kNo, s, s, s, 1.0f, a.data(), s, b.data(), s,
          0.0f, c.data(), s);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP"] = benchmark::Counter(
      2.0 * static_cast<double>(s * s * s),
      benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = omp_get_max_threads();
}

void RegisterAll() {
  benchmark::RegisterBenchmark("sgemm", BM_Sgemm)
      ->Arg(512)
      ->Arg(1024)
      ->ArgName("size")
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  // Forward and backward of one problem are adjacent so they share the
  // cached workload.
  for (int64_t n = 256; n <= 8192; n *= 2) {
    auto add = [n](Variant variant, int64_t k) {
      for (Pass pass : {Pass::kForward, Pass::kBackward}) {
        std::string name = std::string(pass == Pass::kForward ? "fwd" : "bwd") +
                           "/" + VariantName(variant) + "/n:" +
                           std::to_string(n);
        if (variant != Variant::kVanilla) name += "/k:" + std::to_string(k);
        benchmark::RegisterBenchmark(name.c_str(), BM_Attention, pass, variant,
                                     n, k)
            ->UseRealTime()  // multi-threaded: CPU time would overcount
            ->Unit(benchmark::kMillisecond);
      }
    };
    add(Variant::kVanilla, 0);
    for (int64_t k : {16, 64}) add(Variant::kRelative, k);
    if (n <= kReferenceMaxN) {
      for (int64_t k : {16, 64}) add(Variant::kReference, k);
    }
  }
}

}  // namespace
}  // namespace relpos::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  relpos::bench::RegisterAll();
  benchmark::AddCustomContext("flop_convention",
                              "vanilla for every variant: fwd 4*B*H*n*n*d, "
                              "bwd 2.5x fwd");
  benchmark::AddCustomContext("omp_max_threads",
                              std::to_string(omp_get_max_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
