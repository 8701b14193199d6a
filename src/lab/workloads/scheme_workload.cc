// SchemeWorkload (relpos/lab/bench.h): one forward + backward problem of each
// relative scheme of the registry (relpos/schemes.h), at the settings
// `relpos bench --positions` documents.
#include <algorithm>
#include <string>
#include <vector>

#include "core/attention_problem.h"
#include "base/check.h"
#include "base/rng.h"
#include "kernels/fused_attention.h"
#include "relpos/lab/bench.h"
#include "relpos/schemes.h"

namespace relpos::bench {
namespace {

std::vector<float> Normal(Rng& rng, int64_t count, float scale) {
  std::vector<float> x(static_cast<size_t>(count));
  for (float& value : x) value = scale * static_cast<float>(rng.Normal());
  return x;
}

}  // namespace

SchemeLayer SchemeBenchLayer(const WorkloadShape& s) {
  SchemeLayer l;
  l.heads = s.heads;
  l.head_dim = s.dim;
  l.causal = false;
  l.settings.max_distance = s.max_distance;
  l.settings.k_left = s.max_distance;
  l.settings.k_right = std::max<int64_t>(1, s.max_distance / 8);
  return l;
}

bool SchemeUsesMaxDistance(const Scheme& scheme) {
  return scheme.Reads(SchemeSetting::kMaxDistance) ||
         scheme.Reads(SchemeSetting::kKLeft);
}

SchemeWorkload::SchemeWorkload(const Scheme& scheme, const WorkloadShape& shape,
                               int threads, uint64_t seed)
    : scheme_(&scheme), shape_(shape) {
  ValidateShape(shape);
  RELPOS_CHECK_ARG(scheme.InsideAttention() || scheme.id == SchemeId::kNone,
                   "relpos bench times the schemes that act inside "
                   "attention; '"
                       << scheme.name << "' acts at the input");
  const SchemeLayer layer = SchemeBenchLayer(shape);
  scheme.Validate(layer);
  // The registry's call, with the conventions of every workload here
  // (docs/benchmarks.md): tables shared by the heads, and Transformer-XL's
  // unclipped key table at k = n (the call over n + 1 keys: 2n + 1 rows).
  const SchemeCall call = scheme.Call(layer, shape.n + 1);
  options_ = call.attention;
  options_.per_head_tables = false;
  options_.num_threads = threads;
  rope_ = call.rope;
  if (rope_) rope_->num_threads = threads;
  table_rows_ =
      options_.key_term || options_.value_term ? TableRows(options_) : 0;
  const WorkloadShape& s = shape_;
  const int64_t elements = s.batch * s.heads * s.n * s.dim;
  const int64_t table =
      table_rows_ * s.dim * (options_.per_head_tables ? s.heads : 1);
  Rng rng(seed);
  q_ = Normal(rng, elements, 1.0f);
  k_ = Normal(rng, elements, 1.0f);
  v_ = Normal(rng, elements, 1.0f);
  dout_ = Normal(rng, elements, 1.0f);
  // Each input the options read, N(0, 0.25), with its gradient.
  if (options_.key_term && options_.score_term == ScoreTerm::kScalarTable) {
    bias_ = Normal(rng, s.heads * table_rows_, 0.5f);
    dbias_.assign(bias_.size(), 0.0f);
  } else if (options_.key_term && options_.score_term == ScoreTerm::kVector) {
    ak_ = Normal(rng, table, 0.5f);
    dak_.assign(ak_.size(), 0.0f);
  }
  if (options_.value_term) {
    av_ = Normal(rng, table, 0.5f);
    dav_.assign(av_.size(), 0.0f);
  }
  if (options_.position_query_bias) {
    pb_ = Normal(rng, s.heads * s.dim, 0.5f);
    dpb_.assign(pb_.size(), 0.0f);
  }
  if (rope_) {
    qr_.assign(static_cast<size_t>(elements), 0.0f);
    kr_.assign(static_cast<size_t>(elements), 0.0f);
  }
  out_.assign(static_cast<size_t>(elements), 0.0f);
  dq_.assign(static_cast<size_t>(elements), 0.0f);
  dk_.assign(static_cast<size_t>(elements), 0.0f);
  dv_.assign(static_cast<size_t>(elements), 0.0f);
  lse_.assign(static_cast<size_t>(s.batch * s.heads * s.n), 0.0f);
  const AttentionProblem p = MakeAttentionProblem<float>(
      Inputs(), ConstView<float>(out_.data(), {s.batch, s.heads, s.n, s.dim}),
      ConstView<float>(lse_.data(), {s.batch, s.heads, s.n}), options_);
  fused_ = p.FusedSupported();
}

namespace {

// A table of the workload: [rows, d] shared, [H, rows, d] per head.
template <typename T>
TensorView<T> TableView(T* data, const WorkloadShape& s, int64_t rows,
                        bool per_head) {
  return per_head ? TensorView<T>(data, {s.heads, rows, s.dim})
                  : TensorView<T>(data, {rows, s.dim});
}

}  // namespace

AttentionInputs<float> SchemeWorkload::Inputs() const {
  const WorkloadShape& s = shape_;
  const bool rope = rope_.has_value();
  const bool per_head = options_.per_head_tables;
  AttentionInputs<float> in;
  in.q = ConstView<float>(rope ? qr_.data() : q_.data(),
                          {s.batch, s.heads, s.n, s.dim});
  in.k = ConstView<float>(rope ? kr_.data() : k_.data(),
                          {s.batch, s.heads, s.n, s.dim});
  in.v = ConstView<float>(v_.data(), {s.batch, s.heads, s.n, s.dim});
  if (!ak_.empty()) in.ak = TableView(ak_.data(), s, table_rows_, per_head);
  if (!av_.empty()) in.av = TableView(av_.data(), s, table_rows_, per_head);
  if (!bias_.empty()) {
    in.bias = ConstView<float>(bias_.data(), {s.heads, table_rows_});
  }
  if (!pb_.empty()) in.pb = ConstView<float>(pb_.data(), {s.heads, s.dim});
  return in;
}

void SchemeWorkload::Forward() {
  const WorkloadShape& s = shape_;
  auto view = [&s](float* data) {
    return TensorView<float>(data, {s.batch, s.heads, s.n, s.dim});
  };
  if (rope_) {
    // q at positions i + off (off = 0 for self-attention), k at j.
    RopeForward<float>(view(q_.data()), view(qr_.data()), *rope_);
    RopeForward<float>(view(k_.data()), view(kr_.data()), *rope_);
  }
  AttentionForward<float>(Inputs(), view(out_.data()),
                          TensorView<float>(lse_.data(), {s.batch, s.heads, s.n}),
                          options_);
  forward_done_ = true;
}

void SchemeWorkload::Backward() {
  RELPOS_CHECK_ARG(forward_done_,
                   "SchemeWorkload::Backward needs Forward() first");
  const WorkloadShape& s = shape_;
  const bool per_head = options_.per_head_tables;
  auto view = [&s](float* data) {
    return TensorView<float>(data, {s.batch, s.heads, s.n, s.dim});
  };
  AttentionGrads<float> g;
  g.dq = view(dq_.data());
  g.dk = view(dk_.data());
  g.dv = view(dv_.data());
  if (!dak_.empty()) g.dak = TableView(dak_.data(), s, table_rows_, per_head);
  if (!dav_.empty()) g.dav = TableView(dav_.data(), s, table_rows_, per_head);
  if (!dbias_.empty()) {
    g.dbias = TensorView<float>(dbias_.data(), {s.heads, table_rows_});
  }
  if (!dpb_.empty()) g.dpb = TensorView<float>(dpb_.data(), {s.heads, s.dim});
  AttentionBackward<float>(
      Inputs(), view(out_.data()),
      ConstView<float>(lse_.data(), {s.batch, s.heads, s.n}),
      view(dout_.data()), g, options_);
  if (rope_) {
    // dq, dk are with respect to the rotated q, k: rotate them back in place.
    RopeBackward<float>(view(dq_.data()), view(dq_.data()), *rope_);
    RopeBackward<float>(view(dk_.data()), view(dk_.data()), *rope_);
  }
}

int64_t SchemeWorkload::ExtraBytes() const {
  const WorkloadShape& s = shape_;
  if (!fused_) return 2 * s.n * static_cast<int64_t>(sizeof(float));
  const AttentionProblem p = MakeAttentionProblem<float>(
      Inputs(), ConstView<float>(out_.data(), {s.batch, s.heads, s.n, s.dim}),
      ConstView<float>(lse_.data(), {s.batch, s.heads, s.n}), options_);
  const int64_t rotated =
      rope_ ? static_cast<int64_t>((qr_.size() + kr_.size()) * sizeof(float))
            : 0;
  return FusedExtraBytes(p, options_.num_threads) + rotated;
}

}  // namespace relpos::bench
