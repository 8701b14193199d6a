// The transformer of transformer.h, composed from the layers in src/nn/.
//
// One block (pre-LayerNorm, as GPT-2 and most current models; Xiong et al.,
// 2020 show it trains without warm-up tricks):
//   h       = x + Dropout(MultiHeadAttention(LayerNorm1(x)))
//   x_next  = h + Dropout(W2 GELU(W1 LayerNorm2(h) + b1) + b2)
// Input:  x_0 = Dropout(TokenEmbedding + AbsolutePosition)   (no position
//         term for kNone / kRelative)
// Output: logits = LayerNormF(x_L) Whead^T + bhead; mean cross-entropy over
//         the positions whose target is not -1.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
#include "nn/cross_entropy.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/multi_head_attention.h"
#include "nn/parallel.h"
#include "nn/position_encoding.h"
#include "relpos/attention.h"
#include "relpos/params.h"

namespace relpos::model {
namespace {

// FNV-1a of a parameter name: keys each tensor's random stream by its name,
// so adding or reordering tensors never changes the others' initial values.
uint64_t HashName(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t ParamSeed(uint64_t model_seed, const std::string& name) {
  Rng mix(model_seed ^ HashName(name));
  return mix.NextU64();
}

enum class Init { kZeros, kOnes, kNormal, kRelativeTable };

// Every tensor of the model, in checkpoint order, with its initialisation.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  Init init;
  double std = 0.0;  // for kNormal
};

// Indices into the parameter vector for one block.
struct BlockParams {
  int64_t ln1_gamma, ln1_beta;
  int64_t wq, bq, wk, bk, wv, bv, wo, bo;
  int64_t rel_k = -1, rel_v = -1;
  int64_t ln2_gamma, ln2_beta;
  int64_t ff_in_w, ff_in_b, ff_out_w, ff_out_b;
};

struct ParamIndex {
  int64_t token = -1, position = -1;
  std::vector<BlockParams> blocks;
  int64_t final_gamma = -1, final_beta = -1, head_w = -1, head_b = -1;
};

ParamIndex BuildSpecs(const ModelConfig& c, std::vector<ParamSpec>* specs) {
  ParamIndex idx;
  auto add = [&](std::string name, std::vector<int64_t> shape, Init init,
                 double std = 0.0) {
    specs->push_back({std::move(name), std::move(shape), init, std});
    return static_cast<int64_t>(specs->size()) - 1;
  };
  const int64_t d = c.d_model, dh = c.d_model / c.heads;
  // LeCun normal for every weight matrix (std 1/sqrt(fan_in)): with the
  // LayerNorm in front, each projection then keeps unit-variance activations.
  const double lecun_d = 1.0 / std::sqrt(static_cast<double>(d));
  const double lecun_ff = 1.0 / std::sqrt(static_cast<double>(c.d_ff));
  // Token embeddings N(0, 1), on the scale of the sinusoidal table (RMS
  // 1/sqrt(2)); the learned absolute table uses the same scale.
  idx.token = add("embed.token", {c.vocab_size, d}, Init::kNormal, 1.0);
  if (c.position == PositionScheme::kLearned) {
    idx.position = add("embed.position", {c.max_len, d}, Init::kNormal, 1.0);
  }
  const bool relative = c.position == PositionScheme::kRelative;
  const int64_t rows = 2 * c.max_distance + 1;
  std::vector<int64_t> table_shape =
      c.per_head_tables ? std::vector<int64_t>{c.heads, rows, dh}
                        : std::vector<int64_t>{rows, dh};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    BlockParams b;
    b.ln1_gamma = add(p + "ln1.gamma", {d}, Init::kOnes);
    b.ln1_beta = add(p + "ln1.beta", {d}, Init::kZeros);
    b.wq = add(p + "attn.q.weight", {d, d}, Init::kNormal, lecun_d);
    b.bq = add(p + "attn.q.bias", {d}, Init::kZeros);
    b.wk = add(p + "attn.k.weight", {d, d}, Init::kNormal, lecun_d);
    b.bk = add(p + "attn.k.bias", {d}, Init::kZeros);
    b.wv = add(p + "attn.v.weight", {d, d}, Init::kNormal, lecun_d);
    b.bv = add(p + "attn.v.bias", {d}, Init::kZeros);
    b.wo = add(p + "attn.out.weight", {d, d}, Init::kNormal, lecun_d);
    b.bo = add(p + "attn.out.bias", {d}, Init::kZeros);
    if (relative && c.key_term) {
      b.rel_k = add(p + "attn.rel_k", table_shape, Init::kRelativeTable);
    }
    if (relative && c.value_term) {
      b.rel_v = add(p + "attn.rel_v", table_shape, Init::kRelativeTable);
    }
    b.ln2_gamma = add(p + "ln2.gamma", {d}, Init::kOnes);
    b.ln2_beta = add(p + "ln2.beta", {d}, Init::kZeros);
    b.ff_in_w = add(p + "ff.in.weight", {c.d_ff, d}, Init::kNormal, lecun_d);
    b.ff_in_b = add(p + "ff.in.bias", {c.d_ff}, Init::kZeros);
    b.ff_out_w = add(p + "ff.out.weight", {d, c.d_ff}, Init::kNormal, lecun_ff);
    b.ff_out_b = add(p + "ff.out.bias", {d}, Init::kZeros);
    idx.blocks.push_back(b);
  }
  idx.final_gamma = add("final_ln.gamma", {d}, Init::kOnes);
  idx.final_beta = add("final_ln.beta", {d}, Init::kZeros);
  idx.head_w = add("head.weight", {c.vocab_size, d}, Init::kNormal, lecun_d);
  idx.head_b = add("head.bias", {c.vocab_size}, Init::kZeros);
  return idx;
}

// Initial values, always generated in float so that the float and double
// models start from identical numbers.
std::vector<float> InitialValues(const ParamSpec& spec, const ModelConfig& c) {
  int64_t n = 1;
  for (int64_t e : spec.shape) n *= e;
  std::vector<float> v(n, 0.0f);
  const uint64_t seed = ParamSeed(c.seed, spec.name);
  switch (spec.init) {
    case Init::kZeros:
      break;
    case Init::kOnes:
      std::fill(v.begin(), v.end(), 1.0f);
      break;
    case Init::kNormal: {
      Rng rng(seed);
      for (float& x : v) x = static_cast<float>(spec.std * rng.Normal());
      break;
    }
    case Init::kRelativeTable: {
      TableInitOptions o;
      o.kind = TableInit::kXavierNormal;
      o.scale = c.rel_init_scale;
      o.seed = seed;
      if (spec.shape.size() == 3) {
        InitRelativeTable(
            TensorView<float>(v.data(),
                              {spec.shape[0], spec.shape[1], spec.shape[2]}),
            o);
      } else {
        InitRelativeTable(
            TensorView<float>(v.data(), {spec.shape[0], spec.shape[1]}), o);
      }
      break;
    }
  }
  return v;
}

}  // namespace

