// The transformer of transformer.h, composed from the layers in src/lab/nn/ and
// the block of transformer_block.h.
//
// One block (pre-LayerNorm, as GPT-2 and most current models; Xiong et al.,
// 2020 show it trains without warm-up tricks):
//   h       = x + Dropout(MultiHeadAttention(LayerNorm1(x)))
//   x_next  = h + Dropout(W2 GELU(W1 LayerNorm2(h) + b1) + b2)
// Input:  x_0 = Dropout(TokenEmbedding + AbsolutePosition)   (a position
//         term only for kSinusoidal / kLearned; the other schemes act inside
//         attention, model/positions.h)
// Output: logits = LayerNormF(x_L) Whead^T + bhead; mean cross-entropy over
//         the positions whose target is not -1.
// Forward runs input, blocks, output; Backward runs them in reverse, each
// step quoting the line it differentiates. The operation order is fixed:
// training is reproducible bit for bit, checkpoints included.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
#include "model/positions.h"
#include "model/transformer_block.h"
#include "nn/cross_entropy.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/multi_head_attention.h"
#include "relpos/attention.h"
#include "relpos/params.h"
#include "relpos/schemes.h"

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

// kRelativeTable: relpos::InitRelativeTable (Xavier normal) times `std`.
enum class Init { kZeros, kOnes, kNormal, kRelativeTable };  // see BuildSpecs

// Every tensor of the model, in checkpoint order, with its initialisation
// and whether weight decay applies (BasicParameter::decay).
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool decay;
  Init init;
  double std = 0.0;  // kNormal: the std; kRelativeTable: the Xavier scale
};
constexpr bool kDecay = true, kNoDecay = false;

// Indices into the parameter vector for one block.
struct BlockParams {
  int64_t ln1_gamma, ln1_beta;
  int64_t wq, bq, wk, bk, wv, bv, wo, bo;
  int64_t rel_k = -1, rel_v = -1;
  int64_t t5_bias = -1, xl_w = -1, xl_u = -1, xl_v = -1;
  int64_t ln2_gamma, ln2_beta;
  int64_t ff_in_w, ff_in_b, ff_out_w, ff_out_b;
};

struct ParamIndex {
  int64_t token = -1, position = -1;
  std::vector<BlockParams> blocks;
  int64_t final_gamma = -1, final_beta = -1, head_w = -1, head_b = -1;
};

// The parameter slot of a per-layer scheme table (the layer reads each
// role from its own MhaWeights field; nn::PositionInputs maps them to the
// attention inputs).
int64_t* Slot(BlockParams* b, TableRole role) {
  switch (role) {
    case TableRole::kKeyTable:
      return &b->rel_k;
    case TableRole::kValueTable:
      return &b->rel_v;
    case TableRole::kScoreBias:
      return &b->t5_bias;
    case TableRole::kXlProjection:
      return &b->xl_w;
    case TableRole::kXlContentBias:
      return &b->xl_u;
    case TableRole::kXlPositionBias:
      return &b->xl_v;
    case TableRole::kInputTable:
      break;
  }
  RELPOS_THROW(InvalidArgument,
               "a per-layer table cannot have role " << RoleName(role));
}

