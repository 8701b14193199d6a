// One token through a decoder's weights at batch 1 (or one token for each of
// `rows` sequences): every product of a byte LM's decode step (per layer the q, k, v and output
// projections [d, d], the FFN's [4d, d] and [d, 4d]; then the head [256, d]),
// each weight matrix stored [n, k] row-major and read once, as a step of
// `relpos generate` does. Four ways to compute them:
//   gemv        relpos::Gemv (src/op/kernels/gemv.h), the path Sgemm takes
//               for one row (rows = 1 only);
//   dnnl_sgemm  oneDNN's dnnl_sgemm('N', 'T', rows, n, k, ...), the path
//               every other float product takes;
//   int8        relpos::Int8Linear (src/op/kernels/int8_linear.h): int8
//               weights, the activations quantized per row inside the call;
//   int8_rowmajor  the same through Highway's row-major kernel, without
//               the packed kernels (AVX-512 VNNI's vpdpwssd, AVX2's
//               vpmaddwd on packed blocks) where the CPU runs them;
//   int8_a8     Int8Linear with 8-bit activations (Int8Activations::k8,
//               `--compute-type int8_a8`): vpdpbusd on AVX-512 VNNI,
//               vpmaddubsw on AVX2;
//   int8_a8_rowmajor  the same 8-bit values through Highway's int16
//               row-major kernel;
//   int8_noamx, int8_a8_noamx  int8 and int8_a8 kept off AMX's tile unit
//               where the CPU has one (AVX-512 VNNI instead, on the same
//               packed weights; Int8LinearAllowAmx(false));
//   dnnl_u8s8   oneDNN's int8 GEMM, dnnl_gemm_u8s8s32 (the activations
//               quantized per row to u8 with a zero point of 128, as
//               CTranslate2 feeds it, timed with the quantization and the
//               int32 -> float scaling).
// Arguments: d_model, layers (256 x 4 and 512 x 6, the models of
// docs/benchmarks.md "Generation vs CTranslate2's Generator"), rows (64:
// a beam-4 step of 16 sentences, for the int8 variants).
// bytes_per_second is the weights' bytes (float32 or int8, as the variant
// reads them) over the time. OMP_NUM_THREADS sets the threads. The variants
// are meant to be interleaved:
//   gemv_bench --benchmark_repetitions=9 --benchmark_enable_random_interleaving
//              --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/gemv.h"
#include "kernels/int8_linear.h"

