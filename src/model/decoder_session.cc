// BasicDecoderSession of decoder_session.h. One Append runs, on the new rows
// only (packed sequence after sequence, as the model's Forward packs its
// valid positions):
//   x      = scale TokenEmbedding(tokens) + AbsolutePosition(position)
//   block l:
//     ln     = LayerNorm1(x);  q, k, v = ln W^T + b            [rows, d]
//     cache_l[b, :, t_b + i] = k, v of sequence b's new row i (split heads)
//     a      = Attention(q, cache_l; query offset t_b, keys [0, t_b + m_b))
//     h      = x + merge(a) Wo^T + bo
//     seq2seq: hs = h;  q = LayerNormC(hs) Wq^T + bq
//              a  = Attention(q, cross_l[source]; every source key)
//              h  = hs + merge(a) Wo^T + bo
//     x      = h + W2 GELU(W1 LayerNorm2(h) + b1) + b2
//   logits = LayerNormF(x at each sequence's last new row) Whead^T + bhead
// (scale = sqrt(d_model) and Whead = the token embedding for seq2seq).
// with the model's own layer functions in the order BlockForward uses, so
// the numbers are those of Forward(ForwardMode::kInference) up to the
// accumulation order inside attention and the matrix products.
#include "model/decoder_session.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "model/arch.h"
#include "model/positions.h"
#include "model/nn/embedding.h"
#include "model/nn/gelu.h"
#include "model/nn/layer_norm.h"
#include "model/nn/linear.h"
#include "model/nn/multi_head_attention.h"
#include "relpos/attention.h"

namespace relpos::model {
namespace {

// Rows a cache slot holds at first (fewer when the capacity is smaller);
// it grows by half (rounded up to kSlotRound rows) when a sequence outgrows
// it: at most a third of a slot's rows unused, where doubling left up to
// half (a beam-4 batch's peak memory is mostly this cache), and still a
// bounded number of copies per cached row.
constexpr int64_t kFirstSlot = 16;
constexpr int64_t kSlotRound = 8;

// Caps the cache (keys + values, all layers) an untrusted config or a large
// capacity could request: 2^34 elements is 64 GiB of float.
constexpr int64_t kMaxCacheElements = int64_t{1} << 34;

// Attention calls with fewer multiply-adds than this run on the calling
// thread (core/gemm.cc draws the same line for the products): a decoding
// step's attention is small, and waking the OpenMP team for it costs more
// than the work, far more on a busy machine where a spinning team waits for
// a descheduled member.
constexpr int64_t kSerialAttentionMacs = int64_t{1} << 17;

// ---- The per-scheme part of an incremental step ----
//
// Everything a position scheme changes in a decoding step, in one function.
// The schemes themselves are spelled once, in model/positions.h
// (AddInputPositions, AttentionOptionsFor, MhaPositionsFor) and
// nn::PositionInputs; this function applies them to new rows at arbitrary
// positions:
//   kInput     the session's input_terms come from AddInputPositions itself
//              (row p = the term for position p).
//   kQueryKey  RoPE rotates q[r] and k[r] to position[r] before k enters the
//              cache (so the cache holds rotated keys and each step rotates
//              one new row); Transformer-XL adds u to the queries.
//   kAttention the options of AttentionOptionsFor over `capacity` keys (XL's
//              unclipped table then covers every distance) with per-row
//              query offsets t[i] and key lengths t[i] + m; the tables, T5 bias and
//              XL pb from nn::PositionInputs, as the layer passes them.
enum class StepStage { kInput, kQueryKey, kAttention };

template <typename T>
struct StepPositionArgs {
  const ModelConfig* config = nullptr;
  nn::MhaPositions positions;
  int64_t capacity = 0;
  // kInput, kQueryKey: `rows` new rows at absolute positions position[r].
  int64_t rows = 0;
  const int64_t* position = nullptr;
  const std::vector<T>* input_terms = nullptr;  // [capacity, d] or empty
  T* x = nullptr;                // kInput: [rows, d] token embeddings
  T *q = nullptr, *k = nullptr;  // kQueryKey: [rows, d], heads side by side
  // kAttention: `count` sequences, sequence i with m new queries at
  // positions t[i] .. t[i] + m - 1 and keys [0, t[i] + m) in the cache.
  const int64_t* t = nullptr;
  int64_t m = 0, count = 0;
  const nn::MhaWeights<T>* weights = nullptr;  // kQueryKey, kAttention
  const nn::MhaCache<T>* xl = nullptr;         // XL's tables of this layer
  AttentionInputs<T>* inputs = nullptr;        // q, k, v already set
  AttentionOptions* options = nullptr;
};

template <typename T>
void StepPositions(StepStage stage, const StepPositionArgs<T>& a) {
  const ModelConfig& c = *a.config;
  const int64_t d = c.d_model, H = c.heads, dh = d / H;
  const nn::MhaPositions& p = a.positions;
  switch (stage) {
    case StepStage::kInput: {
      if (a.input_terms->empty()) return;
      for (int64_t r = 0; r < a.rows; ++r) {
        const T* term = a.input_terms->data() + a.position[r] * d;
        T* x = a.x + r * d;
        for (int64_t j = 0; j < d; ++j) x[j] += term[j];
      }
      return;
    }
    case StepStage::kQueryKey:
      // A row [d] is [1, H, 1, dh]: RopeHeads rotates it at its position.
      for (int64_t r = 0; r < a.rows && p.rope; ++r) {
        nn::RopeHeads<T>(false, a.q + r * d, 1, H, 1, dh, a.position[r], p);
        nn::RopeHeads<T>(false, a.k + r * d, 1, H, 1, dh, a.position[r], p);
      }
      for (int64_t r = 0; r < a.rows && p.xl; ++r) {
        for (int64_t i = 0; i < d; ++i) a.q[r * d + i] += a.weights->xl_u[i];
      }
      return;
    case StepStage::kAttention: {
      AttentionOptions& o = *a.options;
      o = AttentionOptionsFor(c, a.capacity);
      o.query_offsets.assign(a.t, a.t + a.count);
      o.key_lengths.resize(static_cast<size_t>(a.count));
      for (int64_t i = 0; i < a.count; ++i) o.key_lengths[i] = a.t[i] + a.m;
      nn::PositionInputs<T>(*a.weights, *a.xl, H, dh, o, p, a.inputs);
      return;
    }
  }
}

// InvalidArgument unless 2 (keys and values) x layers x sequences x
// positions x width elements fit the cap.
void CheckCacheSize(int64_t layers, int64_t sequences, int64_t positions,
                    int64_t width, const char* what) {
  const double elements =
      2.0 * static_cast<double>(layers) * static_cast<double>(sequences) *
      static_cast<double>(positions) * static_cast<double>(width);
  RELPOS_CHECK_ARG(elements <= static_cast<double>(kMaxCacheElements),
                   "DecoderSession: " << what << " of " << sequences << " x "
                                      << positions
                                      << " needs more than 2^34 elements");
}

// rows [sum of lengths, H * dh] of sequences packed one after another ->
// [count, H, pad, dh] blocks (the positions beyond each length untouched).
template <typename T>
void SplitSequences(const T* rows, const std::vector<int64_t>& lengths,
                    int64_t pad, int64_t H, int64_t dh, T* out) {
  int64_t row = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int64_t i = 0; i < lengths[s]; ++i, ++row) {
      for (int64_t h = 0; h < H; ++h) {
        std::copy_n(rows + row * H * dh + h * dh, dh,
                    out + ((s * H + h) * pad + i) * dh);
      }
    }
  }
}

}  // namespace

