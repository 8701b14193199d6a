#include "relpos/lab/bench.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "core/attention_problem.h"
#include "base/check.h"
#include "base/rng.h"
#include "kernels/fused_attention.h"
#include "model/transformer_block.h"
#include "relpos/attention.h"

namespace relpos::bench {
namespace {

std::vector<float> Normal(Rng& rng, int64_t count, double mean, double std) {
  std::vector<float> x(static_cast<size_t>(count));
  for (float& value : x) value = static_cast<float>(mean + std * rng.Normal());
  return x;
}

template <typename T>
int64_t Bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

}  // namespace

void ValidateLayerShape(const LayerShape& s) {
  RELPOS_CHECK_ARG(s.batch >= 1 && s.n >= 1 && s.d_model >= 1 &&
                       s.heads >= 1 && s.d_ff >= 1 && s.max_distance >= 0 &&
                       s.d_model % s.heads == 0,
                   "layer benchmark shape must have batch, n, d_model, heads, "
                   "d_ff >= 1, heads dividing d_model and max_distance >= 0 "
                   "(got B=" << s.batch << ", n=" << s.n << ", d_model="
                             << s.d_model << ", heads=" << s.heads
                             << ", d_ff=" << s.d_ff
                             << ", k=" << s.max_distance << ")");
}

struct LayerWorkload::Impl {
  LayerShape shape;
  AttentionOptions attention;
  // Parameters, in the model's layout (docs/model.md, one block).
  std::vector<float> ln1_g, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, rel_k,
      rel_v, ln2_g, ln2_b, ff_in_w, ff_in_b, ff_out_w, ff_out_b;
  std::vector<float> x, y;  // [batch * n, d_model]
  model::BlockActivations<float> acts;
  model::BlockScratch<float> scratch;
  bool forward_done = false;

  model::BlockShape Block() const {
    return {shape.batch, shape.n, shape.d_model, shape.heads, shape.d_ff,
            nullptr};
  }