template <typename T>
struct BasicTransformer<T>::State {
  ParamIndex index;

  // Per-call shapes and inputs.
  int64_t batch = 0, length = 0, rows = 0;
  std::vector<int32_t> tokens;   // [rows], -1 at padding
  std::vector<int32_t> targets;  // [rows]
  AttentionOptions attention;
  std::vector<T> sinusoid;  // [sinusoid_rows, d_model], cached
  int64_t sinusoid_rows = 0;

  // Activations kept for the backward pass.
  struct Block {
    std::vector<T> ln1, ln1_mean, ln1_rstd;  // LayerNorm1(x) and its stats
    nn::MhaCache<T> mha;
    std::vector<T> h;  // x + attention branch
    std::vector<T> ln2, ln2_mean, ln2_rstd;
    std::vector<T> ff_pre, ff_act;  // [rows, d_ff]
    uint64_t attn_drop_seed = 0, ff_drop_seed = 0;
  };
  std::vector<std::vector<T>> xs;  // residual stream x_0 .. x_L, [rows, d]
  std::vector<Block> blocks;
  uint64_t embed_drop_seed = 0;
  std::vector<T> lnf, lnf_mean, lnf_rstd, logits;
  std::vector<int32_t> predictions;  // [rows]

  // Scratch.
  std::vector<T> branch;   // [rows, d]: a block branch's output
  std::vector<T> dresid;   // [rows, d]: gradient of the residual stream
  std::vector<T> dbranch;  // [rows, d]
  std::vector<T> dln;      // [rows, d]
  std::vector<T> dff;      // [rows, d_ff]
  std::vector<T> dlogits;  // [rows, vocab]
  nn::MhaScratch<T> mha_scratch;
};

