// Google Benchmark timings of the attention kernels (docs/math.md section 7,
// docs/benchmarks.md):
//
//   fwd|bwd / vanilla   / n:N        fused path, both relative terms off
//   fwd|bwd / relative  / n:N / k:K  fused path, k in {16, 64}
//   fwd|bwd / reference / n:N / k:K  reference path, n <= 2048 (it is slow)
//   sgemm / size:S                   Sgemm (src/op/core/gemm.h), the same-run
//                                    yardstick for the machine's peak
//   fwd|bwd / scheme:NAME / h:H / n:N  fused path, one relative scheme of
//                                    docs/math.md section 8 (SchemeCaseWorkload
//                                    below); NAME in vanilla, vanilla_causal,
//                                    alibi, alibi_causal, t5, t5_causal,
//                                    shaw16, shaw64, shaw_asym (64 / 8),
//                                    shaw_log (T5 buckets 32 / 128), xl
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
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

#include "lab/workloads/attention_workload.h"
#include "core/gemm.h"
#include "relpos/attention.h"
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

// ---- relative schemes (docs/math.md section 8) ----------------------------
//
// One fused forward + backward problem of a scheme: B = 1, H heads, n = Nq =
// Nk, d = 64, no padding; t5 is T5's scalar table with 32 buckets, max
// distance 128 (bidirectional, or the causal map under a causal mask), bias
// ~ N(0, 0.25); alibi uses the paper's slopes; no value term for these.
// shaw16 / shaw64 / shaw_asym: Shaw's shared vector tables on both sides
// (N(0, 0.25)) under the symmetric clip 16, 64 or the asymmetric clip 64 / 8
// (w2v-BERT 2.0's reaches); shaw_log: the same tables under T5's
// bidirectional log buckets (32 buckets, max distance 128). xl: Transformer-XL, the vector key term with k
// = 4096 (nothing clipped at these n) and pb ~ N(0, 0.25), no value term. Kept apart from AttentionWorkload (the Shaw variants of
// `relpos bench`) so the timed calls are exactly the public API calls.
struct SchemeSpec {
  const char* name;
  bool causal;
  ScoreTerm term;
  bool key_term;
  // Shaw's vector tables on both sides (shaw, shaw_asym): clip reaches
  // (left == right: the symmetric clip k = left).
  bool shaw = false;
  int64_t left = 0, right = 0;
  // xl: the vector key term only, with the position query bias.
  bool xl = false;
  // shaw_log: the tables under T5 buckets (32, 128) instead of a clip.
  bool log = false;
};

constexpr SchemeSpec kSchemes[] = {
    {"vanilla", false, ScoreTerm::kVector, false},
    {"vanilla_causal", true, ScoreTerm::kVector, false},
    {"alibi", false, ScoreTerm::kAlibi, true},
    {"alibi_causal", true, ScoreTerm::kAlibi, true},
    {"t5", false, ScoreTerm::kScalarTable, true},
    {"t5_causal", true, ScoreTerm::kScalarTable, true},
    {"shaw16", false, ScoreTerm::kVector, true, true, 16, 16},
    {"shaw64", false, ScoreTerm::kVector, true, true, 64, 64},
    {"shaw_asym", false, ScoreTerm::kVector, true, true, 64, 8},
    {"shaw_log", false, ScoreTerm::kVector, true, true, 0, 0, false, true},
    {"xl", false, ScoreTerm::kVector, true, true, 4096, 4096, true},
};

class SchemeCaseWorkload {
 public:
  SchemeCaseWorkload(const SchemeSpec& spec, int64_t heads, int64_t n)
      : heads_(heads), n_(n) {
    o_.path = AttentionPath::kFused;
    o_.causal = spec.causal;
    o_.key_term = spec.key_term;
    o_.value_term = false;
    o_.score_term = spec.term;
    if (spec.term == ScoreTerm::kScalarTable) {
      o_.buckets.kind = BucketKind::kT5;
      o_.buckets.t5 = {32, 128, !spec.causal};
    }
    if (spec.shaw) {
      o_.value_term = !spec.xl;
      o_.position_query_bias = spec.xl;
      o_.max_distance = spec.left;
      if (spec.left != spec.right) {
        o_.buckets.kind = BucketKind::kClip;
        o_.buckets.clip = {spec.left, spec.right};
      }
      rows_ = spec.left + spec.right + 1;
      if (spec.log) {
        o_.buckets.kind = BucketKind::kT5;
        o_.buckets.t5 = {32, 128, true};
        rows_ = 32;
      }
    }
    std::mt19937_64 gen(1);
    std::normal_distribution<float> normal;
    auto fill = [&](std::vector<float>& x, int64_t count, float scale) {
      x.resize(static_cast<size_t>(count));
      for (float& e : x) e = scale * normal(gen);
    };
    const int64_t elements = heads * n * kDim;
    fill(q_, elements, 1.0f);
    fill(k_, elements, 1.0f);
    fill(v_, elements, 1.0f);
    fill(dout_, elements, 1.0f);
    if (spec.key_term && spec.term == ScoreTerm::kScalarTable) {
      fill(bias_, heads * 32, 0.5f);
      dbias_.assign(bias_.size(), 0.0f);
    }
    if (spec.shaw) {  // shared tables, as AttentionWorkload's "relative"
      fill(ak_, rows_ * kDim, 0.5f);
      fill(av_, rows_ * kDim, 0.5f);
      dak_.assign(ak_.size(), 0.0f);
      dav_.assign(av_.size(), 0.0f);
    }
    if (spec.xl) {
      fill(pb_, heads * kDim, 0.5f);
      dpb_.assign(pb_.size(), 0.0f);
      av_.clear();
      dav_.clear();
    }
    out_.assign(elements, 0.0f);
    dq_.assign(elements, 0.0f);
    dk_.assign(elements, 0.0f);
    dv_.assign(elements, 0.0f);
    lse_.assign(heads * n, 0.0f);
  }

