#include "model/nn/multi_head_attention.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "model/nn/linear.h"
#include "model/nn/matmul.h"
#include "base/threads.h"
#include "relpos/position_schemes.h"

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
    XlSinusoidTable(k, d, c->xl_r.data());
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

// Where attention's [B, H, N, dh] tensors live. Two sides: the queries (q,
// attn, lse, dq) and the keys and values (k, v, dk, dv); in self-attention
// they are the same positions, in cross-attention the keys are the
// memory's. Padded layout: one group, the batch in order, padded to each
// side's `length`. Packed layout: the sequences, sorted by query length
// (longest first, ties in batch order), split into at most kMaxGroups
// groups, each padded only to its own longest members (queries and keys
// separately), chosen to minimise the padded query-key pairs plus
// kGroupCost per group. Group g is one [count, H, padded_q, dh] tensor at
// element offset_q of q and attn (offset_q / dh in lse) and one [count, H,
// padded_k, dh] tensor at offset_k of k and v, its sequences in sorted
// order. Self-attention has padded_k == padded_q and offset_k == offset_q,
// so both sides coincide.
struct AttentionLayout {
  struct Side {
    // Per sequence b (batch order): first row in [rows, d_model], valid
    // length, padded length and element offset of its [H, padded, dh]
    // block.
    std::vector<int64_t> row, valid, padded, base;
    int64_t elements = 0;  // size of the side's tensors
  };
  struct Group {
    int64_t count = 0, padded_q = 0, padded_k = 0, offset_q = 0, offset_k = 0;
    std::vector<int64_t> key_lengths;  // [count]
  };
  std::vector<Group> groups;
  Side q, kv;
};

// The rows and valid lengths of one side.
AttentionLayout::Side SideRows(const MhaShape& s) {
  AttentionLayout::Side side;
  const int64_t B = s.batch;
  side.row.assign(B, 0);
  side.valid.assign(B, 0);
  side.padded.assign(B, 0);
  side.base.assign(B, 0);
  for (int64_t b = 0; b < B; ++b) {
    side.valid[b] = s.lengths == nullptr ? s.length : s.lengths[b];
    if (b > 0) side.row[b] = side.row[b - 1] + side.valid[b - 1];
  }
  return side;
}

