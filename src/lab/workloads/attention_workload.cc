#include "relpos/lab/bench.h"


#include <algorithm>

#include "core/attention_problem.h"
#include "base/check.h"
#include "core/gemm.h"
#include "base/rng.h"
#include "kernels/fused_attention.h"

namespace relpos::bench {
namespace {

std::vector<float> Normal(Rng& rng, int64_t count, float scale) {
  std::vector<float> x(static_cast<size_t>(count));
  for (float& value : x) value = scale * static_cast<float>(rng.Normal());
  return x;
}

}  // namespace

const char* VariantName(Variant variant) {
  switch (variant) {
    case Variant::kVanilla:
      return "vanilla";
    case Variant::kRelative:
      return "relative";
    case Variant::kReference:
      return "reference";
  }
  return "unknown";
}

void ValidateShape(const WorkloadShape& shape) {
  RELPOS_CHECK_ARG(shape.batch >= 1 && shape.heads >= 1 && shape.n >= 1 &&
                       shape.dim >= 1 && shape.max_distance >= 0,
                   "benchmark shape must have batch, heads, n, dim >= 1 and "
                   "max_distance >= 0 (got B="
                       << shape.batch << ", H=" << shape.heads
                       << ", n=" << shape.n << ", d=" << shape.dim
                       << ", k=" << shape.max_distance << ")");
}

double ForwardFlops(const WorkloadShape& s) {
  return 4.0 * static_cast<double>(s.batch) * static_cast<double>(s.heads) *
         static_cast<double>(s.n) * static_cast<double>(s.n) *
         static_cast<double>(s.dim);
}

double BackwardFlops(const WorkloadShape& s) { return 2.5 * ForwardFlops(s); }

AttentionOptions VariantOptions(Variant variant, int64_t max_distance,
                                int threads) {
  AttentionOptions o;
  o.num_threads = threads;
  o.per_head_tables = false;  // Shaw et al.: one table pair per layer
  switch (variant) {
    case Variant::kVanilla:
      o.key_term = o.value_term = false;
      o.max_distance = 0;
      o.path = AttentionPath::kFused;
      break;
    case Variant::kRelative:
      o.max_distance = max_distance;
      o.path = AttentionPath::kFused;
      break;
    case Variant::kReference:
      o.max_distance = max_distance;
      o.path = AttentionPath::kReference;
      break;
  }
  return o;
}

AttentionWorkload::AttentionWorkload(Variant variant,
                                     const WorkloadShape& shape, int threads,
                                     uint64_t seed)
    : variant_(variant),
      shape_(shape),
      options_(VariantOptions(variant, shape.max_distance, threads)) {
  ValidateShape(shape);
  const int64_t elements = shape.batch * shape.heads * shape.n * shape.dim;
  Rng rng(seed);
  q_ = Normal(rng, elements, 1.0f);
  k_ = Normal(rng, elements, 1.0f);
  v_ = Normal(rng, elements, 1.0f);
  dout_ = Normal(rng, elements, 1.0f);
  if (variant != Variant::kVanilla) {
    table_rows_ = 2 * shape.max_distance + 1;
    ak_ = Normal(rng, table_rows_ * shape.dim, 0.5f);
    av_ = Normal(rng, table_rows_ * shape.dim, 0.5f);
    dak_.assign(ak_.size(), 0.0f);
    dav_.assign(av_.size(), 0.0f);
  }
  out_.assign(static_cast<size_t>(elements), 0.0f);
  dq_.assign(static_cast<size_t>(elements), 0.0f);
  dk_.assign(static_cast<size_t>(elements), 0.0f);
  dv_.assign(static_cast<size_t>(elements), 0.0f);
  lse_.assign(static_cast<size_t>(shape.batch * shape.heads * shape.n), 0.0f);
}

AttentionInputs<float> AttentionWorkload::Inputs() const {
  const WorkloadShape& s = shape_;
  AttentionInputs<float> in;
  in.q = ConstView<float>(q_.data(), {s.batch, s.heads, s.n, s.dim});
  in.k = ConstView<float>(k_.data(), {s.batch, s.heads, s.n, s.dim});
  in.v = ConstView<float>(v_.data(), {s.batch, s.heads, s.n, s.dim});
  if (table_rows_ > 0) {
    in.ak = ConstView<float>(ak_.data(), {table_rows_, s.dim});
    in.av = ConstView<float>(av_.data(), {table_rows_, s.dim});
  }
  return in;
}

void AttentionWorkload::Forward() {
  const WorkloadShape& s = shape_;
  AttentionForward<float>(
      Inputs(), TensorView<float>(out_.data(), {s.batch, s.heads, s.n, s.dim}),
      TensorView<float>(lse_.data(), {s.batch, s.heads, s.n}), options_);
  forward_done_ = true;
}

void AttentionWorkload::Backward() {
  RELPOS_CHECK_ARG(forward_done_,
                   "AttentionWorkload::Backward needs Forward() first");
  const WorkloadShape& s = shape_;
  AttentionGrads<float> g;
  g.dq = TensorView<float>(dq_.data(), {s.batch, s.heads, s.n, s.dim});
  g.dk = TensorView<float>(dk_.data(), {s.batch, s.heads, s.n, s.dim});
  g.dv = TensorView<float>(dv_.data(), {s.batch, s.heads, s.n, s.dim});
  if (table_rows_ > 0) {
    g.dak = TensorView<float>(dak_.data(), {table_rows_, s.dim});
    g.dav = TensorView<float>(dav_.data(), {table_rows_, s.dim});
  }
  AttentionBackward<float>(
      Inputs(), ConstView<float>(out_.data(), {s.batch, s.heads, s.n, s.dim}),
      ConstView<float>(lse_.data(), {s.batch, s.heads, s.n}),
      ConstView<float>(dout_.data(), {s.batch, s.heads, s.n, s.dim}), g,
      options_);
}

int64_t AttentionWorkload::ExtraBytes() const {
  if (variant_ == Variant::kReference) {
    // ReferenceForward keeps one probability row (Nk values); ReferenceBackward
    // keeps prob and dprob (2 Nk). Every gradient is provided here, so it
    // allocates no scratch gradients. The peak is the backward's.
    return 2 * shape_.n * static_cast<int64_t>(sizeof(float));
  }
  const WorkloadShape& s = shape_;
  const AttentionProblem p = MakeAttentionProblem<float>(
      Inputs(), ConstView<float>(out_.data(), {s.batch, s.heads, s.n, s.dim}),
      ConstView<float>(lse_.data(), {s.batch, s.heads, s.n}), options_);
  return FusedExtraBytes(p, options_.num_threads);
}

std::string AttentionWorkload::ExtraBytesSource() const {
  return variant_ == Variant::kReference ? "computed (reference row buffers)"
                                         : "FusedExtraBytes";
}

SgemmWorkload::SgemmWorkload(int64_t size, uint64_t seed) : size_(size) {
  RELPOS_CHECK_ARG(size >= 1 && size <= 65536,
                   "SGEMM size must be in [1, 65536] (got " << size << ")");
  Rng rng(seed);
  a_ = Normal(rng, size * size, 1.0f);
  b_ = Normal(rng, size * size, 1.0f);
  c_.resize(static_cast<size_t>(size * size));
}

void SgemmWorkload::Run() {
  Sgemm(Trans::kNo, Trans::kNo, size_, size_, size_, 1.0f, a_.data(), size_,
        b_.data(), size_, 0.0f, c_.data(), size_);
}

double SgemmWorkload::Flops() const {
  const auto n = static_cast<double>(size_);
  return 2.0 * n * n * n;
}

}  // namespace relpos::bench