  model::BlockWeights<float> Weights() const {
    model::BlockWeights<float> w;
    w.ln1_gamma = ln1_g.data();
    w.ln1_beta = ln1_b.data();
    w.attn = {wq.data(), bq.data(), wk.data(), bk.data(),
              wv.data(), bv.data(), wo.data(), bo.data(),
              shape.relative ? rel_k.data() : nullptr,
              shape.relative ? rel_v.data() : nullptr};
    w.ln2_gamma = ln2_g.data();
    w.ln2_beta = ln2_b.data();
    w.ff_in_w = ff_in_w.data();
    w.ff_in_b = ff_in_b.data();
    w.ff_out_w = ff_out_w.data();
    w.ff_out_b = ff_out_b.data();
    return w;
  }
};

LayerWorkload::LayerWorkload(const LayerShape& shape, int threads,
                             uint64_t seed)
    : impl_(std::make_unique<Impl>()) {
  ValidateLayerShape(shape);
  Impl& m = *impl_;
  m.shape = shape;
  const int64_t d = shape.d_model, f = shape.d_ff;
  const int64_t dh = d / shape.heads, rows = shape.batch * shape.n;
  m.attention.num_threads = threads;
  m.attention.path = AttentionPath::kAuto;  // what the model runs
  m.attention.per_head_tables = false;
  m.attention.key_term = m.attention.value_term = shape.relative;
  m.attention.max_distance = shape.relative ? shape.max_distance : 0;
  Rng rng(seed);
  const double sd = 1.0 / std::sqrt(static_cast<double>(d));
  const double sf = 1.0 / std::sqrt(static_cast<double>(f));
  m.ln1_g = Normal(rng, d, 1.0, 0.1);
  m.ln1_b = Normal(rng, d, 0.0, 0.1);
  using Pair = std::pair<std::vector<float>*, std::vector<float>*>;
  for (const auto& [w, b] : {Pair{&m.wq, &m.bq}, Pair{&m.wk, &m.bk},
                             Pair{&m.wv, &m.bv}, Pair{&m.wo, &m.bo}}) {
    *w = Normal(rng, d * d, 0.0, sd);
    *b = Normal(rng, d, 0.0, 0.1);
  }
  if (shape.relative) {
    m.rel_k = Normal(rng, (2 * shape.max_distance + 1) * dh, 0.0, 0.5);
    m.rel_v = Normal(rng, (2 * shape.max_distance + 1) * dh, 0.0, 0.5);
  }
  m.ln2_g = Normal(rng, d, 1.0, 0.1);
  m.ln2_b = Normal(rng, d, 0.0, 0.1);
  m.ff_in_w = Normal(rng, f * d, 0.0, sd);
  m.ff_in_b = Normal(rng, f, 0.0, 0.1);
  m.ff_out_w = Normal(rng, d * f, 0.0, sf);
  m.ff_out_b = Normal(rng, d, 0.0, 0.1);
  m.x = Normal(rng, rows * d, 0.0, 1.0);
  m.y.assign(m.x.size(), 0.0f);
}

LayerWorkload::~LayerWorkload() = default;

void LayerWorkload::Forward() {
  Impl& m = *impl_;
  model::BlockForward<float>(m.x.data(), m.Weights(), m.y.data(), &m.acts,
                             &m.scratch, m.Block(), m.attention,
                             model::BlockOptions{});
  m.forward_done = true;
}

int64_t LayerWorkload::PeakBytes() const {
  const Impl& m = *impl_;
  RELPOS_CHECK_ARG(m.forward_done, "LayerWorkload::PeakBytes needs Forward()");
  int64_t bytes = 0;
  for (const std::vector<float>* v :
       {&m.ln1_g, &m.ln1_b, &m.wq, &m.bq, &m.wk, &m.bk, &m.wv, &m.bv, &m.wo,
        &m.bo, &m.rel_k, &m.rel_v, &m.ln2_g, &m.ln2_b, &m.ff_in_w,
        &m.ff_in_b, &m.ff_out_w, &m.ff_out_b, &m.x, &m.y}) {
    bytes += Bytes(*v);
  }
  const model::BlockActivations<float>& a = m.acts;
  for (const std::vector<float>* v :
       {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.mha.q, &a.mha.k, &a.mha.v,
        &a.mha.attn, &a.mha.lse, &a.mha.merged, &a.h, &a.ln2, &a.ln2_mean,
        &a.ln2_rstd, &a.ff_pre, &a.ff_act}) {
    bytes += Bytes(*v);
  }
  const model::BlockScratch<float>& s = m.scratch;
  for (const std::vector<float>* v :
       {&s.branch, &s.dbranch, &s.dln, &s.dff, &s.mha.flat, &s.mha.dattn,
        &s.mha.dq, &s.mha.dk, &s.mha.dv, &s.mha.dtable_k, &s.mha.dtable_v}) {
    bytes += Bytes(*v);
  }
  // The attention kernel's workspace, as `relpos bench` reports it.
  const LayerShape& sh = m.shape;
  const int64_t dh = sh.d_model / sh.heads;
  const int64_t table_rows = 2 * m.attention.max_distance + 1;
  AttentionInputs<float> in;
  in.q = ConstView<float>(a.mha.q.data(), {sh.batch, sh.heads, sh.n, dh});
  in.k = ConstView<float>(a.mha.k.data(), {sh.batch, sh.heads, sh.n, dh});
  in.v = ConstView<float>(a.mha.v.data(), {sh.batch, sh.heads, sh.n, dh});
  if (sh.relative) {
    in.ak = ConstView<float>(m.rel_k.data(), {table_rows, dh});
    in.av = ConstView<float>(m.rel_v.data(), {table_rows, dh});
  }
  const AttentionProblem p = MakeAttentionProblem<float>(
      in, ConstView<float>(a.mha.attn.data(), {sh.batch, sh.heads, sh.n, dh}),
      ConstView<float>(a.mha.lse.data(), {sh.batch, sh.heads, sh.n}),
      m.attention);
  return bytes + FusedExtraBytes(p, m.attention.num_threads);
}

const std::vector<float>& LayerWorkload::output() const { return impl_->y; }

const LayerShape& LayerWorkload::shape() const { return impl_->shape; }

}  // namespace relpos::bench
