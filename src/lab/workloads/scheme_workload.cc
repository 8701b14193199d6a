// SchemeWorkload (relpos/lab/bench.h): one forward + backward problem of each
// relative scheme, at the settings `relpos bench --positions` documents.
#include <algorithm>
#include <string>
#include <vector>

#include "core/attention_problem.h"
#include "core/check.h"
#include "core/rng.h"
#include "kernels/fused_attention.h"
#include "relpos/lab/bench.h"
#include "relpos/position_schemes.h"

namespace relpos::bench {
namespace {

struct SchemeInfo {
  Scheme scheme;
  const char* name;
};
constexpr SchemeInfo kSchemes[] = {
    {Scheme::kVanilla, "vanilla"}, {Scheme::kShaw, "shaw"},
    {Scheme::kShawAsym, "shaw-asym"}, {Scheme::kShawLog, "shaw-log"},
    {Scheme::kT5, "t5"}, {Scheme::kAlibi, "alibi"},
    {Scheme::kRope, "rope"}, {Scheme::kXl, "xl"},
};

// T5's own defaults (Raffel et al. 2020): 32 buckets, max distance 128.
constexpr T5Buckets kT5Default{.num_buckets = 32, .max_distance = 128,
                               .bidirectional = true};

std::vector<float> Normal(Rng& rng, int64_t count, float scale) {
  std::vector<float> x(static_cast<size_t>(count));
  for (float& value : x) value = scale * static_cast<float>(rng.Normal());
  return x;
}

// The options of `scheme` for self-attention of length n; sets *rows to the
// rows of its table (0: no table).
AttentionOptions SchemeOptions(Scheme scheme, const WorkloadShape& s,
                               int threads, int64_t* rows) {
  AttentionOptions o;
  o.num_threads = threads;
  o.path = AttentionPath::kAuto;  // fused wherever the kernel supports it
  o.max_distance = 0;
  *rows = 0;
  switch (scheme) {
    case Scheme::kVanilla:
    case Scheme::kRope:
      o.key_term = o.value_term = false;
      break;
    case Scheme::kShaw:
      o.max_distance = s.max_distance;
      *rows = 2 * s.max_distance + 1;
      break;
    case Scheme::kShawAsym:
      o.buckets.kind = BucketKind::kClip;
      o.buckets.clip = {.left = s.max_distance,
                        .right = std::max<int64_t>(1, s.max_distance / 8)};
      *rows = ClipBucketCount(o.buckets.clip);
      break;
    case Scheme::kShawLog:
      o.buckets.kind = BucketKind::kT5;
      o.buckets.t5 = kT5Default;
      *rows = kT5Default.num_buckets;
      break;
    case Scheme::kT5:
      o.buckets.kind = BucketKind::kT5;
      o.buckets.t5 = kT5Default;
      o.score_term = ScoreTerm::kScalarTable;
      o.value_term = false;
      *rows = kT5Default.num_buckets;
      break;
    case Scheme::kAlibi:
      o.score_term = ScoreTerm::kAlibi;
      o.value_term = false;
      break;
    case Scheme::kXl:
      // Every distance of the sequence has its own row: k = n.
      o.max_distance = s.n;
      o.position_query_bias = true;
      o.value_term = false;
      *rows = 2 * s.n + 1;
      break;
  }
  return o;
}

}  // namespace

const char* SchemeName(Scheme scheme) {
  for (const SchemeInfo& info : kSchemes) {
    if (info.scheme == scheme) return info.name;
  }
  return "unknown";
}

std::vector<std::string> SchemeNames() {
  std::vector<std::string> names;
  for (const SchemeInfo& info : kSchemes) names.emplace_back(info.name);
  return names;
}

Scheme SchemeFromName(const std::string& name) {
  for (const SchemeInfo& info : kSchemes) {
    if (name == info.name) return info.scheme;
  }
  std::string all;
  for (const SchemeInfo& info : kSchemes) {
    all += all.empty() ? "" : ", ";
    all += info.name;
  }
  RELPOS_CHECK_ARG(false, "unknown position scheme '" << name
                                                      << "' (one of " << all
                                                      << ")");
  return Scheme::kVanilla;
}

bool SchemeUsesMaxDistance(Scheme scheme) {
  return scheme == Scheme::kShaw || scheme == Scheme::kShawAsym;
}

SchemeWorkload::SchemeWorkload(Scheme scheme, const WorkloadShape& shape,
                               int threads, uint64_t seed)
    : scheme_(scheme), shape_(shape) {
  ValidateShape(shape);
  RELPOS_CHECK_ARG(scheme != Scheme::kRope || shape.dim % 2 == 0,
                   "rope needs an even head width (got d=" << shape.dim
                                                           << ")");
  options_ = SchemeOptions(scheme, shape, threads, &table_rows_);
  rope_.num_threads = threads;
  const WorkloadShape& s = shape_;
  const int64_t elements = s.batch * s.heads * s.n * s.dim;
  Rng rng(seed);
  q_ = Normal(rng, elements, 1.0f);
  k_ = Normal(rng, elements, 1.0f);
  v_ = Normal(rng, elements, 1.0f);
  dout_ = Normal(rng, elements, 1.0f);
  if (scheme == Scheme::kT5) {
    bias_ = Normal(rng, s.heads * table_rows_, 0.5f);
    dbias_.assign(bias_.size(), 0.0f);
  } else if (table_rows_ > 0) {
    ak_ = Normal(rng, table_rows_ * s.dim, 0.5f);
    dak_.assign(ak_.size(), 0.0f);
    if (options_.value_term) {
      av_ = Normal(rng, table_rows_ * s.dim, 0.5f);
      dav_.assign(av_.size(), 0.0f);
    }
  }
  if (options_.position_query_bias) {
    pb_ = Normal(rng, s.heads * s.dim, 0.5f);
    dpb_.assign(pb_.size(), 0.0f);
  }
  if (scheme == Scheme::kRope) {
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

AttentionInputs<float> SchemeWorkload::Inputs() const {
  const WorkloadShape& s = shape_;
  const bool rope = scheme_ == Scheme::kRope;
  AttentionInputs<float> in;
  in.q = ConstView<float>(rope ? qr_.data() : q_.data(),
                          {s.batch, s.heads, s.n, s.dim});
  in.k = ConstView<float>(rope ? kr_.data() : k_.data(),
                          {s.batch, s.heads, s.n, s.dim});
  in.v = ConstView<float>(v_.data(), {s.batch, s.heads, s.n, s.dim});
  if (!ak_.empty()) in.ak = ConstView<float>(ak_.data(), {table_rows_, s.dim});
  if (!av_.empty()) in.av = ConstView<float>(av_.data(), {table_rows_, s.dim});
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
  if (scheme_ == Scheme::kRope) {
    // q at positions i + off (off = 0 for self-attention), k at j.
    RopeForward<float>(view(q_.data()), view(qr_.data()), rope_);
    RopeForward<float>(view(k_.data()), view(kr_.data()), rope_);
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
  auto view = [&s](float* data) {
    return TensorView<float>(data, {s.batch, s.heads, s.n, s.dim});
  };
  AttentionGrads<float> g;
  g.dq = view(dq_.data());
  g.dk = view(dk_.data());
  g.dv = view(dv_.data());
  if (!dak_.empty()) g.dak = TensorView<float>(dak_.data(), {table_rows_, s.dim});
  if (!dav_.empty()) g.dav = TensorView<float>(dav_.data(), {table_rows_, s.dim});
  if (!dbias_.empty()) {
    g.dbias = TensorView<float>(dbias_.data(), {s.heads, table_rows_});
  }
  if (!dpb_.empty()) g.dpb = TensorView<float>(dpb_.data(), {s.heads, s.dim});
  AttentionBackward<float>(
      Inputs(), view(out_.data()),
      ConstView<float>(lse_.data(), {s.batch, s.heads, s.n}),
      view(dout_.data()), g, options_);
  if (scheme_ == Scheme::kRope) {
    // dq, dk are with respect to the rotated q, k: rotate them back in place.
    RopeBackward<float>(view(dq_.data()), view(dq_.data()), rope_);
    RopeBackward<float>(view(dk_.data()), view(dk_.data()), rope_);
  }
}

int64_t SchemeWorkload::ExtraBytes() const {
  const WorkloadShape& s = shape_;
  if (!fused_) return 2 * s.n * static_cast<int64_t>(sizeof(float));
  const AttentionProblem p = MakeAttentionProblem<float>(
      Inputs(), ConstView<float>(out_.data(), {s.batch, s.heads, s.n, s.dim}),
      ConstView<float>(lse_.data(), {s.batch, s.heads, s.n}), options_);
  const int64_t rotated =
      scheme_ == Scheme::kRope
          ? static_cast<int64_t>((qr_.size() + kr_.size()) * sizeof(float))
          : 0;
  return FusedExtraBytes(p, options_.num_threads) + rotated;
}

}  // namespace relpos::bench
