// Driver of the fused relative-attention kernel (docs/math.md section 4): splits
// the work into (batch, head, query tile) items for OpenMP, owns every
// allocation, and calls the per-target SIMD bodies of fused_attention-inl.h
// through Highway's dynamic dispatch (hwy/examples/skeleton.cc recipe: this
// file re-includes itself once per target).
#include "kernels/fused_attention.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fused_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/fused_attention-inl.h"

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
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "hwy/aligned_allocator.h"

namespace relpos {

HWY_EXPORT(ForwardTile);
HWY_EXPORT(BackwardTile);
HWY_EXPORT(TargetName);

namespace {

using fused::HeadData;
using fused::QueryTile;

int ResolveThreads(int num_threads) {
  return num_threads > 0 ? num_threads : std::max(1, omp_get_max_threads());
}

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

// The backward pass splits each (batch, head) into `chunks` interleaved sets
// of KEY tiles only when there are fewer (batch, head) pairs than threads.
// Each chunk owns its keys' dK / dV rows outright; chunk 0 writes dQ in
// place and chunk c > 0 a private partial dQ (Nq x dk), summed in chunk
// order afterwards.
int64_t BackwardChunks(const AttentionProblem& p, int threads) {
  const int64_t bh = p.batch * p.heads;
  if (bh == 0 || bh >= threads) return 1;  // bh == 0: nothing to split
  const int64_t want = (threads + bh - 1) / bh;
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
  int64_t chunk_floats = 0;    // per (batch, head, chunk > 0)
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

// The distance -> bucket map, and the scalar score table of head h.
void SetDistanceBuckets(const AttentionProblem& p,
                        const AttentionInputs<float>& in,
                        const fused::DistanceBuckets& dist, int64_t h,
                        HeadData* hd) {
  if (p.scalar_table) hd->bias = in.bias.data() + h * p.TableRows();
  hd->dist_bucket = dist.bucket.data();
  hd->r_lo = dist.r_lo;
  hd->r_hi = dist.r_hi;
}

}  // namespace

const char* FusedTargetName() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

void FusedForward(const AttentionProblem& p, const AttentionInputs<float>& in,
                  float* out, float* lse, int num_threads) {
  const int threads = ResolveThreads(num_threads);
  const int64_t tiles = fused::NumQueryTiles(p);
  const int64_t items = p.batch * p.heads * tiles;
  if (items == 0) return;
  const int64_t per_thread = PaddedFloats(fused::ForwardScratch(p).Floats());
  auto scratch = AllocateFloats(per_thread * threads, "forward scratch");
  // No zero fill: every tile body writes its scratch before reading it.
  const fused::DistanceBuckets dist = NeedsDistanceBuckets(p)
                                         ? fused::MakeDistanceBuckets(p)
                                         : fused::DistanceBuckets();
  // Resolve the dispatch target once, outside the parallel region.
  (void)HWY_DYNAMIC_DISPATCH(TargetName)();

#pragma omp parallel num_threads(threads)
  {
    float* mine = scratch.get() + per_thread * omp_get_thread_num();
    // Items are independent (each writes its own rows), so any schedule
    // gives bitwise identical results; dynamic balances causal tiles.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bh = item / tiles;
      const int64_t b = bh / p.heads, h = bh % p.heads;
      const QueryTile t = fused::MakeQueryTile(p, b, h, item % tiles);
      HeadData hd;
      hd.q = in.q.data() + bh * p.q_len * p.dk;
      hd.k = in.k.data() + bh * p.k_len * p.dk;
      hd.v = in.v.data() + bh * p.k_len * p.dv;
      if (p.VectorScore()) hd.ak = in.ak.data() + p.TableOffset(h, p.dk);
      if (p.value_term) hd.av = in.av.data() + p.TableOffset(h, p.dv);
      if (p.AlibiScore()) hd.alibi_slope = static_cast<float>(p.alibi_slopes[h]);
      if (NeedsDistanceBuckets(p)) SetDistanceBuckets(p, in, dist, h, &hd);
      if (p.position_query_bias) hd.pb = in.pb.data() + h * p.dk;
      hd.out = out + bh * p.q_len * p.dv;
      hd.lse = lse ? lse + bh * p.q_len : nullptr;
      HWY_DYNAMIC_DISPATCH(ForwardTile)(p, t, hd, mine);
    }
  }
}

// One function of about 150 lines, deliberately: the parallel region, the
// per-thread buffers it carves and their reduction in a fixed thread order
// are read together to check that results do not depend on scheduling
// (docs/kernel.md, determinism); the layout and table set-up are already
// MakeBackwardLayout and SetDistanceBuckets.
void FusedBackward(const AttentionProblem& p, const AttentionInputs<float>& in,
                   const float* out, const float* lse, const float* dout,
                   const AttentionGrads<float>& grads, int num_threads) {
  const int threads = ResolveThreads(num_threads);
  const BackwardLayout lay = MakeBackwardLayout(
      p, threads, !grads.dq.empty(), !grads.dk.empty(), !grads.dv.empty(),
      !grads.dak.empty(), !grads.dav.empty(), !grads.dbias.empty(),
      !grads.dpb.empty());
  // A provided table gradient whose term is off is all zeros; so is every
  // table row no pair can reach (only the reachable range is accumulated).
  if (!grads.dak.empty()) {
    std::fill(grads.dak.data(), grads.dak.data() + grads.dak.numel(), 0.0f);
  }
  if (!grads.dav.empty()) {
    std::fill(grads.dav.data(), grads.dav.data() + grads.dav.numel(), 0.0f);
  }
  const int64_t bh_count = p.batch * p.heads;
  const int64_t tiles = fused::NumQueryTiles(p);
  if (bh_count == 0 || tiles == 0) {
    if (!grads.dk.empty())
      std::fill(grads.dk.data(), grads.dk.data() + grads.dk.numel(), 0.0f);
    if (!grads.dv.empty())
      std::fill(grads.dv.data(), grads.dv.data() + grads.dv.numel(), 0.0f);
    return;
  }
  const int64_t chunks = lay.chunks;
  const int64_t items = bh_count * chunks;
  const int64_t per_thread = lay.ThreadFloats();
  auto thread_buf = AllocateFloats(per_thread * threads, "backward scratch");
  // Only the dAK / dAV accumulators need zeros; the tile bodies write the
  // rest of their scratch before reading it.
  for (int th = 0; th < threads; ++th) {
    float* acc = thread_buf.get() + per_thread * th + lay.scratch_floats;
    std::fill(acc, acc + lay.AccFloats(), 0.0f);
  }
  hwy::AlignedFreeUniquePtr<float[]> chunk_buf;
  const int64_t chunk_count = bh_count * (chunks - 1);
  if (lay.chunk_floats > 0) {
    chunk_buf =
        AllocateFloats(lay.chunk_floats * chunk_count, "backward dQ chunks");
  }
  // dK and dV are accumulated in place, tile by tile.
  if (lay.want_dk)
    std::fill(grads.dk.data(), grads.dk.data() + grads.dk.numel(), 0.0f);
  if (lay.want_dv)
    std::fill(grads.dv.data(), grads.dv.data() + grads.dv.numel(), 0.0f);
  const fused::DistanceBuckets dist = NeedsDistanceBuckets(p)
                                         ? fused::MakeDistanceBuckets(p)
                                         : fused::DistanceBuckets();
  (void)HWY_DYNAMIC_DISPATCH(TargetName)();

#pragma omp parallel num_threads(threads)
  {
    float* mine = thread_buf.get() + per_thread * omp_get_thread_num();
    float* my_dak = mine + lay.scratch_floats;
    float* my_dav = my_dak + lay.dak_floats;
    float* my_dbias = my_dav + lay.dav_floats;
    float* my_dpb = my_dbias + lay.dbias_floats;
    // static, 1: item -> thread is fixed for a given thread count, so every
    // per-thread dAK / dAV sum is formed in the same order on every run.
#pragma omp for schedule(static, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bh = item / chunks, chunk = item % chunks;
      const int64_t b = bh / p.heads, h = bh % p.heads;
      HeadData hd;
      hd.q = in.q.data() + bh * p.q_len * p.dk;
      hd.k = in.k.data() + bh * p.k_len * p.dk;
      hd.v = in.v.data() + bh * p.k_len * p.dv;
      if (p.VectorScore()) hd.ak = in.ak.data() + p.TableOffset(h, p.dk);
      if (p.value_term) hd.av = in.av.data() + p.TableOffset(h, p.dv);
      if (p.AlibiScore()) hd.alibi_slope = static_cast<float>(p.alibi_slopes[h]);
      if (NeedsDistanceBuckets(p)) SetDistanceBuckets(p, in, dist, h, &hd);
      if (lay.want_dbias) hd.dbias = my_dbias + h * p.TableRows();
      if (p.position_query_bias) hd.pb = in.pb.data() + h * p.dk;
      if (lay.want_dpb) hd.dpb = my_dpb + h * p.dk;
      hd.o = out + bh * p.q_len * p.dv;
      hd.lse_in = lse + bh * p.q_len;
      hd.dout = dout + bh * p.q_len * p.dv;
      if (!grads.dq.empty()) {
        hd.dq = chunk == 0 ? grads.dq.data() + bh * p.q_len * p.dk
                           : chunk_buf.get() + (bh * (chunks - 1) + chunk - 1) *
                                                   lay.chunk_floats;
      }
      if (lay.want_dk) hd.dk = grads.dk.data() + bh * p.k_len * p.dk;
      if (lay.want_dv) hd.dv = grads.dv.data() + bh * p.k_len * p.dv;
      const int64_t th = p.per_head_tables ? h : 0;
      hd.bucket_base = lay.range.lo;
      if (lay.want_dak) hd.dak = my_dak + th * lay.range.count * p.dk;
      if (lay.want_dav) hd.dav = my_dav + th * lay.range.count * p.dv;
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const QueryTile t = fused::MakeQueryTile(p, b, h, tile);
        HWY_DYNAMIC_DISPATCH(BackwardTile)(p, t, hd, mine, chunk, chunks);
      }
    }

