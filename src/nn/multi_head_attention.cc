#include "nn/multi_head_attention.h"

#include <algorithm>
#include <vector>

#include "nn/linear.h"
#include "nn/parallel.h"

namespace relpos::nn {
namespace {

// First row of each sequence in the [rows, d_model] layout, [batch + 1]:
// b * length, or the running sum of the lengths when packed.
std::vector<int64_t> RowOffsets(const MhaShape& s) {
  std::vector<int64_t> off(s.batch + 1, 0);
  for (int64_t b = 0; b < s.batch; ++b) {
    off[b + 1] = off[b] + (s.lengths == nullptr ? s.length : s.lengths[b]);
  }
  return off;
}

// [rows, H*dh] -> [B, H, N, dh], zeros at padded positions.
template <typename T>
void SplitHeads(const T* in, T* out, const MhaShape& s) {
  const int64_t dh = s.head_dim();
  const std::vector<int64_t> off = RowOffsets(s);
#pragma omp parallel for collapse(2) \
    schedule(static) if (s.batch * s.length * s.d_model >= kMinParallelWork)
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t valid = off[b + 1] - off[b];
      T* dst = out + (b * s.heads + h) * s.length * dh;
      for (int64_t n = 0; n < valid; ++n) {
        const T* src = in + (off[b] + n) * s.d_model + h * dh;
        std::copy(src, src + dh, dst + n * dh);
      }
      std::fill(dst + valid * dh, dst + s.length * dh, T(0));
    }
  }
}

// [B, H, N, dh] -> [rows, H*dh] (padded positions dropped when packed).
template <typename T>
void MergeHeads(const T* in, T* out, const MhaShape& s) {
  const int64_t dh = s.head_dim();
  const std::vector<int64_t> off = RowOffsets(s);
#pragma omp parallel for schedule( \
    static) if (s.batch * s.length * s.d_model >= kMinParallelWork)
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t valid = off[b + 1] - off[b];
    for (int64_t n = 0; n < valid; ++n) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const T* src = in + ((b * s.heads + h) * s.length + n) * dh;
        T* dst = out + (off[b] + n) * s.d_model + h * dh;
        std::copy(src, src + dh, dst);
      }
    }
  }
}

template <typename T>
AttentionInputs<T> Inputs(const MhaCache<T>& c, const MhaWeights<T>& w,
                          const MhaShape& s, const AttentionOptions& o) {
  const int64_t dh = s.head_dim(), rows = 2 * o.max_distance + 1;
  AttentionInputs<T> in;
  in.q = ConstView<T>(c.q.data(), {s.batch, s.heads, s.length, dh});
  in.k = ConstView<T>(c.k.data(), {s.batch, s.heads, s.length, dh});
  in.v = ConstView<T>(c.v.data(), {s.batch, s.heads, s.length, dh});
  auto table = [&](const T* t) {
    if (t == nullptr) return ConstView<T>();
    return o.per_head_tables ? ConstView<T>(t, {s.heads, rows, dh})
                             : ConstView<T>(t, {rows, dh});
  };
  in.ak = o.key_term ? table(w.rel_k) : ConstView<T>();
  in.av = o.value_term ? table(w.rel_v) : ConstView<T>();
  return in;
}

}  // namespace

template <typename T>
void MultiHeadAttentionForward(const T* x, const MhaWeights<T>& w, T* y,
                               MhaCache<T>* cache, const MhaShape& s,
                               const AttentionOptions& options) {
  // Shapes: x, y [rows, d_model]; cache->q/k/v/attn [B, H, N, dh].
  const int64_t rows = s.rows(), d = s.d_model;
  const int64_t n_heads = s.batch * s.length * d;
  const LinearShape proj{rows, d, d};
  cache->q.resize(n_heads);
  cache->k.resize(n_heads);
  cache->v.resize(n_heads);
  cache->attn.resize(n_heads);
  cache->lse.resize(s.batch * s.heads * s.length);
  cache->merged.resize(rows * d);
  // `merged` doubles as the [B*N, d] staging buffer of the projections: it
  // is overwritten with the real merged heads below.
  T* flat = cache->merged.data();
  LinearForward<T>(x, w.wq, w.bq, flat, proj);
  SplitHeads<T>(flat, cache->q.data(), s);
  LinearForward<T>(x, w.wk, w.bk, flat, proj);
  SplitHeads<T>(flat, cache->k.data(), s);
  LinearForward<T>(x, w.wv, w.bv, flat, proj);
  SplitHeads<T>(flat, cache->v.data(), s);

  const int64_t dh = s.head_dim();
  AttentionForward<T>(
      Inputs(*cache, w, s, options),
      TensorView<T>(cache->attn.data(), {s.batch, s.heads, s.length, dh}),
      TensorView<T>(cache->lse.data(), {s.batch, s.heads, s.length}), options);

  MergeHeads<T>(cache->attn.data(), cache->merged.data(), s);
  LinearForward<T>(cache->merged.data(), w.wo, w.bo, y, proj);
}

