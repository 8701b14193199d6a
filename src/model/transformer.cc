// The transformer of transformer.h, composed from the layers in src/model/nn/ and
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
#include <functional>
#include <limits>
#include <string>

#include "base/check.h"
#include "model/arch.h"
#include "model/positions.h"
#include "model/transformer_block.h"
#include "model/nn/cross_entropy.h"
#include "model/nn/dropout.h"
#include "model/nn/embedding.h"
#include "model/nn/layer_norm.h"
#include "model/nn/linear.h"
#include "model/nn/multi_head_attention.h"
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

// Indices into the parameter vector for one block (-1: absent).
struct BlockParams {
  int64_t ln1_gamma, ln1_beta;
  int64_t wq, bq, wk, bk, wv, bv, wo, bo;
  int64_t rel_k = -1, rel_v = -1;
  int64_t t5_bias = -1, xl_w = -1, xl_u = -1, xl_v = -1;
  int64_t ln2_gamma, ln2_beta;
  int64_t ff_in_w, ff_in_b, ff_out_w, ff_out_b;
  // Seq2seq decoder blocks: LayerNormC and the cross-attention projections.
  int64_t cross_ln_gamma = -1, cross_ln_beta = -1;
  int64_t cwq = -1, cbq = -1, cwk = -1, cbk = -1, cwv = -1, cbv = -1,
          cwo = -1, cbo = -1;
};

// One stack: its absolute position table (learned), blocks, final LayerNorm.
struct StackParams {
  int64_t position = -1;
  std::vector<BlockParams> blocks;
  int64_t final_gamma = -1, final_beta = -1;
};