template <typename T>
void BasicDecoderSession<T>::Linear(const std::vector<T>& x, const T* w,
                                    const T* b, std::vector<T>* y,
                                    int64_t rows, int64_t in,
                                    int64_t out) const {
  Resize(y, rows * out);
  LinearMaybeInt8(quantized_, x.data(), w, b, y->data(), rows, in, out);
}


template <typename T>
void BasicDecoderSession<T>::Init(int64_t batch) {
  const ModelConfig& c = side_;
  RELPOS_CHECK_ARG(
      !model_->values_dropped() ||
          (quantized_ != nullptr &&
           static_cast<const void*>(quantized_->dropped_from()) ==
               static_cast<const void*>(model_)),
      "DecoderSession: this model keeps int8 weights only; decode with the "
      "int8 copies that dropped its float32 weights");
  RELPOS_CHECK_ARG(batch >= 1,
                   "DecoderSession: batch must be >= 1 (got " << batch << ")");
  RELPOS_CHECK_ARG(capacity_ >= 1, "DecoderSession: capacity must be >= 1 (got "
                                       << capacity_ << ")");
  RELPOS_CHECK_ARG(
      !HasLearnedInputTable(c) || capacity_ <= c.scheme.max_len,
      "DecoderSession: capacity "
          << capacity_ << " exceeds max_len = " << c.scheme.max_len
          << " (the learned position table has no rows beyond it)");
  CheckCacheSize(c.layers, batch, capacity_, c.d_model, "a cache of batch");
  batch_ = slots_ = batch;
  lengths_.assign(batch, 0);
  slot_of_.resize(batch);
  std::iota(slot_of_.begin(), slot_of_.end(), int64_t{0});
  // Zeros, so that the unwritten rows attention is told to ignore are finite.
  const int64_t d = c.d_model;
  slot_ = std::min(capacity_, kFirstSlot);
  keys_.assign(c.layers, std::vector<T>(batch * slot_ * d, T(0)));
  values_.assign(c.layers, std::vector<T>(batch * slot_ * d, T(0)));
  // input_terms_ row p = AddInputPositions' term for position p: run it on
  // one zero sequence of `capacity` positions.
  input_terms_.assign(capacity_ * d, T(0));
  const int64_t lengths[1] = {capacity_};
  const BlockShape shape{1, capacity_, d, c.heads, c.d_ff, lengths};
  std::vector<T> sinusoid;
  AddInputPositions<T>(c, shape, model_->decoder_weights().position, &sinusoid,
                       input_terms_.data());
  // Transformer-XL's key table and pb per layer, over every distance the
  // cache can hold (they depend on the weights only).
  const nn::MhaPositions positions = MhaPositionsFor(c);
  xl_.resize(c.layers);
  if (positions.xl) {
    const int64_t k = AttentionOptionsFor(c, capacity_).max_distance;
    for (int64_t l = 0; l < c.layers; ++l) {
      nn::XlAttentionTables<T>(model_->block_weights(l).attn, d, c.heads, k,
                               &xl_[l]);
    }
  }
  if (std::all_of(input_terms_.begin(), input_terms_.end(),
                  [](T v) { return v == T(0); })) {
    input_terms_.clear();  // a scheme without an input term: nothing to add
    input_terms_.shrink_to_fit();
  }
}