template <typename T>
BasicTransformer<T>::BasicTransformer(const ModelConfig& config)
    : config_(config), state_(std::make_unique<State>()) {
  Validate(config_);
  std::vector<ParamSpec> specs;
  state_->index = BuildSpecs(config_, &specs);
  params_.reserve(specs.size());
  for (const ParamSpec& spec : specs) {
    const std::vector<float> init = InitialValues(spec, config_);
    BasicParameter<T> p;
    p.name = spec.name;
    p.shape = spec.shape;
    p.value.assign(init.begin(), init.end());
    p.grad.assign(init.size(), T(0));
    params_.push_back(std::move(p));
  }
  state_->blocks.resize(config_.layers);
  state_->xs.resize(config_.layers + 1);
}

template <typename T>
BasicTransformer<T>::~BasicTransformer() = default;
template <typename T>
BasicTransformer<T>::BasicTransformer(BasicTransformer&&) noexcept = default;
template <typename T>
BasicTransformer<T>& BasicTransformer<T>::operator=(
    BasicTransformer&&) noexcept = default;

template <typename T>
int64_t BasicTransformer<T>::FindParameter(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

template <typename T>
int64_t BasicTransformer<T>::NumParameters() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  return n;
}

template <typename T>
T BasicTransformer<T>::ForwardBackward(const Batch& batch, Rng& rng,
                                       Metrics* metrics) {
  return Run(batch, /*train=*/true, &rng, metrics, nullptr);
}

template <typename T>
T BasicTransformer<T>::Evaluate(const Batch& batch, Metrics* metrics,
                                std::vector<int32_t>* predictions) {
  return Run(batch, /*train=*/false, nullptr, metrics, predictions);
}