namespace {

struct Product {
  int64_t n, k;
  std::vector<float> w;
  relpos::Int8Matrix q;  // w quantized per row (kernels/int8_linear.h)
  // q's values row-major [n, q.stride] (q may hold only its packed layout):
  // what oneDNN's int8 GEMM reads.
  std::vector<int8_t> rows;
};

// The decode step's weight matrices, filled with small deterministic values.
std::vector<Product> DecoderWeights(int64_t d, int64_t layers) {
  std::vector<Product> out;
  auto add = [&](int64_t n, int64_t k) {
    Product p{n, k, std::vector<float>(static_cast<size_t>(n * k)), {}, {}};
    for (size_t i = 0; i < p.w.size(); ++i) {
      p.w[i] = static_cast<float>(static_cast<int64_t>(i % 97) - 48) / 512.0f;
    }
    p.q = relpos::QuantizeRows(p.w.data(), n, k, k);
    p.rows.resize(static_cast<size_t>(n * p.q.stride));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < p.q.stride; ++c) {
        p.rows[j * p.q.stride + c] = p.q.Value(j, c);
      }
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

enum class Path {
  kGemv,
  kDnnlSgemm,
  kInt8,
  kInt8RowMajor,
  kInt8A8,
  kInt8A8RowMajor,
  kInt8NoAmx,
  kInt8A8NoAmx,
  kDnnlU8S8
};

// y [m, n] = x [m, k] W^T through oneDNN's int8 GEMM: x quantized per row
// to u8 (zero point 128), W's int8 rows (`rows`: the Int8Matrix's, row stride
// q.stride), int32 sums scaled back to float.
bool DnnlU8S8(int64_t m, const float* x, const relpos::Int8Matrix& q,
              const std::vector<int8_t>& rows, std::vector<uint8_t>* qx, std::vector<float>* sx,
              std::vector<int32_t>* acc, float* y) {
  const int64_t k = q.cols, n = q.rows;
  qx->resize(static_cast<size_t>(m * k));
  sx->resize(static_cast<size_t>(m));
  acc->resize(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::abs(x[r * k + c]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    (*sx)[r] = amax / 127.0f;
    for (int64_t c = 0; c < k; ++c) {
      (*qx)[r * k + c] =
          static_cast<uint8_t>(std::nearbyint(x[r * k + c] * inv) + 128.0f);
    }
  }
  const int32_t co = 0;
  if (dnnl_gemm_u8s8s32('N', 'T', 'F', m, n, k, 1.0f, qx->data(), k, 128,
                        rows.data(), q.stride, 0, 0.0f, acc->data(), n,
                        &co) != dnnl_success) {
    return false;
  }
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      y[r * n + j] = static_cast<float>((*acc)[r * n + j]) * ((*sx)[r] * q.scales[j]);
    }
  }
  return true;
}

void BM_DecodeWeights(benchmark::State& state, Path path) {
  const int64_t d = state.range(0), layers = state.range(1);
  const int64_t m = state.range(2);
  // Before quantizing: the row-major variants keep the row-major layout.
  relpos::Int8LinearAllowPackedForTest(path != Path::kInt8RowMajor &&
                                       path != Path::kInt8A8RowMajor);
  relpos::Int8LinearAllowAmx(path != Path::kInt8NoAmx &&
                             path != Path::kInt8A8NoAmx);
  const std::vector<Product> weights = DecoderWeights(d, layers);
  std::vector<float> x(static_cast<size_t>(m * 4 * d), 0.5f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f + 0.001f * (i % 13);
  std::vector<float> y(static_cast<size_t>(m * 4 * d), 0.0f);
  std::vector<uint8_t> qx;
  std::vector<float> sx;
  std::vector<int32_t> acc;
  const bool int8 = path != Path::kGemv && path != Path::kDnnlSgemm;
  const bool relpos_int8 = int8 && path != Path::kDnnlU8S8;
  const relpos::Int8Activations activations =
      path == Path::kInt8A8 || path == Path::kInt8A8RowMajor ||
              path == Path::kInt8A8NoAmx
          ? relpos::Int8Activations::k8
          : relpos::Int8Activations::k16;
  int64_t bytes = 0;
  for (const Product& p : weights) {
    bytes += p.n * p.k * (int8 ? 1 : static_cast<int64_t>(sizeof(float)));
  }
  const int threads = omp_get_max_threads();
  if (path == Path::kGemv && m != 1) {
    state.SkipWithError("gemv is the one-row path");
    return;
  }
  for (auto _ : state) {
    for (const Product& p : weights) {
      bool ok = true;
      switch (path) {
        case Path::kGemv:
          relpos::Gemv(p.n, p.k, 1.0f, p.w.data(), p.k, x.data(), 0.0f,
                       y.data(), threads);
          break;
        case Path::kDnnlSgemm:
          ok = dnnl_sgemm('N', 'T', m, p.n, p.k, 1.0f, x.data(), p.k,
                          p.w.data(), p.k, 0.0f, y.data(),
                          p.n) == dnnl_success;
          break;
        case Path::kInt8:
        case Path::kInt8RowMajor:
        case Path::kInt8A8:
        case Path::kInt8A8RowMajor:
        case Path::kInt8NoAmx:
        case Path::kInt8A8NoAmx:
          relpos::Int8Linear(m, x.data(), p.k, p.q, nullptr, y.data(), p.n,
                             threads, activations);
          break;
        case Path::kDnnlU8S8:
          ok = DnnlU8S8(m, x.data(), p.q, p.rows, &qx, &sx, &acc, y.data());
          break;
      }
      if (!ok) {
        state.SkipWithError("oneDNN failed");
        return;
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["threads"] = threads;
  state.SetLabel(path == Path::kGemv ? relpos::GemvTargetName()
                 : relpos_int8 ? relpos::Int8LinearTargetName()
                     : "oneDNN");
  relpos::Int8LinearAllowPackedForTest(true);
  relpos::Int8LinearAllowAmx(true);
}

#define RELPOS_DECODE_SIZES(variant, path, ...)          \
  BENCHMARK_CAPTURE(BM_DecodeWeights, variant, path)     \
      __VA_ARGS__->Unit(benchmark::kMillisecond)         \
      ->UseRealTime()

RELPOS_DECODE_SIZES(gemv, Path::kGemv, ->Args({256, 4, 1})->Args({512, 6, 1}));
RELPOS_DECODE_SIZES(dnnl_sgemm, Path::kDnnlSgemm,
                    ->ArgsProduct({{256}, {4}, {1, 4, 16}})
                    ->ArgsProduct({{512}, {6}, {1, 4, 16}}));
RELPOS_DECODE_SIZES(int8, Path::kInt8,
                    ->ArgsProduct({{256}, {4}, {1, 4, 8, 16, 64}})
                    ->ArgsProduct({{512}, {6}, {1, 4, 8, 16, 64}}));
RELPOS_DECODE_SIZES(int8_rowmajor, Path::kInt8RowMajor,
                    ->ArgsProduct({{256}, {4}, {1, 4, 16, 64}})
                    ->ArgsProduct({{512}, {6}, {1, 4, 16, 64}}));
RELPOS_DECODE_SIZES(int8_a8, Path::kInt8A8,
                    ->ArgsProduct({{256}, {4}, {1, 4, 8, 16, 64}})
                    ->ArgsProduct({{512}, {6}, {1, 4, 8, 16, 64}}));
RELPOS_DECODE_SIZES(int8_a8_rowmajor, Path::kInt8A8RowMajor,
                    ->ArgsProduct({{256}, {4}, {1, 4, 16, 64}})
                    ->ArgsProduct({{512}, {6}, {1, 4, 16, 64}}));
RELPOS_DECODE_SIZES(int8_noamx, Path::kInt8NoAmx,
                    ->ArgsProduct({{256}, {4}, {1, 4, 8, 16, 64}})
                    ->ArgsProduct({{512}, {6}, {1, 4, 8, 16, 64}}));
RELPOS_DECODE_SIZES(int8_a8_noamx, Path::kInt8A8NoAmx,
                    ->ArgsProduct({{256}, {4}, {1, 4, 8, 16, 64}})
                    ->ArgsProduct({{512}, {6}, {1, 4, 8, 16, 64}}));
RELPOS_DECODE_SIZES(dnnl_u8s8, Path::kDnnlU8S8,
                    ->ArgsProduct({{256}, {4}, {1, 4, 16, 64}})
                    ->ArgsProduct({{512}, {6}, {1, 4, 16, 64}}));

}  // namespace

BENCHMARK_MAIN();