template <typename T>
BasicDecoderSession<T>::BasicDecoderSession(const BasicTransformer<T>& model,
                                            int64_t batch, int64_t capacity,
                                            const QuantizedLinears* quantized)
    : model_(&model), quantized_(quantized),
      side_(DecoderSide(model.config())), batch_(0),
      capacity_(capacity) {
  const ModelConfig& c = model.config();
  const ArchInfo& arch = Describe(c.arch);
  RELPOS_CHECK_ARG(arch.causal && !arch.source,
                   "incremental decoding needs a decoder model (arch = "
                   "decoder); this model's arch is "
                       << ToString(c.arch)
                       << (arch.source ? " (a seq2seq session takes the "
                                         "source sentences)"
                                       : ""));
  Init(batch);
}

template <typename T>
BasicDecoderSession<T>::BasicDecoderSession(
    const BasicTransformer<T>& model,
    const std::vector<std::vector<int32_t>>& sources, int64_t capacity,
    const QuantizedLinears* quantized)
    : model_(&model), quantized_(quantized),
      side_(DecoderSide(model.config())), batch_(0),
      capacity_(capacity) {
  const ModelConfig& c = model.config();
  RELPOS_CHECK_ARG(Describe(c.arch).source,
                   "DecoderSession: source sentences need a seq2seq model; "
                   "this model's arch is "
                       << ToString(c.arch));
  RELPOS_CHECK_ARG(!sources.empty(), "DecoderSession: no source sentence");
  int64_t longest = 1;
  for (const auto& s : sources) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  }
  CheckCacheSize(side_.layers, static_cast<int64_t>(sources.size()), longest,
                 c.d_model, "a cross-attention cache of sources");
  std::vector<T> memory;
  // Validates the ids and lengths; int8 through the same copies.
  model.Encode(sources, &memory, WeightsOf<T>(quantized_));
  Init(static_cast<int64_t>(sources.size()));
  seq2seq_ = true;
  CacheSources(sources, memory);
}

template <typename T>
void BasicDecoderSession<T>::CacheSources(
    const std::vector<std::vector<int32_t>>& sources,
    const std::vector<T>& memory) {
  const int64_t S = static_cast<int64_t>(sources.size());
  const int64_t d = side_.d_model, H = side_.heads, dh = d / H;
  live_sources_.resize(S);
  hyp_source_.resize(S);
  source_lengths_.resize(S);
  source_pad_ = 1;
  for (int64_t s = 0; s < S; ++s) {
    live_sources_[s] = hyp_source_[s] = s;
    source_lengths_[s] = static_cast<int64_t>(sources[s].size());
    source_pad_ = std::max(source_pad_, source_lengths_[s]);
  }
  // k, v = memory W^T + b for each decoder layer, split to [S, H, pad, dh].
  const int64_t rows = static_cast<int64_t>(memory.size()) / d;
  const DecoderWeights<T> dw = model_->decoder_weights();
  std::vector<T> proj(rows * d);
  cross_k_.assign(side_.layers, std::vector<T>(S * source_pad_ * d, T(0)));
  cross_v_.assign(side_.layers, std::vector<T>(S * source_pad_ * d, T(0)));
  for (int64_t l = 0; l < side_.layers; ++l) {
    const nn::MhaWeights<T>& cw = dw.blocks[l].cross;
    LinearMaybeInt8(quantized_, memory.data(), cw.wk, cw.bk, proj.data(), rows,
                    d, d);
    SplitSequences(proj.data(), source_lengths_, source_pad_, H, dh,
                   cross_k_[l].data());
    LinearMaybeInt8(quantized_, memory.data(), cw.wv, cw.bv, proj.data(), rows,
                    d, d);
    SplitSequences(proj.data(), source_lengths_, source_pad_, H, dh,
                   cross_v_[l].data());
  }
}