ParamIndex BuildSpecs(const ModelConfig& c, std::vector<ParamSpec>* specs) {
  ParamIndex idx;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay,
                 Init init, double std = 0.0) {
    specs->push_back({std::move(name), std::move(shape), decay, init, std});
    return static_cast<int64_t>(specs->size()) - 1;
  };
  // The position scheme's tensors come from the registry (names, shapes,
  // initialisation; docs/model.md, "Position schemes"), never decayed:
  // decaying rarely-seen position rows would pull them to zero for no
  // benefit.
  auto add_table = [&](const std::string& prefix, const SchemeTable& t) {
    return add(prefix + t.name, t.shape, kNoDecay,
               t.init == TableInitKind::kXavierNormal ? Init::kRelativeTable
                                                      : Init::kNormal,
               t.scale);
  };
  const std::vector<SchemeTable> tables =
      FindScheme(c.position).Tables(SchemeLayerOf(c));
  const int64_t d = c.d_model;
  // LeCun normal for every weight matrix (std 1/sqrt(fan_in)): with the
  // LayerNorm in front, each projection then keeps unit-variance activations.
  const double lecun_d = 1.0 / std::sqrt(static_cast<double>(d));
  const double lecun_ff = 1.0 / std::sqrt(static_cast<double>(c.d_ff));
  // Weight decay goes to the weight matrices and the token embedding; biases,
  // LayerNorm gains and every position table (absolute or relative) are left
  // alone, as in common practice.
  //
  // Token embeddings N(0, 1), on the scale of the sinusoidal table (RMS
  // 1/sqrt(2)); the learned absolute table uses the same scale.
  idx.token = add("embed.token", {c.vocab_size, d}, kDecay, Init::kNormal, 1.0);
  for (const SchemeTable& t : tables) {
    if (!t.per_layer()) idx.position = add_table("", t);
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    // A LayerNorm's gain and bias; a linear layer's weight and bias.
    auto norm = [&](const std::string& n, int64_t* gamma, int64_t* beta) {
      *gamma = add(p + n + ".gamma", {d}, kNoDecay, Init::kOnes);
      *beta = add(p + n + ".beta", {d}, kNoDecay, Init::kZeros);
    };
    auto linear = [&](const std::string& n, int64_t out, int64_t in, double std,
                      int64_t* w, int64_t* b) {
      *w = add(p + n + ".weight", {out, in}, kDecay, Init::kNormal, std);
      *b = add(p + n + ".bias", {out}, kNoDecay, Init::kZeros);
    };
    BlockParams b;
    norm("ln1", &b.ln1_gamma, &b.ln1_beta);
    linear("attn.q", d, d, lecun_d, &b.wq, &b.bq);
    linear("attn.k", d, d, lecun_d, &b.wk, &b.bk);
    linear("attn.v", d, d, lecun_d, &b.wv, &b.bv);
    linear("attn.out", d, d, lecun_d, &b.wo, &b.bo);
    for (const SchemeTable& t : tables) {
      if (t.per_layer()) *Slot(&b, t.role) = add_table(p + "attn.", t);
    }
    norm("ln2", &b.ln2_gamma, &b.ln2_beta);
    linear("ff.in", c.d_ff, d, lecun_d, &b.ff_in_w, &b.ff_in_b);
    linear("ff.out", d, c.d_ff, lecun_ff, &b.ff_out_w, &b.ff_out_b);
    idx.blocks.push_back(b);
  }
  idx.final_gamma = add("final_ln.gamma", {d}, kNoDecay, Init::kOnes);
  idx.final_beta = add("final_ln.beta", {d}, kNoDecay, Init::kZeros);
  idx.head_w =
      add("head.weight", {c.vocab_size, d}, kDecay, Init::kNormal, lecun_d);
  idx.head_b = add("head.bias", {c.vocab_size}, kNoDecay, Init::kZeros);
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
      o.scale = spec.std;
      o.seed = seed;
      // Shaw's [nb, dh] or [H, nb, dh] (the registry's shape).
      const std::vector<int64_t>& e = spec.shape;
      InitRelativeTable(e.size() == 3
                            ? TensorView<float>(v.data(), {e[0], e[1], e[2]})
                            : TensorView<float>(v.data(), {e[0], e[1]}),
                        o);
      break;
    }
  }
  return v;
}

// InvalidArgument naming the first inconsistent field of `b` (transformer.h,
// Forward, lists what is checked).
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
  if (FindScheme(c.position).input == SchemeInput::kLearnedTable) {
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

}  // namespace

template <typename T>
struct BasicTransformer<T>::State {
  ParamIndex index;

  // The last Forward's shapes and inputs. Every [rows, *] buffer below holds
  // only the valid positions, packed sequence after sequence (BlockShape):
  // padding costs no row-wise work, and only attention sees the padded
  // layout.
  int64_t batch = 0, length = 0, rows = 0;  // rows = sum of the lengths
  std::vector<int32_t> tokens;              // [rows]
  std::vector<int32_t> targets;             // [rows]
  std::vector<int64_t> lengths;             // [batch]
  AttentionOptions attention;
  BlockOptions block_options;  // dropout on (training) or off
  bool training = false;       // Backward may follow
  std::vector<T> sinusoid;     // [>= length, d_model], cached

  // Activations. Training: x_0 .. x_L and one BlockActivations per block, all
  // kept for Backward. Inference: x_0 only, updated in place by each block,
  // and inference_block shared by the blocks.
  std::vector<std::vector<T>> xs;  // [rows, d] each
  std::vector<BlockActivations<T>> blocks;
  BlockActivations<T> inference_block;
  uint64_t embed_drop_seed = 0;
  std::vector<T> lnf, lnf_mean, lnf_rstd;  // LayerNormF(x_L) [rows, d]
  std::vector<T> logits;                   // [rows, vocab]
  std::vector<int32_t> predictions;        // [rows]

