// Driver of the fused relative-attention kernel (docs/math.md section 4): splits
// the work into (batch, head, query tile) items for OpenMP, owns every
// allocation, and calls the per-target SIMD bodies of fused_attention-inl.h
// through Highway's dynamic dispatch (hwy/examples/skeleton.cc recipe: this
// file re-includes itself once per target).
#include "kernels/fused_attention.h"

#include "kernels/few_query.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fused_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/fused_attention-inl.h"
#include "kernels/few_query-inl.h"

HWY_BEFORE_NAMESPACE();
namespace relpos {
namespace HWY_NAMESPACE {

// Exported wrappers (HWY_EXPORT needs a function in HWY_NAMESPACE).
void ForwardTile(const AttentionProblem& p, const fused::QueryTile& t,
                 const fused::HeadData& hd, float* scratch) {
  fused_simd::ForwardQueryTile(p, t, hd, scratch);
}
void BackwardTile(const AttentionProblem& p, const fused::QueryTile& t,
                  const fused::HeadData& hd, float* scratch,
                  int64_t key_tile_first, int64_t key_tile_step) {
  fused_simd::BackwardQueryTile(p, t, hd, scratch, key_tile_first,
                                key_tile_step);
}
void FewQueryPass(const AttentionProblem& p, const fused::FewPass& fp,
                  float* scratch) {
  fused_simd::FewQueryPassBody(p, fp, scratch);
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "base/threads.h"
#include "hwy/aligned_allocator.h"

namespace relpos {

HWY_EXPORT(ForwardTile);
HWY_EXPORT(BackwardTile);
HWY_EXPORT(TargetName);
HWY_EXPORT(FewQueryPass);

namespace {

using fused::HeadData;
using fused::QueryTile;

// Per-thread scratch rounded up to 64 bytes so threads never share a line.
int64_t PaddedFloats(int64_t floats) { return (floats + 15) / 16 * 16; }

hwy::AlignedFreeUniquePtr<float[]> AllocateFloats(int64_t n, const char* what) {
  auto buf =
      hwy::AllocateAligned<float>(static_cast<size_t>(std::max<int64_t>(n, 1)));
  if (!buf)
    RELPOS_THROW(Error, "fused attention: cannot allocate "
                            << n * 4 << " bytes for " << what);
  return buf;
}

// The per-thread buffers of one pass: per thread, `scratch` floats for the
// tile bodies (already padded), then `acc` floats of accumulators, the
// block padded to whole cache lines. Only the accumulators are zeroed: the
// tile bodies write the rest of their scratch before reading it.
class ThreadBuffers {
 public:
  ThreadBuffers(int threads, int64_t scratch, int64_t acc, const char* what)
      : per_thread_(PaddedFloats(scratch + acc)),
        scratch_(scratch),
        buf_(AllocateFloats(per_thread_ * threads, what)) {
    for (int th = 0; th < threads; ++th)
      std::fill(Acc(th), Acc(th) + acc, 0.0f);
  }
  int64_t per_thread() const { return per_thread_; }
  float* Scratch(int thread) const {
    return buf_.get() + per_thread_ * thread;
  }
  float* Acc(int thread) const { return Scratch(thread) + scratch_; }

 private:
  int64_t per_thread_, scratch_;
  hwy::AlignedFreeUniquePtr<float[]> buf_;
};

// The backward pass splits each (batch, key/value head) into `chunks`
// interleaved sets of KEY tiles only when there are fewer such pairs than
// threads. Each chunk owns its keys' dK / dV rows outright; chunk 0 writes
// dQ in place and chunk c > 0 a private partial dQ (Nq x dk) per query
// head, summed in chunk order afterwards.
int64_t BackwardChunks(const AttentionProblem& p, int threads) {
  const int64_t pairs = p.batch * p.kv_heads;
  if (pairs == 0 || pairs >= threads) return 1;  // 0: nothing to split
  const int64_t want = (threads + pairs - 1) / pairs;
  const int64_t key_tiles = (p.k_len + fused::kKeyTile - 1) / fused::kKeyTile;
  return std::max<int64_t>(1, std::min(want, key_tiles));
}

struct BackwardLayout {
  int64_t chunks = 1;
  fused::BucketRange range;
  int64_t table_heads = 1;
  int64_t scratch_floats = 0;  // per thread, padded
  int64_t dak_floats = 0;      // per thread
  int64_t dav_floats = 0;      // per thread
  int64_t dbias_floats = 0;    // per thread: H x nb (scalar score table)
  int64_t dpb_floats = 0;      // per thread: H x dk (position query bias)
  int64_t chunk_floats = 0;    // per (batch, query head, chunk > 0)
  bool want_dak = false, want_dav = false, want_dk = false, want_dv = false;
  bool want_dbias = false, want_dpb = false;

  int64_t AccFloats() const {
    return dak_floats + dav_floats + dbias_floats + dpb_floats;
  }
  int64_t ThreadFloats() const {
    return PaddedFloats(scratch_floats + AccFloats());
  }
};

BackwardLayout MakeBackwardLayout(const AttentionProblem& p, int threads,
                                  bool want_dq, bool want_dk, bool want_dv,
                                  bool want_dak, bool want_dav,
                                  bool want_dbias, bool want_dpb) {
  BackwardLayout l;
  l.chunks = BackwardChunks(p, threads);
  l.range = fused::ReachableBuckets(p);
  l.table_heads = p.per_head_tables ? p.heads : 1;
  l.want_dk = want_dk;
  l.want_dv = want_dv;
  l.want_dak = want_dak && p.VectorScore();
  l.want_dav = want_dav && p.value_term;
  l.scratch_floats = PaddedFloats(fused::BackwardScratch(p).Floats());
  if (l.want_dak) l.dak_floats = l.table_heads * l.range.count * p.dk;
  if (l.want_dav) l.dav_floats = l.table_heads * l.range.count * p.dv;
  l.want_dbias = want_dbias && p.scalar_table;
  if (l.want_dbias) l.dbias_floats = p.heads * p.TableRows();
  l.want_dpb = want_dpb && p.position_query_bias;
  if (l.want_dpb) l.dpb_floats = p.heads * p.dk;
  if (l.chunks > 1 && want_dq) l.chunk_floats = p.q_len * p.dk;
  return l;
}

// Whether the call needs the distance -> bucket map (DistanceBuckets).
bool NeedsDistanceBuckets(const AttentionProblem& p) {
  return p.scalar_table || fused::DistanceRows(p);
}

fused::DistanceBuckets MaybeDistanceBuckets(const AttentionProblem& p) {
  return NeedsDistanceBuckets(p) ? fused::MakeDistanceBuckets(p)
                                 : fused::DistanceBuckets();
}

// The inputs of query head h of batch item b, as both passes read them:
// q of the head, k and v of its key/value head (grouped-query attention),
// its tables, ALiBi slope, scalar table, distance -> bucket map and
// position query bias. The caller adds its outputs.
HeadData InputHead(const AttentionProblem& p, const AttentionInputs<float>& in,
                   const fused::DistanceBuckets& dist, int64_t b, int64_t h) {
  const int64_t bh = b * p.heads + h;
  const int64_t bkv = b * p.kv_heads + p.KvHead(h);
  HeadData hd;
  hd.q = in.q.data() + bh * p.q_len * p.dk;
  hd.k = in.k.data() + bkv * p.k_len * p.dk;
  hd.v = in.v.data() + bkv * p.k_len * p.dv;
  if (p.VectorScore()) hd.ak = in.ak.data() + p.TableOffset(h, p.dk);
  if (p.value_term) hd.av = in.av.data() + p.TableOffset(h, p.dv);
  if (p.AlibiScore()) hd.alibi_slope = static_cast<float>(p.alibi_slopes[h]);
  if (NeedsDistanceBuckets(p)) {
    if (p.scalar_table) hd.bias = in.bias.data() + h * p.TableRows();
    hd.dist_bucket = dist.bucket.data();
    hd.r_lo = dist.r_lo;
    hd.r_hi = dist.r_hi;
  }
  if (p.position_query_bias) hd.pb = in.pb.data() + h * p.dk;
  return hd;
}

void FillZero(TensorView<float> g) {
  if (!g.empty()) std::fill(g.data(), g.data() + g.numel(), 0.0f);
}

// Everything one backward call shares between its threads.
struct BackwardRun {
  const AttentionProblem& p;
  const AttentionInputs<float>& in;
  const AttentionGrads<float>& grads;
  const float *out, *lse, *dout;
  const BackwardLayout& lay;
  const fused::DistanceBuckets& dist;
  const ThreadBuffers& bufs;
  float* chunk_buf;  // partial dQ of chunks > 0, or null
  int threads;

  float* ChunkDq(int64_t bh, int64_t chunk) const {
    return chunk_buf + (bh * (lay.chunks - 1) + chunk - 1) * lay.chunk_floats;
  }
};

// One backward work item: chunk `chunk` of the key tiles of key/value head
// kvh of batch item b, for each query head of its group in order (they all
// add into the same dK / dV rows, so one thread owns them).
void BackwardItem(const BackwardRun& r, int64_t b, int64_t kvh, int64_t chunk,
                  float* mine, float* acc) {
  const AttentionProblem& p = r.p;
  const BackwardLayout& lay = r.lay;
  float* my_dak = acc;
  float* my_dav = my_dak + lay.dak_floats;
  float* my_dbias = my_dav + lay.dav_floats;
  float* my_dpb = my_dbias + lay.dbias_floats;
  const int64_t bkv = b * p.kv_heads + kvh;
  const int64_t tiles = fused::NumQueryTiles(p);
  for (int64_t g = 0; g < p.group; ++g) {
    const int64_t h = kvh * p.group + g, bh = b * p.heads + h;
    HeadData hd = InputHead(p, r.in, r.dist, b, h);
    if (lay.want_dbias) hd.dbias = my_dbias + h * p.TableRows();
    if (lay.want_dpb) hd.dpb = my_dpb + h * p.dk;
    hd.o = r.out + bh * p.q_len * p.dv;
    hd.lse_in = r.lse + bh * p.q_len;
    hd.dout = r.dout + bh * p.q_len * p.dv;
    if (!r.grads.dq.empty()) {
      hd.dq = chunk == 0 ? r.grads.dq.data() + bh * p.q_len * p.dk
                         : r.ChunkDq(bh, chunk);
    }
    if (lay.want_dk) hd.dk = r.grads.dk.data() + bkv * p.k_len * p.dk;
    if (lay.want_dv) hd.dv = r.grads.dv.data() + bkv * p.k_len * p.dv;
    const int64_t th = p.per_head_tables ? h : 0;
    hd.bucket_base = lay.range.lo;
    if (lay.want_dak) hd.dak = my_dak + th * lay.range.count * p.dk;
    if (lay.want_dav) hd.dav = my_dav + th * lay.range.count * p.dv;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const QueryTile t = fused::MakeQueryTile(p, b, h, tile);
      HWY_DYNAMIC_DISPATCH(BackwardTile)(p, t, hd, mine, chunk, lay.chunks);
    }
  }
}

// The backward reductions in a fixed order (thread order, chunk order), so
// results do not depend on scheduling: partial dQ of the chunks, then the
// per-thread table gradients. Called inside the parallel region (orphaned
// worksharing loops).
void ReduceBackward(const BackwardRun& r) {
  const AttentionProblem& p = r.p;
  const BackwardLayout& lay = r.lay;
  const int64_t per_thread = r.bufs.per_thread();
  if (lay.chunk_floats > 0) {
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < p.batch * p.heads; ++bh) {
      float* dst = r.grads.dq.data() + bh * p.q_len * p.dk;
      for (int64_t c = 1; c < lay.chunks; ++c) {
        const float* src = r.ChunkDq(bh, c);
        for (int64_t e = 0; e < lay.chunk_floats; ++e) dst[e] += src[e];
      }
    }
  }
  // Per-thread table gradients summed in thread order, in blocks of
  // contiguous floats (vectorisable; the sum order per element does not
  // depend on the block split).
  auto reduce_table = [&](bool want, int64_t offset_in_acc, int64_t width,
                          TensorView<float> dst_all) {
    if (!want) return;
    const int64_t rows = lay.range.count * width;  // floats per table head
    constexpr int64_t kBlock = 1024;
    const int64_t blocks = (rows + kBlock - 1) / kBlock;
#pragma omp for schedule(static)
    for (int64_t item = 0; item < lay.table_heads * blocks; ++item) {
      const int64_t th = item / blocks;
      const int64_t e0 = (item % blocks) * kBlock;
      const int64_t n = std::min(kBlock, rows - e0);
      float* dst = dst_all.data() + th * p.TableRows() * width +
                   lay.range.lo * width + e0;
      const float* src0 = r.bufs.Acc(0) + offset_in_acc + th * rows + e0;
      std::copy(src0, src0 + n, dst);
      for (int t = 1; t < r.threads; ++t) {
        const float* src = src0 + per_thread * t;
        for (int64_t e = 0; e < n; ++e) dst[e] += src[e];
      }
    }
  };
  reduce_table(lay.want_dak, 0, p.dk, r.grads.dak);
  reduce_table(lay.want_dav, lay.dak_floats, p.dv, r.grads.dav);
  // dbias [H, nb] and dpb [H, dk]: every entry written, the per-thread
  // sums in thread order.
  auto reduce_heads = [&](int64_t offset_in_acc, int64_t width,
                          float* dst_all) {
#pragma omp for schedule(static)
    for (int64_t h = 0; h < p.heads; ++h) {
      float* dst = dst_all + h * width;
      const float* src0 = r.bufs.Acc(0) + offset_in_acc + h * width;
      std::copy(src0, src0 + width, dst);
      for (int t = 1; t < r.threads; ++t) {
        const float* src = src0 + per_thread * t;
        for (int64_t e = 0; e < width; ++e) dst[e] += src[e];
      }
    }
  };
  const int64_t dbias_offset = lay.dak_floats + lay.dav_floats;
  if (lay.want_dbias)
    reduce_heads(dbias_offset, p.TableRows(), r.grads.dbias.data());
  if (lay.want_dpb)
    reduce_heads(dbias_offset + lay.dbias_floats, p.dk, r.grads.dpb.data());
}

}  // namespace

const char* FusedTargetName() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

void FusedForward(const AttentionProblem& p, const AttentionInputs<float>& in,
                  float* out, float* lse, int num_threads) {
  const int threads = base::ResolveThreads(num_threads);
  const int64_t tiles = fused::NumQueryTiles(p);
  const int64_t items = p.batch * p.heads * tiles;
  if (items == 0) return;
  const ThreadBuffers bufs(threads,
                           PaddedFloats(fused::ForwardScratch(p).Floats()), 0,
                           "forward scratch");
  const fused::DistanceBuckets dist = MaybeDistanceBuckets(p);
  // Resolve the dispatch target once, outside the parallel region.
  (void)HWY_DYNAMIC_DISPATCH(TargetName)();

#pragma omp parallel num_threads(threads)
  {
    float* mine = bufs.Scratch(omp_get_thread_num());
    // Items are independent (each writes its own rows), so any schedule
    // gives bitwise identical results; dynamic balances causal tiles.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bh = item / tiles;
      const int64_t b = bh / p.heads, h = bh % p.heads;
      const QueryTile t = fused::MakeQueryTile(p, b, h, item % tiles);
      HeadData hd = InputHead(p, in, dist, b, h);
      hd.out = out + bh * p.q_len * p.dv;
      hd.lse = lse ? lse + bh * p.q_len : nullptr;
      HWY_DYNAMIC_DISPATCH(ForwardTile)(p, t, hd, mine);
    }
  }
}

namespace {

// The calling thread's few-query scratch, kept between calls and grown
// when a call needs more: a decoding step allocates nothing here.
float* FewQueryScratch(int64_t floats) {
  thread_local hwy::AlignedFreeUniquePtr<float[]> buf;
  thread_local int64_t capacity = 0;
  if (floats > capacity) {
    buf = AllocateFloats(floats, "few-query scratch");
    capacity = floats;
  }
  return buf.get();
}

thread_local fused::DistanceBuckets few_query_dist;

// Work item `item` (few_query.h): key/value head kvh of batch item b and
// rows [first, first + rows) of the (group head, query row) pairs reading it.
fused::FewPass MakeFewPass(const AttentionProblem& p,
                           const AttentionInputs<float>& in,
                           const fused::DistanceBuckets& dist, float* out,
                           float* lse, int64_t item) {
  const int64_t passes = fused::FewPassesPerKvHead(p);
  const int64_t bkv = item / passes, pass = item % passes;
  const int64_t b = bkv / p.kv_heads, kvh = bkv % p.kv_heads;
  const int64_t first = pass * fused::kFewPassRows;
  fused::FewPass fp;
  fp.rows = std::min(fused::kFewPassRows, fused::FewRowsPerKvHead(p) - first);
  fp.key_begin = p.KeyBegin(b);
  for (int64_t r = 0; r < fp.rows; ++r) {
    const int64_t g = (first + r) / p.q_len, i = (first + r) % p.q_len;
    const int64_t h = kvh * p.group + g, bh = b * p.heads + h;
    const HeadData hd = InputHead(p, in, dist, b, h);
    if (r == 0) {
      fp.k = hd.k;
      fp.v = hd.v;
      fp.dist_bucket = hd.dist_bucket;
      fp.r_lo = hd.r_lo;
      fp.r_hi = hd.r_hi;
    }
    fused::FewRow& row = fp.row[r];
    row.q = hd.q + i * p.dk;
    row.ak = hd.ak;
    row.av = hd.av;
    row.bias = hd.bias;
    row.pb = hd.pb;
    row.alibi_slope = hd.alibi_slope;
    row.out = out + (bh * p.q_len + i) * p.dv;
    row.lse = lse ? lse + bh * p.q_len + i : nullptr;
    row.pos = i + p.QueryOffset(b);
    row.key_end = std::max(p.KeyEnd(b, i), fp.key_begin);
  }
  return fp;
}

int FewQueryTeam(const AttentionProblem& p, int num_threads) {
  return static_cast<int>(std::min<int64_t>(base::ResolveThreads(num_threads),
                                            fused::FewItems(p)));
}

}  // namespace

void FewQueryForward(const AttentionProblem& p,
                     const AttentionInputs<float>& in, float* out, float* lse,
                     int num_threads) {
  const int64_t items = fused::FewItems(p);
  if (items == 0) return;
  const int team = FewQueryTeam(p, num_threads);
  const int64_t per_thread = PaddedFloats(fused::FewScratch(p).Floats());
  float* scratch = FewQueryScratch(per_thread * team);
  if (NeedsDistanceBuckets(p)) fused::FillDistanceBuckets(p, &few_query_dist);
  const fused::DistanceBuckets& dist = few_query_dist;
  (void)HWY_DYNAMIC_DISPATCH(TargetName)();
  if (team <= 1) {  // no parallel region at all: nothing to wake or wait for
    for (int64_t item = 0; item < items; ++item) {
      const fused::FewPass fp = MakeFewPass(p, in, dist, out, lse, item);
      HWY_DYNAMIC_DISPATCH(FewQueryPass)(p, fp, scratch);
    }
    return;
  }
#pragma omp parallel num_threads(team)
  {
    float* mine = scratch + per_thread * omp_get_thread_num();
    // Items write disjoint rows: any schedule gives the same bits.
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const fused::FewPass fp = MakeFewPass(p, in, dist, out, lse, item);
      HWY_DYNAMIC_DISPATCH(FewQueryPass)(p, fp, mine);
    }
  }
}