template <typename T>
int64_t BasicDecoderSession<T>::source_of(int64_t b) const {
  RELPOS_CHECK_ARG(b >= 0 && b < batch_, "DecoderSession::source_of: " << b
                                             << " is not a sequence (batch "
                                             << batch_ << ")");
  return seq2seq_ ? live_sources_[hyp_source_[b]] : b;
}

template <typename T>
T* BasicDecoderSession<T>::Keys(int64_t l, int64_t b) {
  return keys_[l].data() + slot_of_[b] * slot_ * side_.d_model;
}

template <typename T>
T* BasicDecoderSession<T>::Values(int64_t l, int64_t b) {
  return values_[l].data() + slot_of_[b] * slot_ * side_.d_model;
}

template <typename T>
void BasicDecoderSession<T>::Grow(int64_t positions) {
  if (positions <= slot_) return;
  const int64_t grown =
      (slot_ + slot_ / 2 + kSlotRound - 1) / kSlotRound * kSlotRound;
  const int64_t slot = std::min(capacity_, std::max(positions, grown));
  const int64_t H = side_.heads, dh = side_.d_model / H;
  for (int64_t l = 0; l < side_.layers; ++l) {
    for (std::vector<T>* cache : {&keys_[l], &values_[l]}) {
      // Sequence b moves to slot b: the free slots Reorder left go.
      std::vector<T> grown(static_cast<size_t>(batch_ * H * slot * dh), T(0));
      for (int64_t b = 0; b < batch_; ++b) {
        const int64_t from = slot_of_[b] * H;
        for (int64_t hh = 0; hh < H; ++hh) {
          std::copy_n(cache->data() + (from + hh) * slot_ * dh,
                      lengths_[b] * dh, grown.data() + (b * H + hh) * slot * dh);
        }
      }
      cache->swap(grown);
    }
  }
  slots_ = batch_;
  std::iota(slot_of_.begin(), slot_of_.end(), int64_t{0});
  slot_ = slot;
}

template <typename T>
void BasicDecoderSession<T>::Truncate(int64_t length) {
  RELPOS_CHECK_ARG(length >= 0, "DecoderSession::Truncate: length must be "
                                ">= 0 (got "
                                    << length << ")");
  for (int64_t& n : lengths_) n = std::min(n, length);
}