namespace {

void ValidateBatch(const Batch& b, const ModelConfig& c) {
  RELPOS_CHECK_ARG(b.batch >= 1,
                   "batch.batch must be >= 1 (got " << b.batch << ")");
  RELPOS_CHECK_ARG(b.length >= 1,
                   "batch.length must be >= 1 (got " << b.length << ")");
  RELPOS_CHECK_ARG(b.batch <= (int64_t{1} << 31) / b.length,
                   "batch.batch * batch.length must be <= 2^31 (got "
                       << b.batch << " x " << b.length << ")");
  const int64_t rows = b.batch * b.length;
  RELPOS_CHECK_ARG(static_cast<int64_t>(b.tokens.size()) == rows,
                   "batch.tokens must have batch * length = "
                       << rows << " entries (got " << b.tokens.size() << ")");
  RELPOS_CHECK_ARG(static_cast<int64_t>(b.targets.size()) == rows,
                   "batch.targets must have batch * length = "
                       << rows << " entries (got " << b.targets.size() << ")");
  RELPOS_CHECK_ARG(
      static_cast<int64_t>(b.lengths.size()) == b.batch,
      "batch.lengths must have batch = " << b.batch << " entries (got "
                                         << b.lengths.size() << ")");
  if (c.position == PositionScheme::kLearned) {
    RELPOS_CHECK_ARG(b.length <= c.max_len,
                     "batch.length " << b.length
                                     << " exceeds the learned position "
                                        "table's max_len = "
                                     << c.max_len);
  }
  for (int64_t s = 0; s < b.batch; ++s) {
    const int64_t len = b.lengths[s];
    RELPOS_CHECK_ARG(len >= 0 && len <= b.length,
                     "batch.lengths[" << s << "] must be in [0, " << b.length
                                      << "] (got " << len << ")");
    for (int64_t i = 0; i < b.length; ++i) {
      const int64_t r = s * b.length + i;
      const int32_t t = b.tokens[r], y = b.targets[r];
      if (i < len) {
        RELPOS_CHECK_ARG(t >= 0 && t < c.vocab_size,
                         "batch.tokens["
                             << s << ", " << i
                             << "] must be in [0, vocab_size = " << c.vocab_size
                             << ") (got " << t << ")");
        RELPOS_CHECK_ARG(y >= -1 && y < c.vocab_size,
                         "batch.targets[" << s << ", " << i
                                          << "] must be -1 or in [0, "
                                             "vocab_size = "
                                          << c.vocab_size << ") (got " << y
                                          << ")");
      } else {
        RELPOS_CHECK_ARG(y == -1, "batch.targets["
                                      << s << ", " << i
                                      << "] is at a padded "
                                         "position (length "
                                      << len << ") and must be -1 (got " << y
                                      << ")");
      }
    }
  }
}

// Attention options for the configured position scheme. Adding a scheme that
// acts inside attention means adding a case here.
AttentionOptions AttentionOptionsFor(const ModelConfig& c) {
  AttentionOptions o;
  o.causal = c.arch == Arch::kDecoder;
  o.path = AttentionPath::kAuto;
  if (c.position == PositionScheme::kRelative) {
    o.max_distance = c.max_distance;
    o.per_head_tables = c.per_head_tables;
    o.key_term = c.key_term;
    o.value_term = c.value_term;
  } else {
    o.max_distance = 0;
    o.per_head_tables = false;
    o.key_term = false;
    o.value_term = false;
  }
  return o;
}

template <typename T>
void Resize(std::vector<T>* v, int64_t n) {
  v->resize(static_cast<size_t>(n));
}

}  // namespace