// The parallel region, the per-thread buffers it carves (ThreadBuffers) and
// their reduction in a fixed thread order (ReduceBackward) are what make
// results independent of scheduling (docs/kernel.md, determinism).
void FusedBackward(const AttentionProblem& p, const AttentionInputs<float>& in,
                   const float* out, const float* lse, const float* dout,
                   const AttentionGrads<float>& grads, int num_threads) {
  const int threads = base::ResolveThreads(num_threads);
  const BackwardLayout lay = MakeBackwardLayout(
      p, threads, !grads.dq.empty(), !grads.dk.empty(), !grads.dv.empty(),
      !grads.dak.empty(), !grads.dav.empty(), !grads.dbias.empty(),
      !grads.dpb.empty());
  // A provided table gradient whose term is off is all zeros; so is every
  // table row no pair can reach (only the reachable range is accumulated).
  FillZero(grads.dak);
  FillZero(grads.dav);
  // dK and dV are accumulated in place, tile by tile; a key no query sees
  // keeps its zero.
  FillZero(grads.dk);
  FillZero(grads.dv);
  if (p.batch * p.heads == 0 || fused::NumQueryTiles(p) == 0) return;
  const ThreadBuffers bufs(threads, lay.scratch_floats, lay.AccFloats(),
                           "backward scratch");
  hwy::AlignedFreeUniquePtr<float[]> chunk_buf;
  if (lay.chunk_floats > 0) {
    chunk_buf = AllocateFloats(
        lay.chunk_floats * p.batch * p.heads * (lay.chunks - 1),
        "backward dQ chunks");
  }
  const fused::DistanceBuckets dist = MaybeDistanceBuckets(p);
  const BackwardRun run{p,   in,   grads, out,  lse,
                        dout, lay, dist,  bufs, chunk_buf.get(),
                        threads};
  const int64_t items = p.batch * p.kv_heads * lay.chunks;
  (void)HWY_DYNAMIC_DISPATCH(TargetName)();

#pragma omp parallel num_threads(threads)
  {
    const int me = omp_get_thread_num();
    // static, 1: item -> thread is fixed for a given thread count, so every
    // per-thread dAK / dAV sum is formed in the same order on every run.
#pragma omp for schedule(static, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bkv = item / lay.chunks;
      BackwardItem(run, bkv / p.kv_heads, bkv % p.kv_heads, item % lay.chunks,
                   bufs.Scratch(me), bufs.Acc(me));
    }
    ReduceBackward(run);
  }
}

int64_t FusedExtraBytes(const AttentionProblem& p, int num_threads) {
  const int threads = base::ResolveThreads(num_threads);
  const int64_t forward =
      p.FewQuery()
          ? PaddedFloats(fused::FewScratch(p).Floats()) *
                std::max(1, FewQueryTeam(p, num_threads))
          : PaddedFloats(fused::ForwardScratch(p).Floats()) * threads;
  const BackwardLayout lay =
      MakeBackwardLayout(p, threads, true, true, true, true, true, true, true);
  const int64_t backward =
      lay.ThreadFloats() * threads +
      lay.chunk_floats * p.batch * p.heads * (lay.chunks - 1);
  return static_cast<int64_t>(sizeof(float)) * std::max(forward, backward);
}

}  // namespace relpos

#endif  // HWY_ONCE