    // Fixed-order reductions (thread order, chunk order): deterministic.
    if (lay.chunk_floats > 0) {
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < bh_count; ++bh) {
        float* dst = grads.dq.data() + bh * p.q_len * p.dk;
        for (int64_t c = 1; c < chunks; ++c) {
          const float* src =
              chunk_buf.get() + (bh * (chunks - 1) + c - 1) * lay.chunk_floats;
          for (int64_t e = 0; e < lay.chunk_floats; ++e) dst[e] += src[e];
        }
      }
    }
    // Per-thread table gradients summed in thread order, in blocks of
    // contiguous floats (vectorisable; the sum order per element does not
    // depend on the block split).
    auto reduce_table = [&](bool want, int64_t offset_in_thread, int64_t width,
                            float* dst_all) {
      if (!want) return;
      const int64_t rows = lay.range.count * width;  // floats per table head
      constexpr int64_t kBlock = 1024;
      const int64_t blocks = (rows + kBlock - 1) / kBlock;
#pragma omp for schedule(static)
      for (int64_t item = 0; item < lay.table_heads * blocks; ++item) {
        const int64_t th = item / blocks;
        const int64_t e0 = (item % blocks) * kBlock;
        const int64_t n = std::min(kBlock, rows - e0);
        float* dst =
            dst_all + th * p.TableRows() * width + lay.range.lo * width + e0;
        const float* src0 =
            thread_buf.get() + offset_in_thread + th * rows + e0;
        std::copy(src0, src0 + n, dst);
        for (int t = 1; t < threads; ++t) {
          const float* src = src0 + per_thread * t;
          for (int64_t e = 0; e < n; ++e) dst[e] += src[e];
        }
      }
    };
    reduce_table(lay.want_dak, lay.scratch_floats, p.dk,
                 lay.want_dak ? grads.dak.data() : nullptr);
    reduce_table(lay.want_dav, lay.scratch_floats + lay.dak_floats, p.dv,
                 lay.want_dav ? grads.dav.data() : nullptr);
    // dbias [H, nb] and dpb [H, dk]: every entry written, the per-thread
    // sums in thread order.
    auto reduce_heads = [&](int64_t offset, int64_t width, float* dst_all) {
#pragma omp for schedule(static)
      for (int64_t h = 0; h < p.heads; ++h) {
        float* dst = dst_all + h * width;
        const float* src0 = thread_buf.get() + offset + h * width;
        std::copy(src0, src0 + width, dst);
        for (int t = 1; t < threads; ++t) {
          const float* src = src0 + per_thread * t;
          for (int64_t e = 0; e < width; ++e) dst[e] += src[e];
        }
      }
    };
    const int64_t dbias_offset =
        lay.scratch_floats + lay.dak_floats + lay.dav_floats;
    if (lay.want_dbias)
      reduce_heads(dbias_offset, p.TableRows(), grads.dbias.data());
    if (lay.want_dpb)
      reduce_heads(dbias_offset + lay.dbias_floats, p.dk, grads.dpb.data());
  }
}

int64_t FusedExtraBytes(const AttentionProblem& p, int num_threads) {
  const int threads = ResolveThreads(num_threads);
  const int64_t forward =
      PaddedFloats(fused::ForwardScratch(p).Floats()) * threads;
  const BackwardLayout lay =
      MakeBackwardLayout(p, threads, true, true, true, true, true, true, true);
  const int64_t backward =
      lay.ThreadFloats() * threads +
      lay.chunk_floats * p.batch * p.heads * (lay.chunks - 1);
  return static_cast<int64_t>(sizeof(float)) * std::max(forward, backward);
}

}  // namespace relpos

#endif  // HWY_ONCE