// Sequence j takes parents[j]'s cached rows (only the valid ones are
// copied: the rest of a slot is never read unmasked), length and source;
// sources left without a hypothesis leave the cross-attention cache.
template <typename T>
void BasicDecoderSession<T>::Reorder(const std::vector<int64_t>& parents) {
  const int64_t n = static_cast<int64_t>(parents.size());
  RELPOS_CHECK_ARG(n >= 1, "DecoderSession::Reorder: no sequence kept");
  for (int64_t j = 0; j < n; ++j) {
    RELPOS_CHECK_ARG(parents[j] >= 0 && parents[j] < batch_,
                     "DecoderSession::Reorder: parents["
                         << j << "] must be in [0, batch = " << batch_
                         << ") (got " << parents[j] << ")");
  }
  const int64_t d = side_.d_model, H = side_.heads, dh = d / H;
  const int64_t slot = slot_ * d;
  CheckCacheSize(side_.layers, n, capacity_, d, "a cache of batch");
  // A parent's first child takes the parent's slot as it is; its other
  // children get copies in free slots: those of sequences without children
  // (nothing reads them), then new ones. A copy reads a slot that no copy
  // writes, so the order does not matter.
  std::vector<int64_t> slot_of(static_cast<size_t>(n), -1);
  std::vector<char> taken(static_cast<size_t>(slots_), 0);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t s = slot_of_[parents[j]];
    if (!taken[s]) {
      taken[s] = 1;
      slot_of[j] = s;
    }
  }
  std::vector<int64_t> copies;  // the children that need a copy
  for (int64_t j = 0; j < n; ++j) {
    if (slot_of[j] < 0) copies.push_back(j);
  }
  int64_t next_free = 0;
  int64_t slots = slots_;
  for (int64_t j : copies) {
    while (next_free < slots_ && taken[next_free]) ++next_free;
    slot_of[j] = next_free < slots_ ? next_free++ : slots++;
  }
  for (int64_t l = 0; l < side_.layers; ++l) {
    for (std::vector<T>* cache : {&keys_[l], &values_[l]}) {
      if (slots > slots_) Resize(cache, slots * slot);
      for (int64_t j : copies) {
        const int64_t p = parents[j];
        const T* from = cache->data() + slot_of_[p] * slot;
        T* to = cache->data() + slot_of[j] * slot;
        for (int64_t hh = 0; hh < H; ++hh) {
          std::copy_n(from + hh * slot_ * dh, lengths_[p] * dh,
                      to + hh * slot_ * dh);
        }
      }
    }
  }
  slots_ = slots;
  slot_of_ = std::move(slot_of);
  std::vector<int64_t> lengths(n), sources(n);
  for (int64_t j = 0; j < n; ++j) {
    lengths[j] = lengths_[parents[j]];
    if (seq2seq_) sources[j] = hyp_source_[parents[j]];
  }
  lengths_ = std::move(lengths);
  batch_ = n;
  if (!seq2seq_) return;
  // Compact the live sources, keeping their order.
  const int64_t S = static_cast<int64_t>(live_sources_.size());
  std::vector<int64_t> remap(S, -1);
  for (int64_t s : sources) remap[s] = 0;
  int64_t kept = 0;
  const int64_t block = H * source_pad_ * dh;
  for (int64_t s = 0; s < S; ++s) {
    if (remap[s] < 0) continue;
    remap[s] = kept;
    if (kept != s) {
      for (int64_t l = 0; l < side_.layers; ++l) {
        std::copy_n(cross_k_[l].data() + s * block, block,
                    cross_k_[l].data() + kept * block);
        std::copy_n(cross_v_[l].data() + s * block, block,
                    cross_v_[l].data() + kept * block);
      }
      live_sources_[kept] = live_sources_[s];
      source_lengths_[kept] = source_lengths_[s];
    }
    ++kept;
  }
  live_sources_.resize(kept);
  source_lengths_.resize(kept);
  for (int64_t l = 0; l < side_.layers; ++l) {
    cross_k_[l].resize(kept * block);
    cross_v_[l].resize(kept * block);
  }
  for (int64_t j = 0; j < n; ++j) sources[j] = remap[sources[j]];
  hyp_source_ = std::move(sources);
}

template <typename T>
void BasicDecoderSession<T>::Step(const std::vector<int32_t>& tokens,
                                  std::vector<T>* logits) {
  RELPOS_CHECK_ARG(static_cast<int64_t>(tokens.size()) == batch_,
                   "DecoderSession::Step: tokens must hold one token per "
                   "sequence ("
                       << batch_ << "), got " << tokens.size());
  std::vector<std::vector<int32_t>> lists(batch_);
  for (int64_t b = 0; b < batch_; ++b) lists[b] = {tokens[b]};
  Append(lists, logits);
}

template <typename T>
void BasicDecoderSession<T>::PackNewRows(
    const std::vector<std::vector<int32_t>>& tokens,
    std::vector<int64_t>* first) {
  const int64_t B = batch_, V = side_.vocab_size;
  RELPOS_CHECK_ARG(static_cast<int64_t>(tokens.size()) == B,
                   "DecoderSession::Append: tokens must hold one list per "
                   "sequence ("
                       << B << "), got " << tokens.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t m = static_cast<int64_t>(tokens[b].size());
    RELPOS_CHECK_ARG(m >= 1, "DecoderSession::Append: tokens["
                                 << b << "] is empty (every sequence needs a "
                                         "token to predict from)");
    RELPOS_CHECK_ARG(lengths_[b] + m <= capacity_,
                     "DecoderSession::Append: sequence "
                         << b << " would hold " << lengths_[b] + m
                         << " tokens, beyond the capacity " << capacity_);
    for (int64_t i = 0; i < m; ++i) {
      const int32_t id = tokens[b][i];
      RELPOS_CHECK_ARG(id >= 0 && id < V, "DecoderSession::Append: tokens["
                                              << b << "][" << i
                                              << "] must be in [0, vocab_size "
                                                 "= "
                                              << V << ") (got " << id << ")");
    }
  }
  Rows& r = rows_;
  r.tokens.clear();
  r.position.clear();
  first->assign(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    (*first)[b] = static_cast<int64_t>(r.tokens.size());
    for (size_t i = 0; i < tokens[b].size(); ++i) {
      r.tokens.push_back(tokens[b][i]);
      r.position.push_back(lengths_[b] + static_cast<int64_t>(i));
    }
  }
  (*first)[B] = static_cast<int64_t>(r.tokens.size());
}