template <typename T>
void MultiHeadAttentionBackward(const T* x, const MhaWeights<T>& w,
                                const MhaCache<T>& cache, const T* dy, T* dx,
                                const MhaGrads<T>& g, MhaScratch<T>* scratch,
                                const MhaShape& s,
                                const AttentionOptions& options) {
  // Shapes: x, dy, dx [rows, d_model].
  const int64_t rows = s.rows(), d = s.d_model, dh = s.head_dim();
  const int64_t n_heads = s.batch * s.length * d;
  const LinearShape proj{rows, d, d};
  scratch->flat.resize(rows * d);
  scratch->dattn.resize(n_heads);
  scratch->dq.resize(n_heads);
  scratch->dk.resize(n_heads);
  scratch->dv.resize(n_heads);
  T* flat = scratch->flat.data();

  // Differentiates `y = merge(a) Wo^T + bo`.
  LinearBackward<T>(cache.merged.data(), w.wo, dy, flat, g.wo, g.bo, proj);
  SplitHeads<T>(flat, scratch->dattn.data(), s);

  // Differentiates `a = Attention(q, k, v; AK, AV)`.
  const int64_t table_rows = 2 * options.max_distance + 1;
  auto table = [&](T* t) {
    if (t == nullptr) return TensorView<T>();
    return options.per_head_tables ? TensorView<T>(t, {s.heads, table_rows, dh})
                                   : TensorView<T>(t, {table_rows, dh});
  };
  AttentionGrads<T> grads;
  grads.dq =
      TensorView<T>(scratch->dq.data(), {s.batch, s.heads, s.length, dh});
  grads.dk =
      TensorView<T>(scratch->dk.data(), {s.batch, s.heads, s.length, dh});
  grads.dv =
      TensorView<T>(scratch->dv.data(), {s.batch, s.heads, s.length, dh});
  grads.dak = options.key_term ? table(g.rel_k) : TensorView<T>();
  grads.dav = options.value_term ? table(g.rel_v) : TensorView<T>();
  AttentionBackward<T>(
      Inputs(cache, w, s, options),
      ConstView<T>(cache.attn.data(), {s.batch, s.heads, s.length, dh}),
      ConstView<T>(cache.lse.data(), {s.batch, s.heads, s.length}),
      ConstView<T>(scratch->dattn.data(), {s.batch, s.heads, s.length, dh}),
      grads, options);

  // Differentiates `q = x Wq^T + bq` (and k, v): dx sums all three.
  MergeHeads<T>(scratch->dq.data(), flat, s);
  LinearBackward<T>(x, w.wq, flat, dx, g.wq, g.bq, proj);
  MergeHeads<T>(scratch->dk.data(), flat, s);
  LinearBackward<T>(x, w.wk, flat, dx, g.wk, g.bk, proj,
                    {.accumulate_dx = true});
  MergeHeads<T>(scratch->dv.data(), flat, s);
  LinearBackward<T>(x, w.wv, flat, dx, g.wv, g.bv, proj,
                    {.accumulate_dx = true});
}

template void MultiHeadAttentionForward<float>(const float*,
                                               const MhaWeights<float>&, float*,
                                               MhaCache<float>*,
                                               const MhaShape&,
                                               const AttentionOptions&);
template void MultiHeadAttentionForward<double>(const double*,
                                                const MhaWeights<double>&,
                                                double*, MhaCache<double>*,
                                                const MhaShape&,
                                                const AttentionOptions&);
template void MultiHeadAttentionBackward<float>(
    const float*, const MhaWeights<float>&, const MhaCache<float>&,
    const float*, float*, const MhaGrads<float>&, MhaScratch<float>*,
    const MhaShape&, const AttentionOptions&);
template void MultiHeadAttentionBackward<double>(
    const double*, const MhaWeights<double>&, const MhaCache<double>&,
    const double*, double*, const MhaGrads<double>&, MhaScratch<double>*,
    const MhaShape&, const AttentionOptions&);

}  // namespace relpos::nn
