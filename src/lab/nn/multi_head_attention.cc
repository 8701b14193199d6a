#include "nn/multi_head_attention.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "nn/linear.h"
#include "nn/matmul.h"
#include "nn/parallel.h"
#include "nn/position_encoding.h"

namespace relpos::nn {

template <typename T>
void RopeHeads(bool backward, T* heads, int64_t count, int64_t h, int64_t n,
               int64_t dh, int64_t position_offset, const MhaPositions& p) {
  // Shapes: heads [count, H, n, dh], rotated in place.
  if (count == 0 || n == 0) return;
  RopeOptions o;
  o.base = p.rope_base;
  o.layout = p.rope_layout;
  o.position_offset = position_offset;
  const TensorView<T> view(heads, {count, h, n, dh});
  if (backward) {
    RopeBackward<T>(view, view, o);
  } else {
    RopeForward<T>(view, view, o);
  }
}

template void RopeHeads<float>(bool, float*, int64_t, int64_t, int64_t, int64_t,
                               int64_t, const MhaPositions&);
template void RopeHeads<double>(bool, double*, int64_t, int64_t, int64_t,
                                int64_t, int64_t, const MhaPositions&);

template <typename T>
void PositionInputs(const MhaWeights<T>& w, const MhaCache<T>& c,
                    int64_t heads, int64_t dh, const AttentionOptions& o,
                    const MhaPositions& p, AttentionInputs<T>* in) {
  const int64_t rows = TableRows(o);
  auto table = [&](const T* t) {
    if (t == nullptr) return ConstView<T>();
    return RelativeTableView(t, heads, rows, dh, o.per_head_tables);
  };
  const bool vector = o.key_term && o.score_term == ScoreTerm::kVector;
  in->ak = vector ? table(p.xl ? c.xl_table.data() : w.rel_k) : ConstView<T>();
  in->av = o.value_term ? table(w.rel_v) : ConstView<T>();
  in->bias = o.key_term && o.score_term == ScoreTerm::kScalarTable
                 ? ConstView<T>(w.bias, {heads, rows})
                 : ConstView<T>();
  in->pb = o.position_query_bias ? ConstView<T>(c.xl_pb.data(), {heads, dh})
                                 : ConstView<T>();
}

template void PositionInputs<float>(const MhaWeights<float>&,
                                    const MhaCache<float>&, int64_t, int64_t,
                                    const AttentionOptions&,
                                    const MhaPositions&,
                                    AttentionInputs<float>*);
template void PositionInputs<double>(const MhaWeights<double>&,
                                     const MhaCache<double>&, int64_t, int64_t,
                                     const AttentionOptions&,
                                     const MhaPositions&,
                                     AttentionInputs<double>*);

template <typename T>
void XlAttentionTables(const MhaWeights<T>& w, int64_t d_model, int64_t heads,
                       int64_t k, MhaCache<T>* c) {
  // Shapes: xl_r [2k+1, d], xl_table [H, 2k+1, dh], xl_pb [H, dh]; the
  // product flat [2k+1, H*dh] = R W^T, then table[h, row, e] =
  // flat[row, h*dh + e].
  const int64_t d = d_model, H = heads, dh = d / heads, rows = 2 * k + 1;
  if (static_cast<int64_t>(c->xl_r.size()) != rows * d) {
    c->xl_r.resize(rows * d);
    XlSinusoidTable<T>(k, d, c->xl_r.data());
  }
  std::vector<T> flat(rows * d);
  Matmul<T>(Trans::kNo, Trans::kYes, rows, d, d, T(1), c->xl_r.data(), d,
            w.xl_w, d, T(0), flat.data(), d);
  c->xl_table.resize(rows * d);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t row = 0; row < rows; ++row) {
      std::copy(flat.data() + row * d + h * dh,
                flat.data() + row * d + (h + 1) * dh,
                c->xl_table.data() + (h * rows + row) * dh);
    }
  }
  c->xl_pb.resize(H * dh);
  for (int64_t i = 0; i < H * dh; ++i) c->xl_pb[i] = w.xl_v[i] - w.xl_u[i];
}