// The sequences in the order of their cache slots (Reorder leaves them in
// any order), once per Append for every layer: SelfAttention's calls take
// runs of sequences whose slots are consecutive, and its queries and
// outputs follow that order, sequence b's [H, m_b, dh] block from row
// at[b]; t_ordered holds the lengths (before the append) in that order.
template <typename T>
void BasicDecoderSession<T>::OrderBySlot(const std::vector<int64_t>& first) {
  const int64_t B = batch_;
  Rows& r = rows_;
  r.order.resize(static_cast<size_t>(B));
  r.at.resize(static_cast<size_t>(B));
  r.t_ordered.resize(static_cast<size_t>(B));
  std::iota(r.order.begin(), r.order.end(), int64_t{0});
  std::sort(r.order.begin(), r.order.end(), [&](int64_t a, int64_t b) {
    return slot_of_[a] < slot_of_[b];
  });
  for (int64_t i = 0, row = 0; i < B; ++i) {
    const int64_t b = r.order[i];
    r.at[b] = row;
    row += first[b + 1] - first[b];
    r.t_ordered[i] = lengths_[b];
  }
}

// ---- Attention sublayer: branch = MultiHeadAttention(LayerNorm1(x)) ----
template <typename T>
void BasicDecoderSession<T>::SelfAttention(int64_t l, const BlockWeights<T>& w,
                                           const std::vector<int64_t>& first) {
  const ModelConfig& c = side_;
  const int64_t B = batch_, d = c.d_model, H = c.heads, dh = d / H;
  const int64_t slot = slot_, rows = first[B];
  auto count = [&](int64_t b) { return first[b + 1] - first[b]; };
  Rows& r = rows_;
  StepPositionArgs<T> pos_args;
  pos_args.config = &side_;
  pos_args.positions = MhaPositionsFor(c);
  pos_args.capacity = capacity_;
  pos_args.rows = rows;
  pos_args.position = r.position.data();
  pos_args.input_terms = &input_terms_;
  nn::LayerNormForward<T>(r.x.data(), w.ln1_gamma, w.ln1_beta, r.ln.data(),
                          r.mean.data(), r.rstd.data(), {rows, d});
  Linear(r.ln, w.attn.wq, w.attn.bq, &r.q, rows, d, d);
  Linear(r.ln, w.attn.wk, w.attn.bk, &r.k, rows, d, d);
  Linear(r.ln, w.attn.wv, w.attn.bv, &r.v, rows, d, d);
  pos_args.q = r.q.data();
  pos_args.k = r.k.data();
  pos_args.weights = &w.attn;
  pos_args.xl = &xl_[l];
  StepPositions(StepStage::kQueryKey, pos_args);
  // Queries and outputs in slot order (OrderBySlot).
  const std::vector<int64_t>& order = r.order;
  const std::vector<int64_t>& at = r.at;
  const std::vector<int64_t>& t_ordered = r.t_ordered;
  // The new keys and values enter the cache ([H, slot, dh] per sequence);
  // the queries are split to [H, m_b, dh] per sequence.
  for (int64_t b = 0; b < B; ++b) {
    const int64_t m = count(b), t = lengths_[b];
    T* kc = Keys(l, b);
    T* vc = Values(l, b);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = (first[b] + i) * d;
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t to = (hh * slot + t + i) * dh, src = row + hh * dh;
        std::copy_n(r.k.data() + src, dh, kc + to);
        std::copy_n(r.v.data() + src, dh, vc + to);
        std::copy_n(r.q.data() + src, dh,
                    r.heads_q.data() + at[b] * d + (hh * m + i) * dh);
      }
    }
  }
  // One attention call per run of sequences in consecutive slots with the
  // same number of new tokens, each at its own query offset (its length)
  // with its own key length: a decoding step is one call per run of
  // occupied slots, Nq = 1, whatever the prompts' lengths.
  for (int64_t i0 = 0; i0 < B;) {
    const int64_t b0 = order[i0];
    int64_t i1 = i0 + 1;
    while (i1 < B && count(order[i1]) == count(b0) &&
           slot_of_[order[i1]] == slot_of_[order[i1 - 1]] + 1) {
      ++i1;
    }
    const int64_t n = i1 - i0, m = count(b0);
    AttentionInputs<T> in;
    in.q = ConstView<T>(r.heads_q.data() + at[b0] * d, {n, H, m, dh});
    in.k = ConstView<T>(Keys(l, b0), {n, H, slot, dh});
    in.v = ConstView<T>(Values(l, b0), {n, H, slot, dh});
    AttentionOptions options;
    pos_args.t = t_ordered.data() + i0;
    pos_args.m = m;
    pos_args.count = n;
    pos_args.inputs = &in;
    pos_args.options = &options;
    StepPositions(StepStage::kAttention, pos_args);
    // q.k and p.v for every query over its keys: 2 H m (t_b + m) dh per
    // sequence.
    int64_t keys = 0;
    for (int64_t i = i0; i < i1; ++i) keys += t_ordered[i] + m;
    if (2 * H * m * keys * dh < kSerialAttentionMacs) {
      options.num_threads = 1;
    }
    AttentionForward<T>(
        in, TensorView<T>(r.heads_out.data() + at[b0] * d, {n, H, m, dh}),
        TensorView<T>(), options);
    i0 = i1;
  }
  for (int64_t b = 0; b < B; ++b) {  // merge heads back to [rows, d]
    const int64_t m = count(b);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t hh = 0; hh < H; ++hh) {
        std::copy_n(r.heads_out.data() + at[b] * d + (hh * m + i) * dh, dh,
                    r.merged.data() + (first[b] + i) * d + hh * dh);
      }
    }
  }
  Linear(r.merged, w.attn.wo, w.attn.bo, &r.branch, rows, d, d);
}