// The model's tensors. `main` is the one stack of an encoder or decoder and
// the decoder stack of a seq2seq model, whose `encoder` stack is the other;
// head_w = -1 when the head is tied to the token embedding (seq2seq).
struct ParamIndex {
  int64_t token = -1;
  StackParams encoder, main;
  int64_t head_w = -1, head_b = -1;
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

using AddSpec = std::function<int64_t(std::string, std::vector<int64_t>, bool,
                                      Init, double)>;

// The position scheme's tensors come from the registry (names, shapes,
// initialisation; docs/model.md, "Position schemes"), never decayed:
// decaying rarely-seen position rows would pull them to zero for no
// benefit. `prefix` goes before the table's name.
int64_t AddTableSpec(const std::string& prefix, const SchemeTable& t,
                     const AddSpec& add) {
  return add(prefix + t.name, t.shape, kNoDecay,
             t.init == TableInitKind::kXavierNormal ? Init::kRelativeTable
                                                    : Init::kNormal,
             t.scale);
}

// The tensors of block `p` ("blocks.L.", "decoder.blocks.L.") of a stack
// configured as `c` (a side of the model), in checkpoint order; `cross`:
// with the cross-attention sublayer.
BlockParams AddBlockSpecs(const ModelConfig& c, const std::string& p,
                          bool cross, const AddSpec& add) {
  const int64_t d = c.d_model;
  // LeCun normal for every weight matrix (std 1/sqrt(fan_in)): with the
  // LayerNorm in front, each projection then keeps unit-variance activations.
  const double lecun_d = 1.0 / std::sqrt(static_cast<double>(d));
  const double lecun_ff = 1.0 / std::sqrt(static_cast<double>(c.d_ff));
  // A LayerNorm's gain and bias; a linear layer's weight and bias.
  auto norm = [&](const std::string& n, int64_t* gamma, int64_t* beta) {
    *gamma = add(p + n + ".gamma", {d}, kNoDecay, Init::kOnes, 0.0);
    *beta = add(p + n + ".beta", {d}, kNoDecay, Init::kZeros, 0.0);
  };
  auto linear = [&](const std::string& n, int64_t out, int64_t in, double std,
                    int64_t* w, int64_t* b) {
    *w = add(p + n + ".weight", {out, in}, kDecay, Init::kNormal, std);
    *b = add(p + n + ".bias", {out}, kNoDecay, Init::kZeros, 0.0);
  };
  BlockParams b;
  norm("ln1", &b.ln1_gamma, &b.ln1_beta);
  linear("attn.q", d, d, lecun_d, &b.wq, &b.bq);
  linear("attn.k", d, d, lecun_d, &b.wk, &b.bk);
  linear("attn.v", d, d, lecun_d, &b.wv, &b.bv);
  linear("attn.out", d, d, lecun_d, &b.wo, &b.bo);
  for (const SchemeTable& t : FindScheme(c.position).Tables(SchemeLayerOf(c))) {
    if (t.per_layer()) *Slot(&b, t.role) = AddTableSpec(p + "attn.", t, add);
  }
  if (cross) {
    norm("cross_ln", &b.cross_ln_gamma, &b.cross_ln_beta);
    linear("cross.q", d, d, lecun_d, &b.cwq, &b.cbq);
    linear("cross.k", d, d, lecun_d, &b.cwk, &b.cbk);
    linear("cross.v", d, d, lecun_d, &b.cwv, &b.cbv);
    linear("cross.out", d, d, lecun_d, &b.cwo, &b.cbo);
  }
  norm("ln2", &b.ln2_gamma, &b.ln2_beta);
  linear("ff.in", c.d_ff, d, lecun_d, &b.ff_in_w, &b.ff_in_b);
  linear("ff.out", d, c.d_ff, lecun_ff, &b.ff_out_w, &b.ff_out_b);
  return b;
}

// A stack's tensors under `prefix` ("" for the one stack of an encoder or
// decoder, "encoder." / "decoder." for seq2seq): the learned position table
// (its own per stack), the blocks, the final LayerNorm.
StackParams AddStackSpecs(const ModelConfig& side, const std::string& prefix,
                          bool cross, const AddSpec& add) {
  StackParams sp;
  const int64_t d = side.d_model;
  // The scheme's input table (learned: N(0, 1), the token embedding's
  // scale), from the registry.
  for (const SchemeTable& t :
       FindScheme(side.position).Tables(SchemeLayerOf(side))) {
    if (!t.per_layer()) sp.position = AddTableSpec(prefix, t, add);
  }
  for (int64_t l = 0; l < side.layers; ++l) {
    sp.blocks.push_back(AddBlockSpecs(
        side, prefix + "blocks." + std::to_string(l) + ".", cross, add));
  }
  sp.final_gamma =
      add(prefix + "final_ln.gamma", {d}, kNoDecay, Init::kOnes, 0.0);
  sp.final_beta =
      add(prefix + "final_ln.beta", {d}, kNoDecay, Init::kZeros, 0.0);
  return sp;
}

ParamIndex BuildSpecs(const ModelConfig& c, std::vector<ParamSpec>* specs) {
  ParamIndex idx;
  AddSpec add = [&](std::string name, std::vector<int64_t> shape, bool decay,
                    Init init, double std) {
    specs->push_back({std::move(name), std::move(shape), decay, init, std});
    return static_cast<int64_t>(specs->size()) - 1;
  };
  const int64_t d = c.d_model;
  const double lecun_d = 1.0 / std::sqrt(static_cast<double>(d));
  // Weight decay goes to the weight matrices and the token embedding; biases,
  // LayerNorm gains and every position table (absolute or relative) are left
  // alone, as in common practice: decaying rarely-seen position rows would
  // pull them to zero for no benefit.
  const ArchInfo& arch = Describe(c.arch);
  // Token embeddings: N(0, 1), on the scale of the sinusoidal table (RMS
  // 1/sqrt(2)); the learned absolute table uses the same scale. Tied (one
  // embedding for the inputs and the output projection): N(0, 1/d_model)
  // (fairseq's and Vaswani et al.'s d_model^-1/2): scaled by sqrt(d_model)
  // at the inputs it is N(0, 1) like the untied embeddings, and as the head
  // it gives unit-variance logits from the final LayerNorm.
  idx.token = add("embed.token", {c.vocab_size, d}, kDecay, Init::kNormal,
                  arch.tied_embedding ? lecun_d : 1.0);
  for (const StackInfo& stack : Stacks(c)) {
    (stack.over_source ? idx.encoder : idx.main) =
        AddStackSpecs(stack.side, stack.prefix, stack.cross, add);
  }
  if (!arch.tied_embedding) {
    idx.head_w =
        add("head.weight", {c.vocab_size, d}, kDecay, Init::kNormal, lecun_d);
  }
  idx.head_b = add("head.bias", {c.vocab_size}, kNoDecay, Init::kZeros, 0.0);
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
  if (HasLearnedInputTable(c)) {
    RELPOS_CHECK_ARG(b.length <= c.scheme.max_len,
                     "batch.length " << b.length
                                     << " exceeds the learned position "
                                        "table's max_len = "
                                     << c.scheme.max_len);
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

// The source side of a batch: a seq2seq model needs one (InvalidArgument
// naming the field), the other architectures take none.
void ValidateSource(const Batch& b, const ModelConfig& c) {
  if (!Describe(c.arch).source) {
    RELPOS_CHECK_ARG(b.source_length == 0 && b.source_tokens.empty() &&
                         b.source_lengths.empty(),
                     "batch.source_length / source_tokens / source_lengths "
                     "are for seq2seq models; this model's arch is "
                         << ToString(c.arch));
    return;
  }
  RELPOS_CHECK_ARG(b.source_length >= 1,
                   "batch.source_length must be >= 1 for a seq2seq model (got "
                       << b.source_length << ")");
  RELPOS_CHECK_ARG(b.batch <= (int64_t{1} << 31) / b.source_length,
                   "batch.batch * batch.source_length must be <= 2^31 (got "
                       << b.batch << " x " << b.source_length << ")");
  const int64_t rows = b.batch * b.source_length;
  RELPOS_CHECK_ARG(static_cast<int64_t>(b.source_tokens.size()) == rows,
                   "batch.source_tokens must have batch * source_length = "
                       << rows << " entries (got " << b.source_tokens.size()
                       << ")");
  RELPOS_CHECK_ARG(static_cast<int64_t>(b.source_lengths.size()) == b.batch,
                   "batch.source_lengths must have batch = "
                       << b.batch << " entries (got " << b.source_lengths.size()
                       << ")");
  if (HasLearnedInputTable(c)) {
    RELPOS_CHECK_ARG(b.source_length <= c.scheme.max_len,
                     "batch.source_length "
                         << b.source_length
                         << " exceeds the learned position table's max_len = "
                         << c.scheme.max_len);
  }
  for (int64_t s = 0; s < b.batch; ++s) {
    const int64_t len = b.source_lengths[s];
    RELPOS_CHECK_ARG(len >= 0 && len <= b.source_length,
                     "batch.source_lengths[" << s << "] must be in [0, "
                                             << b.source_length << "] (got "
                                             << len << ")");
    for (int64_t i = 0; i < len; ++i) {
      const int32_t t = b.source_tokens[s * b.source_length + i];
      RELPOS_CHECK_ARG(t >= 0 && t < c.vocab_size,
                       "batch.source_tokens["
                           << s << ", " << i << "] must be in [0, vocab_size = "
                           << c.vocab_size << ") (got " << t << ")");
    }
  }
}

// One stack's pass: its side's config and the last Forward's inputs,
// activations and outputs. Every [rows, *] buffer holds only the valid
// positions, packed sequence after sequence (BlockShape): padding costs no
// row-wise work, and only attention sees the padded layout.
template <typename T>
struct StackState {
  ModelConfig config;    // the side (EncoderSide / DecoderSide)
  T embed_scale = T(1);  // x_0 = embed_scale * TokenEmbedding + ...
  int64_t batch = 0, length = 0, rows = 0;  // rows = sum of the lengths
  std::vector<int32_t> tokens;              // [rows]
  std::vector<int32_t> targets;             // [rows] (the decoder side)
  std::vector<int64_t> lengths;             // [batch]
  AttentionOptions attention;
  BlockOptions block_options;  // dropout on (training) or off
  std::vector<T> sinusoid;     // [>= length, d_model], cached
  // Activations. Training: x_0 .. x_L and one BlockActivations per block, all
  // kept for Backward. Inference: x_0 only, updated in place by each block,
  // and inference_block shared by the blocks.
  std::vector<std::vector<T>> xs;  // [rows, d] each
  std::vector<BlockActivations<T>> blocks;
  BlockActivations<T> inference_block;
  uint64_t embed_drop_seed = 0;
  std::vector<T> lnf, lnf_mean, lnf_rstd;  // LayerNormF(x_L) [rows, d]

  // The block shape of the last Forward (lengths points into `lengths`).
  BlockShape shape() const {
    return {batch, length, config.d_model, config.heads, config.d_ff,
            lengths.data()};
  }
};

template <typename T>
StackState<T> MakeStack(const ModelConfig& side, bool scaled) {
  StackState<T> st;
  st.config = side;
  st.embed_scale =
      scaled ? static_cast<T>(std::sqrt(static_cast<double>(side.d_model)))
             : T(1);
  st.blocks.resize(side.layers);
  st.xs.resize(side.layers + 1);
  return st;
}

// The valid positions of a padded [B, N] batch side (targets may be null).
template <typename T>
void PackStack(int64_t B, int64_t N, const std::vector<int32_t>& tokens,
               const std::vector<int32_t>* targets,
               const std::vector<int64_t>& lengths, StackState<T>* st) {
  st->batch = B;
  st->length = N;
  st->lengths = lengths;
  st->tokens.clear();
  st->targets.clear();
  for (int64_t s = 0; s < B; ++s) {
    for (int64_t i = 0; i < lengths[s]; ++i) {
      st->tokens.push_back(tokens[s * N + i]);
      if (targets) st->targets.push_back((*targets)[s * N + i]);
    }
  }
  st->rows = static_cast<int64_t>(st->tokens.size());
}

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
          get(bp.ff_out_b),
          get(bp.cross_ln_gamma),
          get(bp.cross_ln_beta),
          {get(bp.cwq), get(bp.cbq), get(bp.cwk), get(bp.cbk), get(bp.cwv),
           get(bp.cbv), get(bp.cwo), get(bp.cbo)}};
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

// One stack's forward over the packed rows of *st:
//   x_0 = Dropout(embed_scale TokenEmbedding + AbsolutePosition)
//   x_{l+1} = Block_l(x_l)   (memory: a decoder's cross-attention input)
//   lnf = LayerNormF(x_L)
// kTraining keeps every block's activations. One dropout seed is drawn from
// *rng per site, in the order the sites run. `weights`: how the embedding
// lookup and the blocks' products read their matrices (Encode's int8
// inference; null: the float values).
template <typename T>
void StackForward(const StackParams& sp,
                  const std::vector<BasicParameter<T>>& params, int64_t token,
                  StackState<T>* st, BlockScratch<T>* scratch, bool training,
                  double dropout, Rng* rng, const BlockMemory<T>* memory,
                  const nn::WeightReader<T>* weights = nullptr) {
  const ModelConfig& c = st->config;
  auto P = [&](int64_t i) -> const T* { return params[i].value.data(); };
  const int64_t rows = st->rows, d = c.d_model, V = c.vocab_size;
  const BlockShape shape = st->shape();
  st->attention = AttentionOptionsFor(c, st->length);
  st->attention.key_lengths = st->lengths;
  st->block_options.dropout = training ? dropout : 0.0;
  st->block_options.positions = MhaPositionsFor(c);
  const bool drop = st->block_options.dropout > 0.0;
  auto drop_seed = [&]() -> uint64_t { return drop ? rng->NextU64() : 0; };

  // ---- Input: x_0 = Dropout(scale TokenEmbedding + AbsolutePosition) ----
  std::vector<T>& x0 = st->xs[0];
  Resize(&x0, rows * d);
  nn::EmbeddingWith<T>(weights, st->tokens.data(), P(token), x0.data(),
                       {rows, V, d});
  if (st->embed_scale != T(1)) {
    for (T& v : x0) v *= st->embed_scale;
  }
  AddInputPositions<T>(c, shape, sp.position < 0 ? nullptr : P(sp.position),
                       &st->sinusoid, x0.data());
  st->embed_drop_seed = drop_seed();
  if (drop) {
    RowDropout<T>(true, x0.data(), x0.data(), shape, dropout,
                  st->embed_drop_seed);
  }

  // ---- Blocks: x_{l+1} = Block_l(x_l) ----
  for (int64_t l = 0; l < c.layers; ++l) {
    BlockActivations<T>& acts = training ? st->blocks[l] : st->inference_block;
    acts.attn_drop_seed = drop_seed();
    if (memory != nullptr) acts.cross_drop_seed = drop_seed();
    acts.ff_drop_seed = drop_seed();
    std::vector<T>& x_next = training ? st->xs[l + 1] : x0;
    Resize(&x_next, rows * d);
    BlockForward<T>((training ? st->xs[l] : x0).data(),
                    BlockWeightsOf(sp.blocks[l], params), x_next.data(), &acts,
                    scratch, shape, st->attention, st->block_options, memory,
                    weights);
  }

  // ---- Output: lnf = LayerNormF(x_L) ----
  const std::vector<T>& x_last = training ? st->xs[c.layers] : x0;
  Resize(&st->lnf, rows * d);
  Resize(&st->lnf_mean, rows);
  Resize(&st->lnf_rstd, rows);
  nn::LayerNormForward<T>(x_last.data(), P(sp.final_gamma), P(sp.final_beta),
                          st->lnf.data(), st->lnf_mean.data(),
                          st->lnf_rstd.data(), {rows, d});
}

// Differentiates `x[b, i] += table[i]` for the valid positions i <
// lengths[b]: dtable[i] sums dx over the sequences that reach i, in sequence
// order; rows no sequence reaches get zero.
template <typename T>
void LearnedPositionBackward(const StackState<T>& st, const T* dx,
                             std::vector<T>* dtable) {
  const int64_t d = st.config.d_model;
  std::fill(dtable->begin(), dtable->end(), T(0));
  for (int64_t s = 0; s < st.batch; ++s) {
    for (int64_t i = 0; i < st.lengths[s]; ++i) {
      T* dst = dtable->data() + i * d;
      for (int64_t j = 0; j < d; ++j) dst[j] += dx[j];
      dx += d;
    }
  }
}

// Differentiates StackForward: dlnf [rows, d] = dL/dlnf in; the stack's
// gradients are overwritten, the token embedding's overwritten or added to
// (accumulate_token: a tied embedding's other uses came first); memory
// (decoder stacks) receives dL/dmemory. dresid is scratch [rows, d].
template <typename T>
void StackBackward(const StackParams& sp,
                   std::vector<BasicParameter<T>>& params, int64_t token,
                   const StackState<T>& st, const T* dlnf,
                   std::vector<T>* dresid, BlockScratch<T>* scratch,
                   const BlockMemory<T>* memory, bool accumulate_token) {
  const ModelConfig& c = st.config;
  auto P = [&](int64_t i) -> const T* { return params[i].value.data(); };
  auto G = [&](int64_t i) -> T* { return params[i].grad.data(); };
  const int64_t rows = st.rows, d = c.d_model, V = c.vocab_size;
  const BlockShape shape = st.shape();
  // Differentiates `lnf = LayerNormF(x_L)`; dresid = dL/dx_L.
  Resize(dresid, rows * d);
  nn::LayerNormBackward<T>(st.xs[c.layers].data(), P(sp.final_gamma),
                           st.lnf_mean.data(), st.lnf_rstd.data(), dlnf,
                           dresid->data(), G(sp.final_gamma), G(sp.final_beta),
                           {rows, d});
  // ---- Blocks: differentiates `x_{l+1} = Block_l(x_l)`, last to first ----
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    BlockBackward<T>(st.xs[l].data(), BlockWeightsOf(sp.blocks[l], params),
                     st.blocks[l], dresid->data(),
                     BlockGradsOf(sp.blocks[l], params), scratch, shape,
                     st.attention, st.block_options, memory);
  }
  // ---- Input ----
  // Differentiates `x_0 = Dropout(scale TokenEmbedding + AbsolutePosition)`.
  if (st.block_options.dropout > 0.0) {
    RowDropout<T>(false, dresid->data(), dresid->data(), shape, c.dropout,
                  st.embed_drop_seed);
  }
  if (sp.position >= 0) {
    LearnedPositionBackward(st, dresid->data(), &params[sp.position].grad);
  }
  if (st.embed_scale != T(1)) {
    for (T& v : *dresid) v *= st.embed_scale;
  }
  nn::EmbeddingBackward<T>(st.tokens.data(), dresid->data(), G(token),
                           {rows, V, d}, {.accumulate = accumulate_token});
}

}  // namespace