// Group boundaries over `order` (sorted by query length, longest first):
// ends[g] is one past group g's last. best[g][i] is the least cost of the
// first i sorted sequences in g groups; a group [j, i) costs its count
// times its padded query length (its first member's) times its padded key
// length (the longest in it; the same member's in self-attention). j runs
// downwards so that the key length's maximum grows as it goes; `<=` keeps
// the smallest j among equal costs.
std::vector<int64_t> GroupEnds(const std::vector<int64_t>& order,
                               const AttentionLayout& l) {
  const int64_t B = static_cast<int64_t>(order.size());
  constexpr int64_t kInf = INT64_MAX / 4;
  const int64_t G = std::min<int64_t>(kMaxGroups, B);
  std::vector<std::vector<int64_t>> best(G + 1,
                                         std::vector<int64_t>(B + 1, kInf));
  std::vector<std::vector<int64_t>> from(G + 1, std::vector<int64_t>(B + 1));
  best[0][0] = 0;
  for (int64_t g = 1; g <= G; ++g) {
    for (int64_t i = 1; i <= B; ++i) {
      int64_t nk = 1;
      for (int64_t j = i - 1; j >= g - 1; --j) {  // group = sorted [j, i)
        nk = std::max(nk, l.kv.valid[order[j]]);
        if (best[g - 1][j] >= kInf) continue;
        const int64_t nq = std::max<int64_t>(l.q.valid[order[j]], 1);
        const int64_t c = best[g - 1][j] + (i - j) * nq * nk + kGroupCost;
        if (c <= best[g][i]) {
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
  std::vector<int64_t> ends(g_best);
  for (int64_t g = g_best, i = B; g >= 1; i = from[g][i], --g) {
    ends[g - 1] = i;
  }
  return ends;
}

// `queries` and `keys` are the same shape for self-attention. Packed or
// padded as queries.lengths says (the keys follow: both packed or neither).
// A packed group pads to at least one position on each side, so that no
// attention tensor is empty (a group of empty sequences: its rows see no
// key and output zero).
AttentionLayout MakeLayout(const MhaShape& queries, const MhaShape& keys) {
  AttentionLayout l;
  const int64_t B = queries.batch, dh = queries.head_dim(), H = queries.heads;
  const bool packed = queries.lengths != nullptr;
  l.q = SideRows(queries);
  l.kv = SideRows(keys);
  std::vector<int64_t> order(B);
  for (int64_t b = 0; b < B; ++b) order[b] = b;
  std::vector<int64_t> ends;
  if (!packed || B == 0) {
    if (B > 0) ends.push_back(B);
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return l.q.valid[x] > l.q.valid[y];
    });
    ends = GroupEnds(order, l);
  }
  int64_t first = 0;
  for (int64_t end : ends) {
    AttentionLayout::Group grp;
    grp.count = end - first;
    grp.padded_q = queries.length;
    grp.padded_k = keys.length;
    if (packed) {
      grp.padded_q = std::max<int64_t>(l.q.valid[order[first]], 1);
      grp.padded_k = 1;
      for (int64_t i = first; i < end; ++i) {
        grp.padded_k = std::max(grp.padded_k, l.kv.valid[order[i]]);
      }
    }
    grp.offset_q = l.q.elements;
    grp.offset_k = l.kv.elements;
    for (int64_t i = first; i < end; ++i) {
      const int64_t b = order[i];
      l.q.padded[b] = grp.padded_q;
      l.q.base[b] = l.q.elements + (i - first) * H * grp.padded_q * dh;
      l.kv.padded[b] = grp.padded_k;
      l.kv.base[b] = l.kv.elements + (i - first) * H * grp.padded_k * dh;
      grp.key_lengths.push_back(l.kv.valid[b]);
    }
    l.q.elements += grp.count * H * grp.padded_q * dh;
    l.kv.elements += grp.count * H * grp.padded_k * dh;
    l.groups.push_back(std::move(grp));
    first = end;
  }
  return l;
}

// [rows, H*dh] -> the side's [H, padded, dh] blocks, zeros at padding.
template <typename T>
void SplitHeads(const T* in, T* out, const MhaShape& s,
                const AttentionLayout::Side& l) {
  const int64_t dh = s.head_dim();
#pragma omp parallel for collapse(2) \
    schedule(static) if (s.batch * s.length * s.d_model >= base::kMinParallelWork)
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

// The side's [H, padded, dh] blocks -> [rows, H*dh] (valid positions).
template <typename T>
void MergeHeads(const T* in, T* out, const MhaShape& s,
                const AttentionLayout::Side& l) {
  const int64_t dh = s.head_dim();
#pragma omp parallel for schedule( \
    static) if (s.batch * s.length * s.d_model >= base::kMinParallelWork)
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

// The views of group `grp`: a query-side [count, H, padded_q, dh] tensor
// (q, attn, dq), its lse [count, H, padded_q], or a key-side [count, H,
// padded_k, dh] one (k, v, dk, dv).
// P may be const (a ConstView).
template <typename P>
TensorView<P> QueryView(P* base, int64_t heads, int64_t dh,
                        const AttentionLayout::Group& grp) {
  return TensorView<P>(base + grp.offset_q,
                       {grp.count, heads, grp.padded_q, dh});
}
template <typename P>
TensorView<P> LseView(P* base, int64_t heads, int64_t dh,
                      const AttentionLayout::Group& grp) {
  return TensorView<P>(base + grp.offset_q / dh,
                       {grp.count, heads, grp.padded_q});
}
template <typename P>
TensorView<P> KeyView(P* base, int64_t heads, int64_t dh,
                      const AttentionLayout::Group& grp) {
  return TensorView<P>(base + grp.offset_k,
                       {grp.count, heads, grp.padded_k, dh});
}

// Attention's inputs for group `grp` of the layout.
template <typename T>
AttentionInputs<T> Inputs(const MhaCache<T>& c, const MhaWeights<T>& w,
                          const MhaShape& s, const AttentionOptions& o,
                          const MhaPositions& p,
                          const AttentionLayout::Group& grp) {
  const int64_t dh = s.head_dim();
  AttentionInputs<T> in;
  in.q = QueryView(c.q.data(), s.heads, dh, grp);
  in.k = KeyView(c.k.data(), s.heads, dh, grp);
  in.v = KeyView(c.v.data(), s.heads, dh, grp);
  PositionInputs<T>(w, c, s.heads, dh, o, p, &in);
  return in;
}

// RoPE over the layout's groups (self-attention): q (or dq) at positions
// i + off, k (or dk) at positions j, forward or backward, in place.
template <typename T>
void RopeGroups(bool backward, T* q, T* k, const MhaShape& s,
                const AttentionLayout& l, const AttentionOptions& o,
                const MhaPositions& p) {
  const int64_t off = o.query_offset.value_or(0), dh = s.head_dim();
  for (const AttentionLayout::Group& grp : l.groups) {
    RopeHeads<T>(backward, q + grp.offset_q, grp.count, s.heads, grp.padded_q,
                 dh, off, p);
    RopeHeads<T>(backward, k + grp.offset_k, grp.count, s.heads, grp.padded_k,
                 dh, 0, p);
  }
}

// Over every query row of the layout's groups (padded ones too: their
// outputs are never merged back and their gradients are zero), with the
// row's head h: f(row pointer [dh], h).
template <typename T, typename F>
void ForEachQueryRow(T* q, const MhaShape& s, const AttentionLayout& l, F f) {
  const int64_t dh = s.head_dim();
  for (const AttentionLayout::Group& grp : l.groups) {
    for (int64_t b = 0; b < grp.count; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        T* rows = q + grp.offset_q + (b * s.heads + h) * grp.padded_q * dh;
        for (int64_t n = 0; n < grp.padded_q; ++n) f(rows + n * dh, h);
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

// The gradient buffers of the position inputs for one backward pass: the
// first group writes them, later groups write into scratch and are added.
template <typename T>
struct PositionGrads {
  T *dak = nullptr, *dav = nullptr, *dbias = nullptr, *dpb = nullptr;
  int64_t table_rows = 0, table_size = 0, bias_size = 0, pb_size = 0;
};

template <typename T>
PositionGrads<T> MakePositionGrads(const MhaGrads<T>& g, MhaScratch<T>* scratch,
                                   const MhaShape& s,
                                   const AttentionOptions& options,
                                   const MhaPositions& p, size_t groups) {
  PositionGrads<T> pg;
  const int64_t dh = s.head_dim();
  pg.table_rows = TableRows(options);
  pg.table_size = (options.per_head_tables ? s.heads : 1) * pg.table_rows * dh;
  pg.bias_size = s.heads * pg.table_rows;
  pg.pb_size = s.heads * dh;
  const bool vector =
      options.key_term && options.score_term == ScoreTerm::kVector;
  // XL's table gradient goes to scratch (dW follows); Shaw's to g.rel_k.
  if (vector && p.xl) {
    scratch->dxl_table.resize(pg.table_size);
    pg.dak = scratch->dxl_table.data();
  } else if (vector) {
    pg.dak = g.rel_k;
  }
  pg.dav = options.value_term ? g.rel_v : nullptr;
  if (options.key_term && options.score_term == ScoreTerm::kScalarTable) {
    pg.dbias = g.bias;
  }
  if (options.position_query_bias) {
    scratch->dxl_pb.resize(pg.pb_size);
    pg.dpb = scratch->dxl_pb.data();
  }
  if (groups > 1) {
    if (pg.dak) scratch->dtable_k.resize(pg.table_size);
    if (pg.dav) scratch->dtable_v.resize(pg.table_size);
    if (pg.dbias) scratch->dbias.resize(pg.bias_size);
    if (pg.dpb) scratch->dpb.resize(pg.pb_size);
  }
  return pg;
}

// Differentiates `a = Attention(q, k, v; AK, AV, bias, pb)`, group by
// group, into scratch->dq, dk, dv and the position gradients.
template <typename T>
void AttentionGroupsBackward(const MhaWeights<T>& w, const MhaCache<T>& cache,
                             MhaScratch<T>* scratch, const PositionGrads<T>& pg,
                             const MhaShape& s, const AttentionLayout& layout,
                             const AttentionOptions& options,
                             const MhaPositions& p) {
  const int64_t dh = s.head_dim(), H = s.heads;
  auto table = [&](T* t) {
    return RelativeTableView(t, H, pg.table_rows, dh, options.per_head_tables);
  };
  auto add = [](T* into, const std::vector<T>& from, int64_t n) {
    for (int64_t i = 0; into != nullptr && i < n; ++i) into[i] += from[i];
  };
  for (size_t gi = 0; gi < layout.groups.size(); ++gi) {
    const AttentionLayout::Group& grp = layout.groups[gi];
    const bool first = gi == 0;
    AttentionGrads<T> grads;
    grads.dq = QueryView(scratch->dq.data(), H, dh, grp);
    grads.dk = KeyView(scratch->dk.data(), H, dh, grp);
    grads.dv = KeyView(scratch->dv.data(), H, dh, grp);
    if (pg.dak) grads.dak = table(first ? pg.dak : scratch->dtable_k.data());
    if (pg.dav) grads.dav = table(first ? pg.dav : scratch->dtable_v.data());
    if (pg.dbias) {
      grads.dbias = TensorView<T>(first ? pg.dbias : scratch->dbias.data(),
                                  {H, pg.table_rows});
    }
    if (pg.dpb) {
      grads.dpb = TensorView<T>(first ? pg.dpb : scratch->dpb.data(), {H, dh});
    }
    AttentionBackward<T>(
        Inputs(cache, w, s, options, p, grp),
        QueryView(cache.attn.data(), H, dh, grp),
        LseView(cache.lse.data(), H, dh, grp),
        QueryView<const T>(scratch->dattn.data(), H, dh, grp), grads,
        GroupOptions(options, s, grp));
    if (!first) {
      add(pg.dak, scratch->dtable_k, pg.table_size);
      add(pg.dav, scratch->dtable_v, pg.table_size);
      add(pg.dbias, scratch->dbias, pg.bias_size);
      add(pg.dpb, scratch->dpb, pg.pb_size);
    }
  }
}

// Differentiates XL's `pb = v - u`, `q' = q + u` and `AK_h[r + k] = W_h
// R_{-r}`: dv = dpb; du = sum over rows of dq' - dpb; dW = flat(dAK)^T R.
template <typename T>
void XlBackward(const MhaCache<T>& cache, const MhaGrads<T>& g,
                MhaScratch<T>* scratch, const PositionGrads<T>& pg,
                const MhaShape& s, const AttentionLayout& layout) {
  const int64_t d = s.d_model, dh = s.head_dim();
  const std::vector<T>& dpb = scratch->dxl_pb;
  for (int64_t i = 0; i < pg.pb_size; ++i) {
    g.xl_v[i] = dpb[i];
    g.xl_u[i] = -dpb[i];
  }
  ForEachQueryRow(scratch->dq.data(), s, layout, [&](const T* row, int64_t h) {
    for (int64_t e = 0; e < dh; ++e) g.xl_u[h * dh + e] += row[e];
  });
  const int64_t rows = pg.table_rows;
  scratch->xl_flat.resize(rows * d);
  for (int64_t h = 0; h < s.heads; ++h) {
    for (int64_t row = 0; row < rows; ++row) {
      const T* src = scratch->dxl_table.data() + (h * rows + row) * dh;
      std::copy(src, src + dh, scratch->xl_flat.data() + row * d + h * dh);
    }
  }
  Matmul<T>(Trans::kYes, Trans::kNo, d, d, rows, T(1), scratch->xl_flat.data(),
            d, cache.xl_r.data(), d, T(0), g.xl_w, d);
}

void CheckCross(const MhaShape& queries, const MhaShape& keys,
                const AttentionOptions& o) {
  RELPOS_CHECK_ARG(keys.batch == queries.batch &&
                       keys.d_model == queries.d_model &&
                       keys.heads == queries.heads,
                   "cross-attention: the memory's batch, d_model and heads "
                   "must be the queries' ("
                       << keys.batch << ", " << keys.d_model << ", "
                       << keys.heads << " vs " << queries.batch << ", "
                       << queries.d_model << ", " << queries.heads << ")");
  RELPOS_CHECK_ARG((keys.lengths == nullptr) == (queries.lengths == nullptr),
                   "cross-attention: queries and memory must both be packed "
                   "(lengths given) or both padded");
  RELPOS_CHECK_ARG(!o.key_term && !o.value_term,
                   "cross-attention carries no position term (key_term and "
                   "value_term must be off)");
}

// The forward pass of both kinds: keys and values from `memory` (cross) or
// from x itself (memory == x, keys == queries).
template <typename T>
void AttentionLayerForward(const T* x, const T* memory, const MhaWeights<T>& w,
                           T* y, MhaCache<T>* cache, const MhaShape& s,
                           const MhaShape& ks, const AttentionOptions& options,
                           const MhaPositions& p,
                           const WeightReader<T>* weights = nullptr) {
  // Shapes: x, y [rows, d_model], memory [memory rows, d_model];
  // cache->q/attn and k/v as AttentionLayout says ([B, H, N, dh] when not
  // packed).
  const int64_t rows = s.rows(), kv_rows = ks.rows(), d = s.d_model;
  const int64_t dh = s.head_dim();
  const AttentionLayout layout = MakeLayout(s, ks);
  cache->q.resize(layout.q.elements);
  cache->k.resize(layout.kv.elements);
  cache->v.resize(layout.kv.elements);
  cache->attn.resize(layout.q.elements);
  cache->lse.resize(layout.q.elements / dh);
  // `merged` doubles as the staging buffer of the projections ([rows, d];
  // the keys' [kv rows, d] when larger): it is overwritten with the real
  // merged heads below.
  cache->merged.resize(std::max(rows, kv_rows) * d);
  T* flat = cache->merged.data();
  LinearWith<T>(weights, x, w.wq, w.bq, flat, {rows, d, d});
  SplitHeads<T>(flat, cache->q.data(), s, layout.q);
  LinearWith<T>(weights, memory, w.wk, w.bk, flat, {kv_rows, d, d});
  SplitHeads<T>(flat, cache->k.data(), ks, layout.kv);
  LinearWith<T>(weights, memory, w.wv, w.bv, flat, {kv_rows, d, d});
  SplitHeads<T>(flat, cache->v.data(), ks, layout.kv);
  cache->merged.resize(rows * d);
  // RoPE: q_i <- R_{i+off} q_i, k_j <- R_j k_j (the cache keeps the rotated
  // ones, which attention's backward needs).
  if (p.rope) {
    RopeGroups<T>(false, cache->q.data(), cache->k.data(), s, layout, options,
                  p);
  }
  // XL: q <- q + u; AK_h[r + k] = W_h R_{-r}; pb = v - u.
  if (p.xl) {
    ForEachQueryRow(cache->q.data(), s, layout, [&](T* row, int64_t h) {
      for (int64_t e = 0; e < dh; ++e) row[e] += w.xl_u[h * dh + e];
    });
    XlAttentionTables<T>(w, s.d_model, s.heads, options.max_distance, cache);
  }

  for (const AttentionLayout::Group& grp : layout.groups) {
    AttentionForward<T>(Inputs(*cache, w, s, options, p, grp),
                        QueryView(cache->attn.data(), s.heads, dh, grp),
                        LseView(cache->lse.data(), s.heads, dh, grp),
                        GroupOptions(options, s, grp));
  }

  MergeHeads<T>(cache->attn.data(), cache->merged.data(), s, layout.q);
  LinearWith<T>(weights, cache->merged.data(), w.wo, w.bo, y,
                   {rows, d, d});
}

// The backward pass of both kinds. Self-attention (memory == x): dx = the
// q, k and v paths' sum. Cross-attention: dx = the q path, dmemory += the
// k and v paths.
template <typename T>
void AttentionLayerBackward(const T* x, const T* memory, const MhaWeights<T>& w,
                            const MhaCache<T>& cache, const T* dy, T* dx,
                            T* dmemory, const MhaGrads<T>& g,
                            MhaScratch<T>* scratch, const MhaShape& s,
                            const MhaShape& ks, const AttentionOptions& options,
                            const MhaPositions& p, bool cross) {
  // Shapes: x, dy, dx [rows, d_model]; memory, dmemory [memory rows,
  // d_model].
  const int64_t rows = s.rows(), kv_rows = ks.rows(), d = s.d_model;
  const AttentionLayout layout = MakeLayout(s, ks);
  scratch->flat.resize(std::max(rows, kv_rows) * d);
  scratch->dattn.resize(layout.q.elements);
  scratch->dq.resize(layout.q.elements);
  scratch->dk.resize(layout.kv.elements);
  scratch->dv.resize(layout.kv.elements);
  T* flat = scratch->flat.data();

  // Differentiates `y = merge(a) Wo^T + bo`.
  LinearBackward<T>(cache.merged.data(), w.wo, dy, flat, g.wo, g.bo,
                    {rows, d, d});
  SplitHeads<T>(flat, scratch->dattn.data(), s, layout.q);

  // Differentiates `a = Attention(q, k, v; AK, AV, bias, pb)`, group by
  // group.
  const PositionGrads<T> pg =
      MakePositionGrads(g, scratch, s, options, p, layout.groups.size());
  AttentionGroupsBackward(w, cache, scratch, pg, s, layout, options, p);
  if (p.xl) XlBackward(cache, g, scratch, pg, s, layout);
  // Differentiates the rotations: dq <- R(-p theta) dq', dk likewise.
  if (p.rope) {
    RopeGroups<T>(true, scratch->dq.data(), scratch->dk.data(), s, layout,
                  options, p);
  }

  // Differentiates `q = x Wq^T + bq`, `k = memory Wk^T + bk`, `v = memory
  // Wv^T + bv`.
  MergeHeads<T>(scratch->dq.data(), flat, s, layout.q);
  LinearBackward<T>(x, w.wq, flat, dx, g.wq, g.bq, {rows, d, d});
  T* dkv = cross ? dmemory : dx;
  MergeHeads<T>(scratch->dk.data(), flat, ks, layout.kv);
  LinearBackward<T>(memory, w.wk, flat, dkv, g.wk, g.bk, {kv_rows, d, d},
                    {.accumulate_dx = true});
  MergeHeads<T>(scratch->dv.data(), flat, ks, layout.kv);
  LinearBackward<T>(memory, w.wv, flat, dkv, g.wv, g.bv, {kv_rows, d, d},
                    {.accumulate_dx = true});
}

}  // namespace

template <typename T>
void MultiHeadAttentionForward(const T* x, const MhaWeights<T>& w, T* y,
                               MhaCache<T>* cache, const MhaShape& s,
                               const AttentionOptions& options,
                               const MhaPositions& p,
                               const WeightReader<T>* weights) {
  AttentionLayerForward(x, x, w, y, cache, s, s, options, p, weights);
}

template <typename T>
void MultiHeadAttentionBackward(const T* x, const MhaWeights<T>& w,
                                const MhaCache<T>& cache, const T* dy, T* dx,
                                const MhaGrads<T>& g, MhaScratch<T>* scratch,
                                const MhaShape& s,
                                const AttentionOptions& options,
                                const MhaPositions& p) {
  AttentionLayerBackward(x, x, w, cache, dy, dx, static_cast<T*>(nullptr), g,
                         scratch, s, s, options, p, false);
}

template <typename T>
void CrossAttentionForward(const T* x, const T* memory, const MhaWeights<T>& w,
                           T* y, MhaCache<T>* cache, const MhaShape& queries,
                           const MhaShape& keys,
                           const AttentionOptions& attention) {
  CheckCross(queries, keys, attention);
  AttentionLayerForward(x, memory, w, y, cache, queries, keys, attention,
                        MhaPositions{});
}

template <typename T>
void CrossAttentionBackward(const T* x, const T* memory,
                            const MhaWeights<T>& w, const MhaCache<T>& cache,
                            const T* dy, T* dx, T* dmemory,
                            const MhaGrads<T>& grads, MhaScratch<T>* scratch,
                            const MhaShape& queries, const MhaShape& keys,
                            const AttentionOptions& attention) {
  CheckCross(queries, keys, attention);
  AttentionLayerBackward(x, memory, w, cache, dy, dx, dmemory, grads, scratch,
                         queries, keys, attention, MhaPositions{}, true);
}

#define RELPOS_INSTANTIATE_MHA(T)                                              \
  template void MultiHeadAttentionForward<T>(                                  \
      const T*, const MhaWeights<T>&, T*, MhaCache<T>*, const MhaShape&,       \
      const AttentionOptions&, const MhaPositions&, const WeightReader<T>*);   \
  template void MultiHeadAttentionBackward<T>(                                 \
      const T*, const MhaWeights<T>&, const MhaCache<T>&, const T*, T*,        \
      const MhaGrads<T>&, MhaScratch<T>*, const MhaShape&,                     \
      const AttentionOptions&, const MhaPositions&);                           \
  template void CrossAttentionForward<T>(                                      \
      const T*, const T*, const MhaWeights<T>&, T*, MhaCache<T>*,              \
      const MhaShape&, const MhaShape&, const AttentionOptions&);              \
  template void CrossAttentionBackward<T>(                                     \
      const T*, const T*, const MhaWeights<T>&, const MhaCache<T>&, const T*,  \
      T*, T*, const MhaGrads<T>&, MhaScratch<T>*, const MhaShape&,             \
      const MhaShape&, const AttentionOptions&);
RELPOS_INSTANTIATE_MHA(float)
RELPOS_INSTANTIATE_MHA(double)
#undef RELPOS_INSTANTIATE_MHA

}  // namespace relpos::nn