  void Forward() {
    AttentionForward<float>(
        Inputs(), TensorView<float>(out_.data(), {1, heads_, n_, kDim}),
        TensorView<float>(lse_.data(), {1, heads_, n_}), o_);
  }
  void Backward() {
    AttentionGrads<float> g;
    g.dq = TensorView<float>(dq_.data(), {1, heads_, n_, kDim});
    g.dk = TensorView<float>(dk_.data(), {1, heads_, n_, kDim});
    g.dv = TensorView<float>(dv_.data(), {1, heads_, n_, kDim});
    if (!bias_.empty())
      g.dbias = TensorView<float>(dbias_.data(), {heads_, 32});
    if (rows_ > 0) g.dak = TensorView<float>(dak_.data(), {rows_, kDim});
    if (!dav_.empty()) g.dav = TensorView<float>(dav_.data(), {rows_, kDim});
    if (!dpb_.empty()) g.dpb = TensorView<float>(dpb_.data(), {heads_, kDim});
    AttentionBackward<float>(
        Inputs(), ConstView<float>(out_.data(), {1, heads_, n_, kDim}),
        ConstView<float>(lse_.data(), {1, heads_, n_}),
        ConstView<float>(dout_.data(), {1, heads_, n_, kDim}), g, o_);
  }

 private:
  AttentionInputs<float> Inputs() const {
    AttentionInputs<float> in;
    in.q = ConstView<float>(q_.data(), {1, heads_, n_, kDim});
    in.k = ConstView<float>(k_.data(), {1, heads_, n_, kDim});
    in.v = ConstView<float>(v_.data(), {1, heads_, n_, kDim});
    if (!bias_.empty()) in.bias = ConstView<float>(bias_.data(), {heads_, 32});
    if (rows_ > 0) in.ak = ConstView<float>(ak_.data(), {rows_, kDim});
    if (!av_.empty()) in.av = ConstView<float>(av_.data(), {rows_, kDim});
    if (!pb_.empty()) in.pb = ConstView<float>(pb_.data(), {heads_, kDim});
    return in;
  }

  int64_t heads_, n_;
  int64_t rows_ = 0;  // Shaw's table rows (0: no tables)
  AttentionOptions o_;
  std::vector<float> q_, k_, v_, dout_, bias_, out_, lse_, dq_, dk_, dv_,
      dbias_, ak_, av_, dak_, dav_, pb_, dpb_;
};

void BM_Scheme(benchmark::State& state, Pass pass, SchemeSpec spec,
               int64_t heads, int64_t n) {
  try {
    SchemeCaseWorkload w(spec, heads, n);
    w.Forward();  // out and lse for the backward; warms the caches
    for (auto _ : state) {
      if (pass == Pass::kForward) {
        w.Forward();
      } else {
        w.Backward();
      }
    }
    WorkloadShape shape{.batch = 1, .heads = heads, .n = n, .dim = kDim,
                        .max_distance = 0};
    state.counters["FLOP"] = benchmark::Counter(
        pass == Pass::kForward ? ForwardFlops(shape) : BackwardFlops(shape),
        benchmark::Counter::kIsIterationInvariantRate);
    state.counters["threads"] = omp_get_max_threads();
  } catch (const relpos::Error& e) {
    state.SkipWithError(e.what());
  }
}

void RegisterSchemes() {
  // H = 8 for timings; H = 1 at n = 2048 for instruction counts under
  // callgrind (bench/scheme_instruction_counts.py), where H = 8 would take
  // many minutes per run.
  const std::pair<int64_t, int64_t> shapes[] = {
      {8, 1024}, {8, 2048}, {8, 4096}, {1, 2048}};
  for (const auto& [heads, n] : shapes) {
    for (const SchemeSpec& spec : kSchemes) {
      for (Pass pass : {Pass::kForward, Pass::kBackward}) {
        const std::string name =
            std::string(pass == Pass::kForward ? "fwd" : "bwd") +
            "/scheme:" + spec.name + "/h:" + std::to_string(heads) +
            "/n:" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), BM_Scheme, pass, spec,
                                     heads, n)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
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
  relpos::bench::RegisterSchemes();
  benchmark::AddCustomContext("flop_convention",
                              "vanilla for every variant: fwd 4*B*H*n*n*d, "
                              "bwd 2.5x fwd");
  benchmark::AddCustomContext("omp_max_threads",
                              std::to_string(omp_get_max_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