template <typename T>
T BasicTransformer<T>::Run(const Batch& batch, bool train, Rng* rng,
                           Metrics* metrics,
                           std::vector<int32_t>* predictions) {
  const ModelConfig& c = config_;
  ValidateBatch(batch, c);
  State& st = *state_;
  const ParamIndex& pi = st.index;
  const int64_t B = batch.batch, N = batch.length, rows = B * N;
  const int64_t d = c.d_model, dff = c.d_ff, V = c.vocab_size;
  st.batch = B;
  st.length = N;
  st.rows = rows;
  auto P = [&](int64_t i) -> const T* { return params_[i].value.data(); };
  auto G = [&](int64_t i) -> T* {
    return i < 0 ? nullptr : params_[i].grad.data();
  };
  // One block's attention weights (forward and backward read the same).
  auto MhaWeightsOf = [&](const auto& bp) {
    return nn::MhaWeights<T>{P(bp.wq),
                             P(bp.bq),
                             P(bp.wk),
                             P(bp.bk),
                             P(bp.wv),
                             P(bp.bv),
                             P(bp.wo),
                             P(bp.bo),
                             bp.rel_k < 0 ? nullptr : P(bp.rel_k),
                             bp.rel_v < 0 ? nullptr : P(bp.rel_v)};
  };

  // Padding slots look up no embedding (token -1 -> zero row).
  st.tokens.resize(rows);
  st.targets.assign(batch.targets.begin(), batch.targets.end());
  for (int64_t s = 0; s < B; ++s) {
    for (int64_t i = 0; i < N; ++i) {
      st.tokens[s * N + i] =
          i < batch.lengths[s] ? batch.tokens[s * N + i] : -1;
    }
  }
  st.attention = AttentionOptionsFor(c);
  st.attention.key_lengths = batch.lengths;

  const bool dropout = train && c.dropout > 0.0;
  auto drop_seed = [&]() -> uint64_t { return dropout ? rng->NextU64() : 0; };

  // ---- Input: x_0 = Dropout(TokenEmbedding + AbsolutePosition) ----
  std::vector<T>& x0 = st.xs[0];
  Resize(&x0, rows * d);
  nn::EmbeddingForward<T>(st.tokens.data(), P(pi.token), x0.data(),
                          {rows, V, d});
  const nn::PositionShape pos_shape{B, N, d};
  switch (c.position) {
    case PositionScheme::kSinusoidal:
      if (st.sinusoid_rows < N) {
        Resize(&st.sinusoid, N * d);
        nn::SinusoidalTable<T>(N, d, st.sinusoid.data());
        st.sinusoid_rows = N;
      }
      nn::AddPositionForward<T>(st.sinusoid.data(), x0.data(), pos_shape);
      break;
    case PositionScheme::kLearned:
      nn::AddPositionForward<T>(P(pi.position), x0.data(), pos_shape);
      break;
    case PositionScheme::kNone:
    case PositionScheme::kRelative:
      break;
  }
  st.embed_drop_seed = drop_seed();
  if (dropout) {
    nn::DropoutForward<T>(x0.data(), x0.data(), rows * d,
                          {c.dropout, st.embed_drop_seed});
  }

  // ---- Blocks ----
  const nn::LayerNormShape ln_shape{rows, d};
  const nn::MhaShape mha_shape{B, N, d, c.heads};
  Resize(&st.branch, rows * d);
  for (int64_t l = 0; l < c.layers; ++l) {
    const BlockParams& bp = pi.blocks[l];
    typename State::Block& blk = st.blocks[l];
    const std::vector<T>& x = st.xs[l];
    // ln1 = LayerNorm1(x)
    Resize(&blk.ln1, rows * d);
    Resize(&blk.ln1_mean, rows);
    Resize(&blk.ln1_rstd, rows);
    nn::LayerNormForward<T>(x.data(), P(bp.ln1_gamma), P(bp.ln1_beta),
                            blk.ln1.data(), blk.ln1_mean.data(),
                            blk.ln1_rstd.data(), ln_shape);
    // branch = Dropout(MultiHeadAttention(ln1))
    const nn::MhaWeights<T> w = MhaWeightsOf(bp);
    nn::MultiHeadAttentionForward<T>(blk.ln1.data(), w, st.branch.data(),
                                     &blk.mha, mha_shape, st.attention);
    blk.attn_drop_seed = drop_seed();
    if (dropout) {
      nn::DropoutForward<T>(st.branch.data(), st.branch.data(), rows * d,
                            {c.dropout, blk.attn_drop_seed});
    }
    // h = x + branch
    Resize(&blk.h, rows * d);
#pragma omp parallel for schedule(static) if (rows * d >= nn::kMinParallelWork)
    for (int64_t i = 0; i < rows * d; ++i) blk.h[i] = x[i] + st.branch[i];
    // ln2 = LayerNorm2(h); ff_pre = W1 ln2 + b1; ff_act = GELU(ff_pre)
    Resize(&blk.ln2, rows * d);
    Resize(&blk.ln2_mean, rows);
    Resize(&blk.ln2_rstd, rows);
    nn::LayerNormForward<T>(blk.h.data(), P(bp.ln2_gamma), P(bp.ln2_beta),
                            blk.ln2.data(), blk.ln2_mean.data(),
                            blk.ln2_rstd.data(), ln_shape);
    Resize(&blk.ff_pre, rows * dff);
    Resize(&blk.ff_act, rows * dff);
    nn::LinearForward<T>(blk.ln2.data(), P(bp.ff_in_w), P(bp.ff_in_b),
                         blk.ff_pre.data(), {rows, d, dff});
    nn::GeluForward<T>(blk.ff_pre.data(), blk.ff_act.data(), rows * dff);
    // branch = Dropout(W2 ff_act + b2); x_next = h + branch
    nn::LinearForward<T>(blk.ff_act.data(), P(bp.ff_out_w), P(bp.ff_out_b),
                         st.branch.data(), {rows, dff, d});
    blk.ff_drop_seed = drop_seed();
    if (dropout) {
      nn::DropoutForward<T>(st.branch.data(), st.branch.data(), rows * d,
                            {c.dropout, blk.ff_drop_seed});
    }
    std::vector<T>& x_next = st.xs[l + 1];
    Resize(&x_next, rows * d);
#pragma omp parallel for schedule(static) if (rows * d >= nn::kMinParallelWork)
    for (int64_t i = 0; i < rows * d; ++i) x_next[i] = blk.h[i] + st.branch[i];
  }

  // ---- Output: logits = LayerNormF(x_L) Whead^T + bhead ----
  const std::vector<T>& x_last = st.xs[c.layers];
  Resize(&st.lnf, rows * d);
  Resize(&st.lnf_mean, rows);
  Resize(&st.lnf_rstd, rows);
  nn::LayerNormForward<T>(x_last.data(), P(pi.final_gamma), P(pi.final_beta),
                          st.lnf.data(), st.lnf_mean.data(), st.lnf_rstd.data(),
                          ln_shape);
  Resize(&st.logits, rows * V);
  nn::LinearForward<T>(st.lnf.data(), P(pi.head_w), P(pi.head_b),
                       st.logits.data(), {rows, d, V});
  st.predictions.resize(rows);
  const nn::CrossEntropyShape ce_shape{rows, V};
  const nn::CrossEntropyResult ce = nn::CrossEntropyForward<T>(
      st.logits.data(), st.targets.data(), st.predictions.data(), ce_shape);

  if (metrics != nullptr) {
    metrics->loss_sum += ce.loss_sum;
    metrics->tokens += ce.count;
    metrics->correct_tokens += ce.correct;
    for (int64_t s = 0; s < B; ++s) {
      int64_t targets = 0;
      bool all_right = true;
      for (int64_t i = 0; i < N; ++i) {
        const int64_t r = s * N + i;
        if (st.targets[r] < 0) continue;
        ++targets;
        all_right = all_right && st.predictions[r] == st.targets[r];
      }
      if (targets > 0) {
        ++metrics->sequences;
        if (all_right) ++metrics->correct_sequences;
      }
    }
  }
  if (predictions != nullptr) {
    predictions->assign(rows, -1);
    for (int64_t s = 0; s < B; ++s) {
      for (int64_t i = 0; i < batch.lengths[s]; ++i) {
        (*predictions)[s * N + i] = st.predictions[s * N + i];
      }
    }
  }
  const T loss = ce.count > 0 ? static_cast<T>(ce.loss_sum / ce.count) : T(0);
  if (!train) return loss;

  // ================= Backward =================
  if (ce.count == 0) {
    // No target: the loss is the constant 0 and every gradient is zero.
    for (auto& p : params_) std::fill(p.grad.begin(), p.grad.end(), T(0));
    return loss;
  }
  // Differentiates `loss = sum CE / count`.
  Resize(&st.dlogits, rows * V);
  nn::CrossEntropyBackward<T>(st.logits.data(), st.targets.data(),
                              static_cast<T>(1.0 / ce.count), st.dlogits.data(),
                              ce_shape);
  // Differentiates `logits = lnf Whead^T + bhead`.
  Resize(&st.dln, rows * d);
  nn::LinearBackward<T>(st.lnf.data(), P(pi.head_w), st.dlogits.data(),
                        st.dln.data(), G(pi.head_w), G(pi.head_b),
                        {rows, d, V});
  // Differentiates `lnf = LayerNormF(x_L)`; dresid = dL/dx_L.
  Resize(&st.dresid, rows * d);
  nn::LayerNormBackward<T>(x_last.data(), P(pi.final_gamma), st.lnf_mean.data(),
                           st.lnf_rstd.data(), st.dln.data(), st.dresid.data(),
                           G(pi.final_gamma), G(pi.final_beta), ln_shape);

  Resize(&st.dbranch, rows * d);
  Resize(&st.dff, rows * dff);
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    const BlockParams& bp = pi.blocks[l];
    typename State::Block& blk = st.blocks[l];
    // Differentiates `x_next = h + Dropout(W2 ff_act + b2)`: dresid is
    // dL/dx_next and becomes dL/dh (the identity path) plus the branch's.
    // Without dropout the branch sees dresid itself (no copy).
    const T* dff_out = st.dresid.data();
    if (dropout) {
      nn::DropoutBackward<T>(st.dresid.data(), st.dbranch.data(), rows * d,
                             {c.dropout, blk.ff_drop_seed});
      dff_out = st.dbranch.data();
    }
    nn::LinearBackward<T>(blk.ff_act.data(), P(bp.ff_out_w), dff_out,
                          st.dff.data(), G(bp.ff_out_w), G(bp.ff_out_b),
                          {rows, dff, d});
    nn::GeluBackward<T>(blk.ff_pre.data(), st.dff.data(), st.dff.data(),
                        rows * dff);
    nn::LinearBackward<T>(blk.ln2.data(), P(bp.ff_in_w), st.dff.data(),
                          st.dln.data(), G(bp.ff_in_w), G(bp.ff_in_b),
                          {rows, d, dff});
    nn::LayerNormBackward<T>(blk.h.data(), P(bp.ln2_gamma), blk.ln2_mean.data(),
                             blk.ln2_rstd.data(), st.dln.data(),
                             st.dresid.data(), G(bp.ln2_gamma), G(bp.ln2_beta),
                             ln_shape, {.accumulate_dx = true});
    // Differentiates `h = x + Dropout(MultiHeadAttention(ln1))`.
    const T* dattn_out = st.dresid.data();
    if (dropout) {
      nn::DropoutBackward<T>(st.dresid.data(), st.dbranch.data(), rows * d,
                             {c.dropout, blk.attn_drop_seed});
      dattn_out = st.dbranch.data();
    }
    const nn::MhaWeights<T> w = MhaWeightsOf(bp);
    nn::MhaGrads<T> g{G(bp.wq), G(bp.bq), G(bp.wk), G(bp.bk),    G(bp.wv),
                      G(bp.bv), G(bp.wo), G(bp.bo), G(bp.rel_k), G(bp.rel_v)};
    nn::MultiHeadAttentionBackward<T>(blk.ln1.data(), w, blk.mha, dattn_out,
                                      st.dln.data(), g, &st.mha_scratch,
                                      mha_shape, st.attention);
    nn::LayerNormBackward<T>(st.xs[l].data(), P(bp.ln1_gamma),
                             blk.ln1_mean.data(), blk.ln1_rstd.data(),
                             st.dln.data(), st.dresid.data(), G(bp.ln1_gamma),
                             G(bp.ln1_beta), ln_shape, {.accumulate_dx = true});
  }

  // Differentiates `x_0 = Dropout(TokenEmbedding + AbsolutePosition)`.
  if (dropout) {
    nn::DropoutBackward<T>(st.dresid.data(), st.dresid.data(), rows * d,
                           {c.dropout, st.embed_drop_seed});
  }
  nn::EmbeddingBackward<T>(st.tokens.data(), st.dresid.data(), G(pi.token),
                           {rows, V, d});
  if (c.position == PositionScheme::kLearned) {
    // Rows beyond this batch's length get no gradient.
    std::vector<T>& dpos = params_[pi.position].grad;
    std::fill(dpos.begin() + N * d, dpos.end(), T(0));
    nn::AddPositionBackward<T>(st.dresid.data(), dpos.data(), pos_shape);
  }
  return loss;
}

template class BasicTransformer<float>;
template class BasicTransformer<double>;

}  // namespace relpos::model