// ---- Cross-attention sublayer (seq2seq): hs = x + branch;
//      branch = CrossAttention(LayerNormC(hs), the cached source) ----
// The new rows of each live source's hypotheses attend together: one
// [1, H, rows of the source, dh] query block per source, and one attention
// call per run of consecutive sources with as many rows.
template <typename T>
void BasicDecoderSession<T>::CrossAttention(int64_t l, const BlockWeights<T>& w,
                                            const std::vector<int64_t>& first) {
  const int64_t B = batch_, d = side_.d_model, H = side_.heads, dh = d / H;
  const int64_t rows = first[B], pad = source_pad_;
  const int64_t S = static_cast<int64_t>(live_sources_.size());
  Rows& r = rows_;
  Resize(&r.hs, rows * d);
  nn::AddLayerNormForward<T>(r.x.data(), r.branch.data(), w.cross_ln_gamma,
                             w.cross_ln_beta, r.hs.data(), r.ln.data(),
                             r.mean.data(), r.rstd.data(), {rows, d});
  Linear(r.ln, w.cross.wq, w.cross.bq, &r.q, rows, d, d);
  std::vector<std::vector<int64_t>> source_rows(S);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = first[b]; i < first[b + 1]; ++i) {
      source_rows[hyp_source_[b]].push_back(i);
    }
  }
  std::vector<int64_t> offset(S + 1, 0);  // of each source's [H, R, dh]
  for (int64_t s = 0; s < S; ++s) {
    const int64_t R = static_cast<int64_t>(source_rows[s].size());
    offset[s + 1] = offset[s] + R * d;
    for (int64_t j = 0; j < R; ++j) {
      for (int64_t hh = 0; hh < H; ++hh) {
        std::copy_n(r.q.data() + source_rows[s][j] * d + hh * dh, dh,
                    r.heads_q.data() + offset[s] + (hh * R + j) * dh);
      }
    }
  }
  auto count = [&](int64_t s) {
    return static_cast<int64_t>(source_rows[s].size());
  };
  for (int64_t s0 = 0; s0 < S;) {
    int64_t s1 = s0 + 1;
    while (s1 < S && count(s1) == count(s0)) ++s1;
    const int64_t n = s1 - s0, R = count(s0);
    if (R > 0) {
      AttentionInputs<T> in;
      in.q = ConstView<T>(r.heads_q.data() + offset[s0], {n, H, R, dh});
      in.k = ConstView<T>(cross_k_[l].data() + s0 * H * pad * dh,
                          {n, H, pad, dh});
      in.v = ConstView<T>(cross_v_[l].data() + s0 * H * pad * dh,
                          {n, H, pad, dh});
      AttentionOptions o = CrossAttentionOptions();
      o.key_lengths.assign(source_lengths_.begin() + s0,
                           source_lengths_.begin() + s1);
      if (2 * n * H * R * pad * dh < kSerialAttentionMacs) o.num_threads = 1;
      AttentionForward<T>(
          in, TensorView<T>(r.heads_out.data() + offset[s0], {n, H, R, dh}),
          TensorView<T>(), o);
    }
    s0 = s1;
  }
  for (int64_t s = 0; s < S; ++s) {  // merge heads back to [rows, d]
    const int64_t R = count(s);
    for (int64_t j = 0; j < R; ++j) {
      for (int64_t hh = 0; hh < H; ++hh) {
        std::copy_n(r.heads_out.data() + offset[s] + (hh * R + j) * dh, dh,
                    r.merged.data() + source_rows[s][j] * d + hh * dh);
      }
    }
  }
  Linear(r.merged, w.cross.wo, w.cross.bo, &r.branch, rows, d, d);
}