  // The block shape of the last Forward (lengths points into `lengths`).
  BlockShape shape() const {
    return {batch, length, d_model, heads, d_ff, lengths.data()};
  }
  int64_t d_model = 0, heads = 0, d_ff = 0;
  nn::CrossEntropyResult ce;

  // Scratch.
  BlockScratch<T> scratch;
  std::vector<T> dresid;   // [rows, d]: gradient of the residual stream
  std::vector<T> dlnf;     // [rows, d]: gradient of lnf
  std::vector<T> dlogits;  // [rows, vocab]
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
    p.decay = spec.decay;
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

namespace {

// The tensors of block `bp` as BlockWeights (values) or BlockGrads (grads):
// `get` maps a parameter index to its buffer, -1 (an absent table) to null.
template <typename Out, typename Get>
Out BlockTensors(const BlockParams& bp, Get get) {
  return {get(bp.ln1_gamma),
          get(bp.ln1_beta),
          {get(bp.wq), get(bp.bq), get(bp.wk), get(bp.bk), get(bp.wv),
           get(bp.bv), get(bp.wo), get(bp.bo), get(bp.rel_k), get(bp.rel_v),
           get(bp.t5_bias), get(bp.xl_w), get(bp.xl_u), get(bp.xl_v)},
          get(bp.ln2_gamma),
          get(bp.ln2_beta),
          get(bp.ff_in_w),
          get(bp.ff_in_b),
          get(bp.ff_out_w),
          get(bp.ff_out_b)};
}

template <typename T>
BlockWeights<T> BlockWeightsOf(const BlockParams& bp,
                               const std::vector<BasicParameter<T>>& params) {
  return BlockTensors<BlockWeights<T>>(bp, [&](int64_t i) -> const T* {
    return i < 0 ? nullptr : params[i].value.data();
  });
}

template <typename T>
BlockGrads<T> BlockGradsOf(const BlockParams& bp,
                           std::vector<BasicParameter<T>>& params) {
  return BlockTensors<BlockGrads<T>>(bp, [&](int64_t i) -> T* {
    return i < 0 ? nullptr : params[i].grad.data();
  });
}

}  // namespace

// batch.tokens [B, N] -> logits [rows, V] (rows = the valid positions,
// packed) and the cross-entropy (st.ce); the
// residual stream x [rows, d] runs through the blocks in between.
template <typename T>
T BasicTransformer<T>::Forward(const Batch& batch, ForwardMode mode, Rng* rng) {
  const ModelConfig& c = config_;
  ValidateBatch(batch, c);
  const bool training = mode == ForwardMode::kTraining;
  RELPOS_CHECK_ARG(!training || rng != nullptr,
                   "Forward: rng must not be null for ForwardMode::kTraining");
  State& st = *state_;
  const ParamIndex& pi = st.index;
  const int64_t B = batch.batch, N = batch.length;
  const int64_t d = c.d_model, V = c.vocab_size;
  auto P = [&](int64_t i) -> const T* { return params_[i].value.data(); };
  st.training = false;  // until this pass has completed
  st.batch = B;
  st.length = N;
  st.d_model = d;
  st.heads = c.heads;
  st.d_ff = c.d_ff;
  st.lengths = batch.lengths;
  // Pack the valid positions' tokens and targets.
  st.tokens.clear();
  st.targets.clear();
  for (int64_t s = 0; s < B; ++s) {
    for (int64_t i = 0; i < batch.lengths[s]; ++i) {
      st.tokens.push_back(batch.tokens[s * N + i]);
      st.targets.push_back(batch.targets[s * N + i]);
    }
  }
  const int64_t rows = static_cast<int64_t>(st.tokens.size());
  st.rows = rows;
  const BlockShape shape = st.shape();
  st.attention = AttentionOptionsFor(c, N);
  st.attention.key_lengths = batch.lengths;
  st.block_options.dropout = training ? c.dropout : 0.0;
  st.block_options.positions = MhaPositionsFor(c);
  const bool dropout = st.block_options.dropout > 0.0;
  // One seed per dropout site, drawn in the order the sites run.
  auto drop_seed = [&]() -> uint64_t { return dropout ? rng->NextU64() : 0; };

  // ---- Input: x_0 = Dropout(TokenEmbedding + AbsolutePosition) ----
  std::vector<T>& x0 = st.xs[0];
  Resize(&x0, rows * d);
  nn::EmbeddingForward<T>(st.tokens.data(), P(pi.token), x0.data(),
                          {rows, V, d});
  AddInputPositions<T>(c, shape, pi.position < 0 ? nullptr : P(pi.position),
                       &st.sinusoid, x0.data());
  st.embed_drop_seed = drop_seed();
  if (dropout) {
    RowDropout<T>(true, x0.data(), x0.data(), shape, c.dropout,
                  st.embed_drop_seed);
  }

  // ---- Blocks: x_{l+1} = Block_l(x_l) ----
  for (int64_t l = 0; l < c.layers; ++l) {
    BlockActivations<T>& acts = training ? st.blocks[l] : st.inference_block;
    acts.attn_drop_seed = drop_seed();
    acts.ff_drop_seed = drop_seed();
    std::vector<T>& x_next = training ? st.xs[l + 1] : x0;
    Resize(&x_next, rows * d);
    BlockForward<T>((training ? st.xs[l] : x0).data(),
                    BlockWeightsOf(pi.blocks[l], params_), x_next.data(), &acts,
                    &st.scratch, shape, st.attention, st.block_options);
  }

  // ---- Output: logits = LayerNormF(x_L) Whead^T + bhead ----
  const std::vector<T>& x_last = training ? st.xs[c.layers] : x0;
  Resize(&st.lnf, rows * d);
  Resize(&st.lnf_mean, rows);
  Resize(&st.lnf_rstd, rows);
  nn::LayerNormForward<T>(x_last.data(), P(pi.final_gamma), P(pi.final_beta),
                          st.lnf.data(), st.lnf_mean.data(), st.lnf_rstd.data(),
                          {rows, d});
  Resize(&st.logits, rows * V);
  nn::LinearForward<T>(st.lnf.data(), P(pi.head_w), P(pi.head_b),
                       st.logits.data(), {rows, d, V});
  // loss = sum CE / count over the rows whose target is not -1.
  st.predictions.resize(rows);
  st.ce = nn::CrossEntropyForward<T>(st.logits.data(), st.targets.data(),
                                     st.predictions.data(), {rows, V});
  st.training = training;
  return st.ce.count > 0 ? static_cast<T>(st.ce.loss_sum / st.ce.count) : T(0);
}

// Counts of the last Forward: tokens from the cross-entropy, sequences from
// the targets [B, N] and predictions [B, N].
template <typename T>
void BasicTransformer<T>::AddMetrics(Metrics* metrics) const {
  const State& st = *state_;
  metrics->loss_sum += st.ce.loss_sum;
  metrics->tokens += st.ce.count;
  metrics->correct_tokens += st.ce.correct;
  int64_t row = 0;  // first packed row of sequence s
  for (int64_t s = 0; s < st.batch; ++s) {
    int64_t targets = 0;
    bool all_right = true;
    for (int64_t i = 0; i < st.lengths[s]; ++i) {
      const int64_t r = row + i;
      if (st.targets[r] < 0) continue;
      ++targets;
      all_right = all_right && st.predictions[r] == st.targets[r];
    }
    if (targets > 0) {
      ++metrics->sequences;
      if (all_right) ++metrics->correct_sequences;
    }
    row += st.lengths[s];
  }
}

template <typename T>
const std::vector<T>& BasicTransformer<T>::LastHidden() const {
  return state_->lnf;
}

template <typename T>
const std::vector<T>& BasicTransformer<T>::LastLogits() const {
  return state_->logits;
}

// [B, N]: the argmax of each valid position, -1 at padding.
template <typename T>
void BasicTransformer<T>::Predictions(std::vector<int32_t>* predictions) const {
  const State& st = *state_;
  const int64_t N = st.length;
  predictions->assign(st.batch * N, -1);
  int64_t row = 0;  // first packed row of sequence s
  for (int64_t s = 0; s < st.batch; ++s) {
    for (int64_t i = 0; i < st.lengths[s]; ++i) {
      (*predictions)[s * N + i] = st.predictions[row + i];
    }
    row += st.lengths[s];
  }
}

// dL/dlogits [rows, V] -> dL/dx_L [rows, d] -> (blocks, last to first) ->
// dL/dx_0 -> gradients of the embedding tables. Every grad is overwritten.
template <typename T>
void BasicTransformer<T>::Backward() {
  State& st = *state_;
  RELPOS_CHECK_ARG(st.training,
                   "Backward needs a preceding Forward with "
                   "ForwardMode::kTraining");
  const ModelConfig& c = config_;
  const ParamIndex& pi = st.index;
  const int64_t rows = st.rows;
  const int64_t d = c.d_model, V = c.vocab_size;
  const BlockShape shape = st.shape();
  auto P = [&](int64_t i) -> const T* { return params_[i].value.data(); };
  auto G = [&](int64_t i) -> T* { return params_[i].grad.data(); };
  if (st.ce.count == 0) {
    // No target: the loss is the constant 0 and every gradient is zero.
    for (auto& p : params_) std::fill(p.grad.begin(), p.grad.end(), T(0));
    return;
  }

  // ---- Output ----
  // Differentiates `loss = sum CE / count`.
  Resize(&st.dlogits, rows * V);
  nn::CrossEntropyBackward<T>(st.logits.data(), st.targets.data(),
                              static_cast<T>(1.0 / st.ce.count),
                              st.dlogits.data(), {rows, V});
  // Differentiates `logits = lnf Whead^T + bhead`.
  Resize(&st.dlnf, rows * d);
  nn::LinearBackward<T>(st.lnf.data(), P(pi.head_w), st.dlogits.data(),
                        st.dlnf.data(), G(pi.head_w), G(pi.head_b),
                        {rows, d, V});
  // Differentiates `lnf = LayerNormF(x_L)`; dresid = dL/dx_L.
  Resize(&st.dresid, rows * d);
  nn::LayerNormBackward<T>(st.xs[c.layers].data(), P(pi.final_gamma),
                           st.lnf_mean.data(), st.lnf_rstd.data(),
                           st.dlnf.data(), st.dresid.data(), G(pi.final_gamma),
                           G(pi.final_beta), {rows, d});

  // ---- Blocks: differentiates `x_{l+1} = Block_l(x_l)`, last to first ----
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    BlockBackward<T>(st.xs[l].data(), BlockWeightsOf(pi.blocks[l], params_),
                     st.blocks[l], st.dresid.data(),
                     BlockGradsOf(pi.blocks[l], params_), &st.scratch, shape,
                     st.attention, st.block_options);
  }