template void XlAttentionTables<float>(const MhaWeights<float>&, int64_t,
                                       int64_t, int64_t, MhaCache<float>*);
template void XlAttentionTables<double>(const MhaWeights<double>&, int64_t,
                                        int64_t, int64_t, MhaCache<double>*);

namespace {

// Per-group cost of one more attention call, in units of query-key pairs
// per head (a sequence padded to n costs n^2): the fixed price of a call
// (threads woken, tiles set up) is a few microseconds, about the work of a
// 48 x 48 sequence at the sizes where grouping pays.
constexpr int64_t kGroupCost = 48 * 48;
constexpr int64_t kMaxGroups = 8;

// Where attention's [B, H, N, dh] tensors live. Padded layout: one group,
// the batch in order, padded to `length`. Packed layout: the sequences,
// sorted by length (longest first, ties in batch order), split into at most
// kMaxGroups groups, each padded only to its own longest member, chosen to
// minimise the padded query-key pairs plus kGroupCost per group. Group g is
// one [count, H, padded, dh] tensor at element `offset` of q, k, v, attn
// (offset / dh in lse), its sequences in sorted order.
struct AttentionLayout {
  struct Group {
    int64_t count = 0, padded = 0, offset = 0;
    std::vector<int64_t> key_lengths;  // [count]
  };
  std::vector<Group> groups;
  // Per sequence b (batch order): first row in [rows, d_model], valid
  // length, padded length and element offset of its [H, padded, dh] block.
  std::vector<int64_t> row, valid, padded, base;
  int64_t elements = 0;  // size of q (and k, v, attn)
};

AttentionLayout MakeLayout(const MhaShape& s) {
  AttentionLayout l;
  const int64_t B = s.batch, dh = s.head_dim();
  l.row.assign(B, 0);
  l.valid.assign(B, 0);
  l.padded.assign(B, 0);
  l.base.assign(B, 0);
  for (int64_t b = 0; b < B; ++b) {
    l.valid[b] = s.lengths == nullptr ? s.length : s.lengths[b];
    if (b > 0) l.row[b] = l.row[b - 1] + l.valid[b - 1];
  }
  std::vector<int64_t> order(B);
  for (int64_t b = 0; b < B; ++b) order[b] = b;
  // Group boundaries over `order`: ends[g] is one past group g's last.
  std::vector<int64_t> ends;
  if (s.lengths == nullptr || B == 0) {
    if (B > 0) ends.push_back(B);
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return l.valid[x] > l.valid[y];
    });
    // best[g][i]: least cost of the first i sorted sequences in g groups
    // (a group's padding is its first, longest member's length).
    constexpr int64_t kInf = INT64_MAX / 4;
    const int64_t G = std::min<int64_t>(kMaxGroups, B);
    std::vector<std::vector<int64_t>> best(G + 1,
                                           std::vector<int64_t>(B + 1, kInf));
    std::vector<std::vector<int64_t>> from(G + 1, std::vector<int64_t>(B + 1));
    best[0][0] = 0;
    for (int64_t g = 1; g <= G; ++g) {
      for (int64_t i = 1; i <= B; ++i) {
        for (int64_t j = g - 1; j < i; ++j) {  // group = sorted [j, i)
          if (best[g - 1][j] >= kInf) continue;
          const int64_t n = std::max<int64_t>(l.valid[order[j]], 1);
          const int64_t c = best[g - 1][j] + (i - j) * n * n + kGroupCost;
          if (c < best[g][i]) {
            best[g][i] = c;
            from[g][i] = j;
          }
        }
      }
    }
    int64_t g_best = 1;
    for (int64_t g = 2; g <= G; ++g) {
      if (best[g][B] < best[g_best][B]) g_best = g;
    }
    ends.resize(g_best);
    for (int64_t g = g_best, i = B; g >= 1; i = from[g][i], --g) {
      ends[g - 1] = i;
    }
  }
  int64_t first = 0;
  for (int64_t end : ends) {
    AttentionLayout::Group grp;
    grp.count = end - first;
    grp.padded = s.lengths == nullptr ? s.length : l.valid[order[first]];
    grp.offset = l.elements;
    for (int64_t i = first; i < end; ++i) {
      const int64_t b = order[i];
      l.padded[b] = grp.padded;
      l.base[b] = l.elements + (i - first) * s.heads * grp.padded * dh;
      grp.key_lengths.push_back(l.valid[b]);
    }
    l.elements += grp.count * s.heads * grp.padded * dh;
    l.groups.push_back(std::move(grp));
    first = end;
  }
  return l;
}

