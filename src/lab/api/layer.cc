// relpos::RelativeAttentionLayer: owns the weights nn::MultiHeadAttention*
// reads, and its cache and scratch.
#include "relpos/lab/layer.h"

#include <cmath>
#include <map>

#include "lab/api/internal.h"
#include "base/check.h"
#include "base/rng.h"
#include "model/nn/multi_head_attention.h"
#include "relpos/params.h"

namespace relpos {

struct RelativeAttentionLayer::Impl {
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> value, grad;
  };
  LayerConfig config;
  std::vector<std::string> names;
  std::map<std::string, Tensor> params;
  nn::MhaCache<float> cache;
  nn::MhaScratch<float> scratch;
  std::vector<float> x;  // the last Forward's input
  nn::MhaShape shape;
  AttentionOptions options;

  Tensor& Add(const std::string& name, std::vector<int64_t> shape) {
    names.push_back(name);
    Tensor& t = params[name];
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    t.shape = std::move(shape);
    t.value.assign(static_cast<size_t>(n), 0.0f);
    t.grad.assign(static_cast<size_t>(n), 0.0f);
    return t;
  }
  float* V(const char* name) {
    auto it = params.find(name);
    return it == params.end() ? nullptr : it->second.value.data();
  }
  float* G(const char* name) {
    auto it = params.find(name);
    return it == params.end() ? nullptr : it->second.grad.data();
  }
  nn::MhaWeights<float> Weights() {
    return {V("q.weight"), V("q.bias"), V("k.weight"),   V("k.bias"),
            V("v.weight"), V("v.bias"), V("out.weight"), V("out.bias"),
            V("rel_k"),    V("rel_v")};
  }
  nn::MhaGrads<float> Grads() {
    return {G("q.weight"), G("q.bias"), G("k.weight"),   G("k.bias"),
            G("v.weight"), G("v.bias"), G("out.weight"), G("out.bias"),
            G("rel_k"),    G("rel_v")};
  }
};

namespace {

// The [B, N, d_model] extents of `v`, checked against the layer.
void CheckInput(const char* what, int rank, int64_t d, int64_t want_d) {
  RELPOS_CHECK_ARG(rank == 3 && d == want_d,
                   what << " must be [B, N, d_model=" << want_d << "]");
}

}  // namespace

RelativeAttentionLayer::RelativeAttentionLayer(const LayerConfig& c)
    : impl_(std::make_unique<Impl>()) {
  RELPOS_CHECK_ARG(c.d_model >= 1 && c.heads >= 1 && c.d_model % c.heads == 0,
                   "layer: heads " << c.heads << " must divide d_model "
                                   << c.d_model);
  RELPOS_CHECK_ARG(c.max_distance >= 0 && c.max_distance <= (1 << 20),
                   "layer: max_distance must be in [0, 2^20] (got "
                       << c.max_distance << ")");
  impl_->config = c;
  const int64_t d = c.d_model, dh = d / c.heads, rows = 2 * c.max_distance + 1;
  Rng rng(c.seed);
  const double std = 1.0 / std::sqrt(static_cast<double>(d));
  for (const char* p : {"q", "k", "v", "out"}) {
    Impl::Tensor& w = impl_->Add(std::string(p) + ".weight", {d, d});
    for (float& x : w.value) x = static_cast<float>(std * rng.Normal());
    impl_->Add(std::string(p) + ".bias", {d});
  }
  const std::vector<int64_t> table =
      c.per_head_tables ? std::vector<int64_t>{c.heads, rows, dh}
                        : std::vector<int64_t>{rows, dh};
  uint64_t table_seed = c.seed;
  for (const char* name : {"rel_k", "rel_v"}) {
    ++table_seed;
    if ((name[4] == 'k' && !c.key_term) || (name[4] == 'v' && !c.value_term)) {
      continue;
    }
    Impl::Tensor& t = impl_->Add(name, table);
    InitRelativeTable(ViewOf(t.value.data(), table), {.seed = table_seed});
  }
  impl_->options.max_distance = c.max_distance;
  impl_->options.per_head_tables = c.per_head_tables;
  impl_->options.key_term = c.key_term;
  impl_->options.value_term = c.value_term;
  impl_->options.causal = c.causal;
}

RelativeAttentionLayer::~RelativeAttentionLayer() = default;
RelativeAttentionLayer::RelativeAttentionLayer(
    RelativeAttentionLayer&&) noexcept = default;
RelativeAttentionLayer& RelativeAttentionLayer::operator=(
    RelativeAttentionLayer&&) noexcept = default;

const LayerConfig& RelativeAttentionLayer::config() const {
  return impl_->config;
}

void RelativeAttentionLayer::Forward(ConstView<float> x, TensorView<float> y,
                                     const std::vector<int64_t>& key_lengths) {
  const int64_t d = impl_->config.d_model;
  CheckInput("x", x.rank(), x.rank() == 3 ? x.dim(2) : -1, d);
  CheckInput("y", y.rank(), y.rank() == 3 ? y.dim(2) : -1, d);
  RELPOS_CHECK_ARG(y.dim(0) == x.dim(0) && y.dim(1) == x.dim(1),
                   "y must have x's shape");
  impl_->shape = {.batch = x.dim(0), .length = x.dim(1), .d_model = d,
                  .heads = impl_->config.heads};
  impl_->options.key_lengths = key_lengths;
  impl_->x.assign(x.data(), x.data() + x.numel());
  nn::MultiHeadAttentionForward(impl_->x.data(), impl_->Weights(), y.data(),
                                &impl_->cache, impl_->shape, impl_->options);
}

void RelativeAttentionLayer::Backward(ConstView<float> dy,
                                      TensorView<float> dx) {
  const nn::MhaShape& s = impl_->shape;
  RELPOS_CHECK_ARG(!impl_->x.empty(), "Backward needs a Forward first");
  for (const auto& v : {ConstView<float>(dy), ConstView<float>(dx)}) {
    RELPOS_CHECK_ARG(v.rank() == 3 && v.dim(0) == s.batch &&
                         v.dim(1) == s.length && v.dim(2) == s.d_model,
                     "dy and dx must have the last Forward's x shape");
  }
  nn::MultiHeadAttentionBackward(impl_->x.data(), impl_->Weights(),
                                 impl_->cache, dy.data(), dx.data(),
                                 impl_->Grads(), &impl_->scratch, s,
                                 impl_->options);
}

std::vector<std::string> RelativeAttentionLayer::ParameterNames() const {
  return impl_->names;
}

TensorView<float> RelativeAttentionLayer::Parameter(const std::string& name) {
  auto it = impl_->params.find(name);
  RELPOS_CHECK_ARG(it != impl_->params.end(),
                   "the layer has no parameter '" << name << "'");
  return ViewOf(it->second.value.data(), it->second.shape);
}

ConstView<float> RelativeAttentionLayer::Gradient(
    const std::string& name) const {
  auto it = impl_->params.find(name);
  RELPOS_CHECK_ARG(it != impl_->params.end(),
                   "the layer has no parameter '" << name << "'");
  return ViewOf<const float>(it->second.grad.data(), it->second.shape);
}

}  // namespace relpos