std::vector<ParameterShape> ParameterShapes(const ModelConfig& config) {
  Validate(config);
  std::vector<ParamSpec> specs;
  BuildSpecs(config, &specs);
  std::vector<ParameterShape> shapes;
  shapes.reserve(specs.size());
  for (ParamSpec& s : specs) {
    shapes.push_back({std::move(s.name), std::move(s.shape)});
  }
  return shapes;
}

template <typename T>
struct BasicTransformer<T>::State {
  ParamIndex index;
  // The one stack of an encoder or decoder; a seq2seq model's decoder.
  StackState<T> main;
  StackState<T> encoder;  // seq2seq only
  // Seq2seq: the decoder's cross-attention input (the encoder's lnf) and
  // its gradient.
  BlockMemory<T> memory;
  std::vector<T> dmemory;
  bool training = false;        // Backward may follow
  double label_smoothing = 0;   // of the last Forward
  std::vector<T> logits;             // [rows, vocab]
  std::vector<int32_t> predictions;  // [rows]
  nn::CrossEntropyResult ce;

  // Scratch.
  BlockScratch<T> scratch;
  std::vector<T> dresid;   // [rows, d]: gradient of the residual stream
  std::vector<T> dlnf;     // [rows, d]: gradient of lnf
  std::vector<T> dlogits;  // [rows, vocab]
};