// [rows, H*dh] -> the layout's [H, padded, dh] blocks, zeros at padding.
template <typename T>
void SplitHeads(const T* in, T* out, const MhaShape& s,
                const AttentionLayout& l) {
  const int64_t dh = s.head_dim();
#pragma omp parallel for collapse(2) \
    schedule(static) if (s.batch * s.length * s.d_model >= kMinParallelWork)
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t valid = l.valid[b], padded = l.padded[b];
      T* dst = out + l.base[b] + h * padded * dh;
      for (int64_t n = 0; n < valid; ++n) {
        const T* src = in + (l.row[b] + n) * s.d_model + h * dh;
        std::copy(src, src + dh, dst + n * dh);
      }
      std::fill(dst + valid * dh, dst + padded * dh, T(0));
    }
  }
}

// The layout's [H, padded, dh] blocks -> [rows, H*dh] (valid positions).
template <typename T>
void MergeHeads(const T* in, T* out, const MhaShape& s,
                const AttentionLayout& l) {
  const int64_t dh = s.head_dim();
#pragma omp parallel for schedule( \
    static) if (s.batch * s.length * s.d_model >= kMinParallelWork)
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t n = 0; n < l.valid[b]; ++n) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const T* src = in + l.base[b] + (h * l.padded[b] + n) * dh;
        T* dst = out + (l.row[b] + n) * s.d_model + h * dh;
        std::copy(src, src + dh, dst);
      }
    }
  }
}

// Attention's inputs for group `grp` of the layout, and its options (those
// of the layer with the group's key lengths).
template <typename T>
AttentionInputs<T> Inputs(const MhaCache<T>& c, const MhaWeights<T>& w,
                          const MhaShape& s, const AttentionOptions& o,
                          const MhaPositions& p,
                          const AttentionLayout::Group& grp) {
  const int64_t dh = s.head_dim();
  AttentionInputs<T> in;
  in.q = ConstView<T>(c.q.data() + grp.offset,
                      {grp.count, s.heads, grp.padded, dh});
  in.k = ConstView<T>(c.k.data() + grp.offset,
                      {grp.count, s.heads, grp.padded, dh});
  in.v = ConstView<T>(c.v.data() + grp.offset,
                      {grp.count, s.heads, grp.padded, dh});
  PositionInputs<T>(w, c, s.heads, dh, o, p, &in);
  return in;
}

// RoPE over the layout's groups: q (or dq) at positions i + off, k (or dk)
// at positions j, forward or backward, in place.
template <typename T>
void RopeGroups(bool backward, T* q, T* k, const MhaShape& s,
                const AttentionLayout& l, const AttentionOptions& o,
                const MhaPositions& p) {
  const int64_t off = o.query_offset.value_or(0), dh = s.head_dim();
  for (const AttentionLayout::Group& grp : l.groups) {
    RopeHeads<T>(backward, q + grp.offset, grp.count, s.heads, grp.padded, dh,
                 off, p);
    RopeHeads<T>(backward, k + grp.offset, grp.count, s.heads, grp.padded, dh,
                 0, p);
  }
}