  // ---- Input ----
  // Differentiates `x_0 = Dropout(TokenEmbedding + AbsolutePosition)`.
  if (st.block_options.dropout > 0.0) {
    RowDropout<T>(false, st.dresid.data(), st.dresid.data(), shape, c.dropout,
                  st.embed_drop_seed);
  }
  nn::EmbeddingBackward<T>(st.tokens.data(), st.dresid.data(), G(pi.token),
                           {rows, V, d});
  if (pi.position >= 0) {
    // Differentiates `x[b, i] += table[i]` (the learned input table) for the
    // valid positions i < lengths[b]: dtable[i] sums dresid over the sequences
    // that reach i, in sequence order; rows no sequence reaches get zero.
    std::vector<T>& dpos = params_[pi.position].grad;
    std::fill(dpos.begin(), dpos.end(), T(0));
    const T* dx = st.dresid.data();
    for (int64_t s = 0; s < st.batch; ++s) {
      for (int64_t i = 0; i < st.lengths[s]; ++i) {
        T* dst = dpos.data() + i * d;
        for (int64_t j = 0; j < d; ++j) dst[j] += dx[j];
        dx += d;
      }
    }
  }
}

template <typename T>
T BasicTransformer<T>::ForwardBackward(const Batch& batch, Rng& rng,
                                       Metrics* metrics) {
  const T loss = Forward(batch, ForwardMode::kTraining, &rng);
  if (metrics != nullptr) AddMetrics(metrics);
  Backward();
  return loss;
}

template <typename T>
T BasicTransformer<T>::Evaluate(const Batch& batch, Metrics* metrics,
                                std::vector<int32_t>* predictions) {
  const T loss = Forward(batch, ForwardMode::kInference, nullptr);
  if (metrics != nullptr) AddMetrics(metrics);
  if (predictions != nullptr) Predictions(predictions);
  return loss;
}

template <typename T>
BlockWeights<T> BasicTransformer<T>::block_weights(int64_t layer) const {
  RELPOS_CHECK_ARG(layer >= 0 && layer < config_.layers,
                   "block_weights: layer must be in [0, " << config_.layers
                                                           << ") (got "
                                                           << layer << ")");
  return BlockWeightsOf(state_->index.blocks[layer], params_);
}

template class BasicTransformer<float>;
template class BasicTransformer<double>;

}  // namespace relpos::model