template <typename T>
BasicTransformer<T>::BasicTransformer(const ModelConfig& config, Fill fill)
    : config_(config), state_(std::make_unique<State>()) {
  Validate(config_);
  std::vector<ParamSpec> specs;
  state_->index = BuildSpecs(config_, &specs);
  params_.reserve(specs.size());
  for (const ParamSpec& spec : specs) {
    BasicParameter<T> p;
    p.name = spec.name;
    p.shape = spec.shape;
    if (fill == Fill::kRandom) {
      const std::vector<float> values = InitialValues(spec, config_);
      p.value.assign(values.begin(), values.end());
    } else if (fill == Fill::kNone) {
      p.value.assign(1, std::numeric_limits<T>::quiet_NaN());
      values_dropped_ = true;
    } else {
      int64_t numel = 1;
      for (int64_t extent : spec.shape) numel *= extent;
      p.value.assign(static_cast<size_t>(numel), T(0));
    }
    // p.grad stays empty until the first Backward (AllocateGradients): a
    // model that only evaluates or decodes never holds a second copy.
    p.decay = spec.decay;
    params_.push_back(std::move(p));
  }
  // A tied embedding is scaled by sqrt(d_model) at every input.
  const ArchInfo& arch = Describe(config_.arch);
  state_->main = MakeStack<T>(DecoderSide(config_), arch.tied_embedding);
  if (arch.source) {
    state_->encoder = MakeStack<T>(EncoderSide(config_), arch.tied_embedding);
  }
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
std::vector<const T*> BasicTransformer<T>::DropValues(
    const std::vector<const T*>& values) {
  std::vector<size_t> which;
  for (const T* v : values) {
    size_t i = 0;
    while (i < params_.size() && params_[i].value.data() != v) ++i;
    RELPOS_CHECK_ARG(v != nullptr && i < params_.size(),
                     "DropValues: a pointer that is no parameter's data");
    which.push_back(i);
  }
  std::vector<const T*> kept;
  for (size_t i : which) {
    // The new one-element buffer exists before the old one is freed, so
    // its address is no other live parameter's.
    std::vector<T>(1, std::numeric_limits<T>::quiet_NaN())
        .swap(params_[i].value);
    kept.push_back(params_[i].value.data());
  }
  values_dropped_ = values_dropped_ || !which.empty();
  return kept;
}

template <typename T>
void BasicTransformer<T>::AllocateValue(int64_t index) {
  RELPOS_CHECK_ARG(index >= 0 && index < static_cast<int64_t>(params_.size()),
                   "AllocateValue: no parameter " << index);
  BasicParameter<T>& p = params_[static_cast<size_t>(index)];
  int64_t numel = 1;
  for (int64_t extent : p.shape) numel *= extent;
  std::vector<T>(static_cast<size_t>(numel), T(0)).swap(p.value);
}

template <typename T>
int64_t BasicTransformer<T>::NumParameters() const {
  int64_t n = 0;  // by shape: a dropped value (DropValues) keeps one
  for (const auto& p : params_) {
    int64_t size = 1;
    for (int64_t e : p.shape) size *= e;
    n += size;
  }
  return n;
}

template <typename T>
void BasicTransformer<T>::set_label_smoothing(double eps) {
  RELPOS_CHECK_ARG(eps >= 0.0 && eps < 1.0,
                   "label smoothing must be in [0, 1) (got " << eps << ")");
  label_smoothing_ = eps;
}

// batch.tokens [B, N] -> logits [rows, V] (rows = the valid positions,
// packed) and the cross-entropy (st.ce); the residual stream x [rows, d]
// runs through the stack's blocks in between (seq2seq: the encoder's stack
// over the source first, its output the decoder's cross-attention memory).
template <typename T>
T BasicTransformer<T>::Forward(const Batch& batch, ForwardMode mode, Rng* rng) {
  RELPOS_CHECK_ARG(!values_dropped_,
                   "this model keeps int8 weights only (its float32 linear "
                   "weights were dropped for quantized inference): the "
                   "float32 forward pass cannot run");
  const ModelConfig& c = config_;
  ValidateBatch(batch, c);
  ValidateSource(batch, c);
  const bool training = mode == ForwardMode::kTraining;
  RELPOS_CHECK_ARG(!training || rng != nullptr,
                   "Forward: rng must not be null for ForwardMode::kTraining");
  State& st = *state_;
  const ParamIndex& pi = st.index;
  st.training = false;  // until this pass has completed
  PackStack(batch.batch, batch.length, batch.tokens, &batch.targets,
            batch.lengths, &st.main);
  const BlockMemory<T>* memory = nullptr;
  if (Describe(c.arch).source) {
    PackStack(batch.batch, batch.source_length, batch.source_tokens, nullptr,
              batch.source_lengths, &st.encoder);
    StackForward<T>(pi.encoder, params_, pi.token, &st.encoder, &st.scratch,
                 training, c.dropout, rng, nullptr);
    st.memory.memory = st.encoder.lnf.data();
    st.memory.shape = st.encoder.shape().mha();
    st.memory.attention = CrossAttentionOptions();
    memory = &st.memory;
  }
  StackForward<T>(pi.main, params_, pi.token, &st.main, &st.scratch, training,
               c.dropout, rng, memory);

  // ---- Output: logits = lnf Whead^T + bhead (seq2seq: Whead = embed) ----
  const int64_t rows = st.main.rows, d = c.d_model, V = c.vocab_size;
  const int64_t head_w = pi.head_w >= 0 ? pi.head_w : pi.token;
  Resize(&st.logits, rows * V);
  nn::LinearForward<T>(st.main.lnf.data(), params_[head_w].value.data(),
                       params_[pi.head_b].value.data(), st.logits.data(),
                       {rows, d, V});
  // loss = sum CE / count over the rows whose target is not -1 (training:
  // label-smoothed).
  st.label_smoothing = training ? label_smoothing_ : 0.0;
  st.predictions.resize(rows);
  st.ce = nn::CrossEntropyForward<T>(
      st.logits.data(), st.main.targets.data(), st.predictions.data(),
      {rows, V}, {.label_smoothing = st.label_smoothing});
  st.training = training;
  return st.ce.count > 0 ? static_cast<T>(st.ce.smoothed_sum / st.ce.count)
                         : T(0);
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
  for (int64_t s = 0; s < st.main.batch; ++s) {
    int64_t targets = 0;
    bool all_right = true;
    for (int64_t i = 0; i < st.main.lengths[s]; ++i) {
      const int64_t r = row + i;
      if (st.main.targets[r] < 0) continue;
      ++targets;
      all_right = all_right && st.predictions[r] == st.main.targets[r];
    }
    if (targets > 0) {
      ++metrics->sequences;
      if (all_right) ++metrics->correct_sequences;
    }
    row += st.main.lengths[s];
  }
}

template <typename T>
const std::vector<T>& BasicTransformer<T>::LastHidden() const {
  return state_->main.lnf;
}

template <typename T>
const std::vector<T>& BasicTransformer<T>::LastLogits() const {
  return state_->logits;
}

// [B, N]: the argmax of each valid position, -1 at padding.
template <typename T>
void BasicTransformer<T>::Predictions(std::vector<int32_t>* predictions) const {
  const StackState<T>& st = state_->main;
  const int64_t N = st.length;
  predictions->assign(st.batch * N, -1);
  int64_t row = 0;  // first packed row of sequence s
  for (int64_t s = 0; s < st.batch; ++s) {
    for (int64_t i = 0; i < st.lengths[s]; ++i) {
      (*predictions)[s * N + i] = state_->predictions[row + i];
    }
    row += st.lengths[s];
  }
}

template <typename T>
void BasicTransformer<T>::AllocateGradients() {
  for (BasicParameter<T>& p : params_) {
    if (p.grad.size() != p.value.size()) p.grad.assign(p.value.size(), T(0));
  }
}

// dL/dlogits [rows, V] -> dL/dlnf [rows, d] -> (the stack, last block to
// first) -> dL/dx_0 -> the embedding tables; seq2seq then runs the
// encoder's stack backward from the memory's gradient. Every grad is
// overwritten; the tied embedding sums its three uses (head, decoder input,
// encoder input, in that order).
template <typename T>
void BasicTransformer<T>::Backward() {
  State& st = *state_;
  RELPOS_CHECK_ARG(st.training,
                   "Backward needs a preceding Forward with "
                   "ForwardMode::kTraining");
  AllocateGradients();
  const ModelConfig& c = config_;
  const ParamIndex& pi = st.index;
  const int64_t rows = st.main.rows;
  const int64_t d = c.d_model, V = c.vocab_size;
  if (st.ce.count == 0) {
    // No target: the loss is the constant 0 and every gradient is zero.
    for (auto& p : params_) std::fill(p.grad.begin(), p.grad.end(), T(0));
    return;
  }

  // ---- Output ----
  // Differentiates `loss = sum CE / count`.
  Resize(&st.dlogits, rows * V);
  nn::CrossEntropyBackward<T>(st.logits.data(), st.main.targets.data(),
                              static_cast<T>(1.0 / st.ce.count),
                              st.dlogits.data(), {rows, V},
                              {.label_smoothing = st.label_smoothing});
  // Differentiates `logits = lnf Whead^T + bhead`.
  const bool tied = pi.head_w < 0;
  const int64_t head_w = tied ? pi.token : pi.head_w;
  Resize(&st.dlnf, rows * d);
  nn::LinearBackward<T>(st.main.lnf.data(), params_[head_w].value.data(),
                        st.dlogits.data(), st.dlnf.data(),
                        params_[head_w].grad.data(),
                        params_[pi.head_b].grad.data(), {rows, d, V});

  // ---- The stack(s) ----
  BlockMemory<T>* memory = nullptr;
  if (Describe(c.arch).source) {
    st.dmemory.assign(static_cast<size_t>(st.encoder.rows * d), T(0));
    st.memory.dmemory = st.dmemory.data();
    memory = &st.memory;
  }
  StackBackward<T>(pi.main, params_, pi.token, st.main, st.dlnf.data(), &st.dresid,
                &st.scratch, memory, tied);
  if (Describe(c.arch).source) {
    StackBackward<T>(pi.encoder, params_, pi.token, st.encoder, st.dmemory.data(),
                  &st.dresid, &st.scratch, nullptr, true);
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
  const int64_t layers = state_->main.config.layers;
  RELPOS_CHECK_ARG(layer >= 0 && layer < layers,
                   "block_weights: layer must be in [0, " << layers << ") (got "
                                                           << layer << ")");
  return BlockWeightsOf(state_->index.main.blocks[layer], params_);
}

template <typename T>
DecoderWeights<T> BasicTransformer<T>::decoder_weights() const {
  const ParamIndex& pi = state_->index;
  auto P = [&](int64_t i) -> const T* {
    return i < 0 ? nullptr : params_[i].value.data();
  };
  DecoderWeights<T> w;
  w.token = P(pi.token);
  w.embed_scale = state_->main.embed_scale;
  w.position = P(pi.main.position);
  for (const BlockParams& bp : pi.main.blocks) {
    w.blocks.push_back(BlockWeightsOf(bp, params_));
  }
  w.final_gamma = P(pi.main.final_gamma);
  w.final_beta = P(pi.main.final_beta);
  w.head_w = P(pi.head_w >= 0 ? pi.head_w : pi.token);
  w.head_b = P(pi.head_b);
  return w;
}

template <typename T>
std::vector<BlockWeights<T>> BasicTransformer<T>::encoder_blocks() const {
  std::vector<BlockWeights<T>> out;
  for (const BlockParams& bp : state_->index.encoder.blocks) {
    out.push_back(BlockWeightsOf(bp, params_));
  }
  return out;
}

template <typename T>
void BasicTransformer<T>::Encode(const std::vector<std::vector<int32_t>>& sources,
                                 std::vector<T>* memory,
                                 const nn::WeightReader<T>* weights) const {
  const ModelConfig& c = config_;
  RELPOS_CHECK_ARG(Describe(c.arch).source,
                   "Encode needs a seq2seq model; this model's arch is "
                       << ToString(c.arch));
  RELPOS_CHECK_ARG(!sources.empty(), "Encode: no source sentence");
  RELPOS_CHECK_ARG(
      !values_dropped_ ||
          (weights != nullptr &&
           weights->holds_values_of() == static_cast<const void*>(this)),
      "Encode: this model keeps int8 weights only; encode with the int8 "
      "copies that dropped its float32 weights");
  StackState<T> st = MakeStack<T>(EncoderSide(c), true);
  st.batch = static_cast<int64_t>(sources.size());
  st.length = 1;
  for (size_t s = 0; s < sources.size(); ++s) {
    const int64_t n = static_cast<int64_t>(sources[s].size());
    RELPOS_CHECK_ARG(!HasLearnedInputTable(c) || n <= c.scheme.max_len,
                     "Encode: source " << s << " has " << n
                                       << " tokens, beyond the learned "
                                          "position table's max_len = "
                                       << c.scheme.max_len);
    for (size_t i = 0; i < sources[s].size(); ++i) {
      const int32_t t = sources[s][i];
      RELPOS_CHECK_ARG(t >= 0 && t < c.vocab_size,
                       "Encode: sources[" << s << "][" << i
                                          << "] must be in [0, vocab_size = "
                                          << c.vocab_size << ") (got " << t
                                          << ")");
      st.tokens.push_back(t);
    }
    st.lengths.push_back(n);
    st.length = std::max(st.length, n);
  }
  st.rows = static_cast<int64_t>(st.tokens.size());
  BlockScratch<T> scratch;
  StackForward<T>(state_->index.encoder, params_, state_->index.token, &st,
                  &scratch, /*training=*/false, 0.0, nullptr, nullptr,
                  weights);
  *memory = std::move(st.lnf);
}

template class BasicTransformer<float>;
template class BasicTransformer<double>;

}  // namespace relpos::model