// q[b, h, n, :] += u[h, :] for every row (padded ones too: their outputs are
// never merged back and their gradients are zero).
template <typename T>
void AddQueryBias(const T* u, const MhaShape& s, const AttentionLayout& l,
                  T* q) {
  const int64_t dh = s.head_dim();
  for (const AttentionLayout::Group& grp : l.groups) {
    for (int64_t b = 0; b < grp.count; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        T* dst = q + grp.offset + (b * s.heads + h) * grp.padded * dh;
        for (int64_t n = 0; n < grp.padded; ++n) {
          for (int64_t e = 0; e < dh; ++e) dst[n * dh + e] += u[h * dh + e];
        }
      }
    }
  }
}

// The padded layout keeps the caller's key lengths; a packed group's keys
// are its sequences' valid positions.
AttentionOptions GroupOptions(const AttentionOptions& o, const MhaShape& s,
                              const AttentionLayout::Group& grp) {
  AttentionOptions g = o;
  if (s.lengths != nullptr) g.key_lengths = grp.key_lengths;
  return g;
}

}  // namespace

template <typename T>
void MultiHeadAttentionForward(const T* x, const MhaWeights<T>& w, T* y,
                               MhaCache<T>* cache, const MhaShape& s,
                               const AttentionOptions& options,
                               const MhaPositions& p) {
  // Shapes: x, y [rows, d_model]; cache->q/k/v/attn as AttentionLayout
  // says ([B, H, N, dh] when not packed).
  const int64_t rows = s.rows(), d = s.d_model, dh = s.head_dim();
  const LinearShape proj{rows, d, d};
  const AttentionLayout layout = MakeLayout(s);
  const int64_t n_heads = layout.elements;
  cache->q.resize(n_heads);
  cache->k.resize(n_heads);
  cache->v.resize(n_heads);
  cache->attn.resize(n_heads);
  cache->lse.resize(n_heads / dh);
  cache->merged.resize(rows * d);
  // `merged` doubles as the [rows, d] staging buffer of the projections: it
  // is overwritten with the real merged heads below.
  T* flat = cache->merged.data();
  LinearForward<T>(x, w.wq, w.bq, flat, proj);
  SplitHeads<T>(flat, cache->q.data(), s, layout);
  LinearForward<T>(x, w.wk, w.bk, flat, proj);
  SplitHeads<T>(flat, cache->k.data(), s, layout);
  LinearForward<T>(x, w.wv, w.bv, flat, proj);
  SplitHeads<T>(flat, cache->v.data(), s, layout);
  // RoPE: q_i <- R_{i+off} q_i, k_j <- R_j k_j (the cache keeps the rotated
  // ones, which attention's backward needs).
  if (p.rope) {
    RopeGroups<T>(false, cache->q.data(), cache->k.data(), s, layout, options,
                  p);
  }
  // XL: q <- q + u; AK_h[r + k] = W_h R_{-r}; pb = v - u.
  if (p.xl) {
    AddQueryBias<T>(w.xl_u, s, layout, cache->q.data());
    XlAttentionTables<T>(w, s.d_model, s.heads, options.max_distance, cache);
  }

  for (const AttentionLayout::Group& grp : layout.groups) {
    AttentionForward<T>(Inputs(*cache, w, s, options, p, grp),
                        TensorView<T>(cache->attn.data() + grp.offset,
                                      {grp.count, s.heads, grp.padded, dh}),
                        TensorView<T>(cache->lse.data() + grp.offset / dh,
                                      {grp.count, s.heads, grp.padded}),
                        GroupOptions(options, s, grp));
  }

  MergeHeads<T>(cache->attn.data(), cache->merged.data(), s, layout);
  LinearForward<T>(cache->merged.data(), w.wo, w.bo, y, proj);
}

