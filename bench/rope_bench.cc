// Google Benchmark timings of the RoPE op (include/relpos/rope.h), for the
// overhead of `rope` over vanilla attention (docs/benchmarks.md):
//
//   rope/qk/LAYOUT/n:N   RopeForward of q and k plus RopeBackward of dq and
//                        dk: what one attention layer's forward + backward
//                        adds to vanilla fused attention
//                        (attention_bench's fwd + bwd /vanilla/n:N)
//
// B = 1, H = 8, d = 64, n in {512, 2048, 8192}, float (the fast path).
// Threads: OpenMP's default, i.e. set OMP_NUM_THREADS. Counter "bytes" is
// the traffic (each call reads and writes B H n d floats), as a rate.
#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "relpos/rope.h"

namespace relpos {
namespace {

constexpr int64_t kHeads = 8;
constexpr int64_t kDim = 64;

void BM_RopeQk(benchmark::State& state, RopeLayout layout, int64_t n) {
  const int64_t size = kHeads * n * kDim;
  // Any finite data: the op's cost does not depend on the values.
  std::vector<float> q(size, 0.5f), k(size, -0.25f), qr(size), kr(size);
  RopeOptions o;
  o.layout = layout;
  const std::initializer_list<int64_t> shape = {1, kHeads, n, kDim};
  for (auto _ : state) {
    o.position_offset = 0;  // self-attention: off = Nk - Nq = 0
    RopeForward<float>({q.data(), shape}, {qr.data(), shape}, o);
    RopeForward<float>({k.data(), shape}, {kr.data(), shape}, o);
    // The backward of both, in place on the "gradients".
    RopeBackward<float>({qr.data(), shape}, {qr.data(), shape}, o);
    RopeBackward<float>({kr.data(), shape}, {kr.data(), shape}, o);
    benchmark::DoNotOptimize(qr.data());
    benchmark::DoNotOptimize(kr.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes"] = benchmark::Counter(
      4.0 * 2.0 * 4.0 * static_cast<double>(size),
      benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1024);
  state.counters["threads"] = omp_get_max_threads();
}

void RegisterAll() {
  for (int64_t n : {512, 2048, 8192}) {
    for (RopeLayout layout :
         {RopeLayout::kSplitHalves, RopeLayout::kInterleaved}) {
      const std::string name =
          std::string("rope/qk/") +
          (layout == RopeLayout::kSplitHalves ? "split" : "interleaved") +
          "/n:" + std::to_string(n);
      benchmark::RegisterBenchmark(name.c_str(), BM_RopeQk, layout, n)
          ->UseRealTime()  // multi-threaded: CPU time would overcount
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace
}  // namespace relpos

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  relpos::RegisterAll();
  benchmark::AddCustomContext("omp_max_threads",
                              std::to_string(omp_get_max_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