// ---- Feed-forward sublayer: h = residual + branch;
//      x = h + W2 GELU(W1 LayerNorm2(h) + b1) + b2 ----
template <typename T>
void BasicDecoderSession<T>::FeedForward(const BlockWeights<T>& w,
                                         const T* residual) {
  const int64_t d = side_.d_model, dff = side_.d_ff;
  Rows& r = rows_;
  const int64_t rows = static_cast<int64_t>(r.tokens.size());
  nn::AddLayerNormForward<T>(residual, r.branch.data(), w.ln2_gamma,
                             w.ln2_beta, r.h.data(), r.ln.data(), r.mean.data(),
                             r.rstd.data(), {rows, d});
  Linear(r.ln, w.ff_in_w, w.ff_in_b, &r.ff_pre, rows, d, dff);
  Resize(&r.ff_act, rows * dff);
  nn::GeluForward<T>(r.ff_pre.data(), r.ff_act.data(), rows * dff);
  Linear(r.ff_act, w.ff_out_w, w.ff_out_b, &r.branch, rows, dff, d);
  for (int64_t i = 0; i < rows * d; ++i) r.x[i] = r.h[i] + r.branch[i];
}

// tokens: batch lists of m_b >= 1 ids -> logits [batch, V] of each list's
// last token; the caches grow by m_b rows.
template <typename T>
void BasicDecoderSession<T>::Append(
    const std::vector<std::vector<int32_t>>& tokens, std::vector<T>* logits) {
  const ModelConfig& c = side_;
  const int64_t B = batch_, d = c.d_model, V = c.vocab_size;
  std::vector<int64_t> first;
  PackNewRows(tokens, &first);  // validates; nothing changed before this
  const int64_t rows = first[B];
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    longest = std::max(longest, lengths_[b] + first[b + 1] - first[b]);
  }
  Grow(longest);
  OrderBySlot(first);
  Rows& r = rows_;
  const DecoderWeights<T> dw = model_->decoder_weights();

  // ---- Input: x = scale TokenEmbedding + AbsolutePosition ----
  Resize(&r.x, rows * d);
  nn::EmbeddingWith<T>(WeightsOf<T>(quantized_), r.tokens.data(), dw.token,
                       r.x.data(), {rows, V, d});
  if (dw.embed_scale != T(1)) {
    for (T& v : r.x) v *= dw.embed_scale;
  }
  StepPositionArgs<T> pos_args;
  pos_args.config = &side_;
  pos_args.rows = rows;
  pos_args.position = r.position.data();
  pos_args.input_terms = &input_terms_;
  pos_args.x = r.x.data();
  StepPositions(StepStage::kInput, pos_args);

  for (std::vector<T>* buf : {&r.ln, &r.heads_q, &r.heads_out, &r.merged,
                              &r.h}) {
    Resize(buf, rows * d);
  }
  Resize(&r.mean, rows);
  Resize(&r.rstd, rows);
  for (int64_t l = 0; l < c.layers; ++l) {
    const BlockWeights<T>& w = dw.blocks[l];
    SelfAttention(l, w, first);
    const T* residual = r.x.data();
    if (seq2seq_) {
      CrossAttention(l, w, first);
      residual = r.hs.data();
    }
    FeedForward(w, residual);
  }

  // ---- Output: logits = LayerNormF(x) Whead^T + bhead, last rows only ----
  Resize(&r.last, B * d);
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(r.x.data() + (first[b + 1] - 1) * d, d, r.last.data() + b * d);
  }
  Resize(&r.ln, B * d);
  nn::LayerNormForward<T>(r.last.data(), dw.final_gamma, dw.final_beta,
                          r.ln.data(), r.mean.data(), r.rstd.data(), {B, d});
  Resize(logits, B * V);
  LinearMaybeInt8(quantized_, r.ln.data(), dw.head_w, dw.head_b,
                  logits->data(), B, d, V);
  for (int64_t b = 0; b < B; ++b) lengths_[b] += first[b + 1] - first[b];
}

template class BasicDecoderSession<float>;
template class BasicDecoderSession<double>;

}  // namespace relpos::model