template <typename T>
void MultiHeadAttentionBackward(const T* x, const MhaWeights<T>& w,
                                const MhaCache<T>& cache, const T* dy, T* dx,
                                const MhaGrads<T>& g, MhaScratch<T>* scratch,
                                const MhaShape& s,
                                const AttentionOptions& options,
                                const MhaPositions& p) {
  // Shapes: x, dy, dx [rows, d_model].
  const int64_t rows = s.rows(), d = s.d_model, dh = s.head_dim();
  const LinearShape proj{rows, d, d};
  const AttentionLayout layout = MakeLayout(s);
  const int64_t n_heads = layout.elements;
  scratch->flat.resize(rows * d);
  scratch->dattn.resize(n_heads);
  scratch->dq.resize(n_heads);
  scratch->dk.resize(n_heads);
  scratch->dv.resize(n_heads);
  T* flat = scratch->flat.data();

  // Differentiates `y = merge(a) Wo^T + bo`.
  LinearBackward<T>(cache.merged.data(), w.wo, dy, flat, g.wo, g.bo, proj);
  SplitHeads<T>(flat, scratch->dattn.data(), s, layout);

  // Differentiates `a = Attention(q, k, v; AK, AV, bias, pb)`, group by
  // group. The first group writes the table gradients, later ones add
  // theirs.
  const int64_t table_rows = TableRows(options);
  const int64_t table_size =
      (options.per_head_tables ? s.heads : 1) * table_rows * dh;
  const int64_t bias_size = s.heads * table_rows, pb_size = s.heads * dh;
  auto table = [&](T* t) {
    if (t == nullptr) return TensorView<T>();
    return RelativeTableView(t, s.heads, table_rows, dh,
                             options.per_head_tables);
  };
  const bool vector =
      options.key_term && options.score_term == ScoreTerm::kVector;
  // XL's table gradient goes to scratch (dW follows); Shaw's to g.rel_k.
  T* dak_out = nullptr;
  if (vector && p.xl) {
    scratch->dxl_table.resize(table_size);
    dak_out = scratch->dxl_table.data();
  } else if (vector) {
    dak_out = g.rel_k;
  }
  T* dav_out = options.value_term ? g.rel_v : nullptr;
  T* dbias_out =
      options.key_term && options.score_term == ScoreTerm::kScalarTable
          ? g.bias
          : nullptr;
  T* dpb_out = nullptr;
  if (options.position_query_bias) {
    scratch->dxl_pb.resize(pb_size);
    dpb_out = scratch->dxl_pb.data();
  }
  if (layout.groups.size() > 1) {
    if (dak_out) scratch->dtable_k.resize(table_size);
    if (dav_out) scratch->dtable_v.resize(table_size);
    if (dbias_out) scratch->dbias.resize(bias_size);
    if (dpb_out) scratch->dpb.resize(pb_size);
  }
  auto add = [](T* into, const std::vector<T>& from, int64_t n) {
    for (int64_t i = 0; into != nullptr && i < n; ++i) into[i] += from[i];
  };
  for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
    const AttentionLayout::Group& grp = layout.groups[gi];
    const bool first = gi == 0;
    AttentionGrads<T> grads;
    grads.dq = TensorView<T>(scratch->dq.data() + grp.offset,
                             {grp.count, s.heads, grp.padded, dh});
    grads.dk = TensorView<T>(scratch->dk.data() + grp.offset,
                             {grp.count, s.heads, grp.padded, dh});
    grads.dv = TensorView<T>(scratch->dv.data() + grp.offset,
                             {grp.count, s.heads, grp.padded, dh});
    if (dak_out) grads.dak = table(first ? dak_out : scratch->dtable_k.data());
    if (dav_out) grads.dav = table(first ? dav_out : scratch->dtable_v.data());
    if (dbias_out) {
      grads.dbias = TensorView<T>(first ? dbias_out : scratch->dbias.data(),
                                  {s.heads, table_rows});
    }
    if (dpb_out) {
      grads.dpb =
          TensorView<T>(first ? dpb_out : scratch->dpb.data(), {s.heads, dh});
    }
    AttentionBackward<T>(Inputs(cache, w, s, options, p, grp),
                         ConstView<T>(cache.attn.data() + grp.offset,
                                      {grp.count, s.heads, grp.padded, dh}),
                         ConstView<T>(cache.lse.data() + grp.offset / dh,
                                      {grp.count, s.heads, grp.padded}),
                         ConstView<T>(scratch->dattn.data() + grp.offset,
                                      {grp.count, s.heads, grp.padded, dh}),
                         grads, GroupOptions(options, s, grp));
    if (!first) {
      add(dak_out, scratch->dtable_k, table_size);
      add(dav_out, scratch->dtable_v, table_size);
      add(dbias_out, scratch->dbias, bias_size);
      add(dpb_out, scratch->dpb, pb_size);
    }
  }

  if (p.xl) {
    // Differentiates `pb = v - u`, `q' = q + u` and `AK_h[r + k] = W_h
    // R_{-r}`: dv = dpb; du = sum over rows of dq' - dpb; dW = flat(dAK)^T R.
    const std::vector<T>& dpb = scratch->dxl_pb;
    for (int64_t i = 0; i < pb_size; ++i) {
      g.xl_v[i] = dpb[i];
      g.xl_u[i] = -dpb[i];
    }
    for (const AttentionLayout::Group& grp : layout.groups) {
      for (int64_t b = 0; b < grp.count; ++b) {
        for (int64_t h = 0; h < s.heads; ++h) {
          const T* src = scratch->dq.data() + grp.offset +
                         (b * s.heads + h) * grp.padded * dh;
          for (int64_t n = 0; n < grp.padded; ++n) {
            for (int64_t e = 0; e < dh; ++e)
              g.xl_u[h * dh + e] += src[n * dh + e];
          }
        }
      }
    }
    const int64_t rows = table_rows;
    scratch->xl_flat.resize(rows * d);
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t row = 0; row < rows; ++row) {
        const T* src = scratch->dxl_table.data() + (h * rows + row) * dh;
        std::copy(src, src + dh, scratch->xl_flat.data() + row * d + h * dh);
      }
    }
    Matmul<T>(Trans::kYes, Trans::kNo, d, d, rows, T(1),
              scratch->xl_flat.data(), d, cache.xl_r.data(), d, T(0), g.xl_w,
              d);
  }
  // Differentiates the rotations: dq <- R(-p theta) dq', dk likewise.
  if (p.rope) {
    RopeGroups<T>(true, scratch->dq.data(), scratch->dk.data(), s, layout,
                  options, p);
  }

  // Differentiates `q = x Wq^T + bq` (and k, v): dx sums all three.
  MergeHeads<T>(scratch->dq.data(), flat, s, layout);
  LinearBackward<T>(x, w.wq, flat, dx, g.wq, g.bq, proj);
  MergeHeads<T>(scratch->dk.data(), flat, s, layout);
  LinearBackward<T>(x, w.wk, flat, dx, g.wk, g.bk, proj,
                    {.accumulate_dx = true});
  MergeHeads<T>(scratch->dv.data(), flat, s, layout);
  LinearBackward<T>(x, w.wv, flat, dx, g.wv, g.bv, proj,
                    {.accumulate_dx = true});
}

template void MultiHeadAttentionForward<float>(
    const float*, const MhaWeights<float>&, float*, MhaCache<float>*,
    const MhaShape&, const AttentionOptions&, const MhaPositions&);
template void MultiHeadAttentionForward<double>(
    const double*, const MhaWeights<double>&, double*, MhaCache<double>*,
    const MhaShape&, const AttentionOptions&, const MhaPositions&);
template void MultiHeadAttentionBackward<float>(
    const float*, const MhaWeights<float>&, const MhaCache<float>&,
    const float*, float*, const MhaGrads<float>&, MhaScratch<float>*,
    const MhaShape&, const AttentionOptions&, const MhaPositions&);
template void MultiHeadAttentionBackward<double>(
    const double*, const MhaWeights<double>&, const MhaCache<double>&,
    const double*, double*, const MhaGrads<double>&, MhaScratch<double>*,
    const MhaShape&, const AttentionOptions&, const MhaPositions&);

}  // namespace relpos::nn
