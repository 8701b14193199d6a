// Incremental (key/value-cached) decoding for the decoder-only transformer of
// model/transformer.h, and for the decoder of a seq2seq model.
//
// A session keeps, per layer, the keys and values of every token it has seen
// ([batch, heads, capacity, dh] each). Appending tokens runs the blocks only
// on the new rows: their keys and values are written into the cache first,
// then each new query attends to its sequence's cached keys with one
// relpos::AttentionForward call (causal, query offset = the cache length
// before the append, key lengths = the cache length after it). A decoding
// step appends one token per sequence, so each layer's attention is an
// Nq = 1 call. Sequences may have different lengths (a batch of prompts of
// different sizes): each keeps its own length, and sequences that share
// their length go through attention together.
//
// A seq2seq session decodes hypotheses of source sentences: it encodes the
// sources once (BasicTransformer::Encode) and computes every decoder
// layer's cross-attention keys and values of each source once
// ([sources, heads, longest source, dh]); each appended row's
// cross-attention then reads them, the rows of all hypotheses of one source
// in one attention call (no position term, so the rows are independent
// queries). Each hypothesis has its source; Reorder keeps, duplicates or
// drops hypotheses (beam search, model/beam_search.h), and a source whose
// hypotheses are all gone is dropped from the cross-attention cache.
//
// The result equals the model's Forward(ForwardMode::kInference) on the
// whole prefix (and for seq2seq its source; up to rounding:
// decoder_session_test.cc checks it for every position scheme the model
// has). The session allocates only its caches, the absolute position terms
// of positions [0, capacity) (for schemes that add one at the input) and
// row buffers for the tokens of one call; nothing of a training pass.
//
// The session reads the model's parameters on every call and keeps a
// pointer to the model: the model must outlive the session, and its weights
// must not change while the session holds tokens (the cached keys and values
// and the position terms were computed from them).
#ifndef RELPOS_SRC_MODEL_DECODER_SESSION_H_
#define RELPOS_SRC_MODEL_DECODER_SESSION_H_

#include <cstdint>
#include <vector>

#include "model/quantized_linears.h"
#include "model/transformer.h"
#include "model/transformer_block.h"

namespace relpos::model {

template <typename T>
class BasicDecoderSession {
 public:
  // A session of `batch` empty sequences holding up to `capacity` tokens
  // each. InvalidArgument naming the argument for an encoder or seq2seq
  // model (incremental decoding needs the causal mask; a seq2seq model needs
  // its sources: the constructor below), batch < 1, capacity < 1, capacity >
  // max_len with learned positions, or a cache too large to allocate (more
  // than 2^34 elements). With `quantized` (int8 copies of this model's
  // weights, model/quantized_linears.h; it must outlive the session), the
  // linear layers it holds run in int8.
  BasicDecoderSession(const BasicTransformer<T>& model, int64_t batch,
                      int64_t capacity,
                      const QuantizedLinears* quantized = nullptr);
  // A seq2seq session: one empty hypothesis per source sentence (token ids
  // in [0, vocab_size), possibly none), each holding up to `capacity`
  // target tokens. InvalidArgument for another architecture, no source, a
  // bad id, a source beyond max_len with learned positions, or the sizes
  // above.
  BasicDecoderSession(const BasicTransformer<T>& model,
                      const std::vector<std::vector<int32_t>>& sources,
                      int64_t capacity,
                      const QuantizedLinears* quantized = nullptr);

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  // Tokens in sequence b's cache.
  int64_t length(int64_t b) const { return lengths_.at(b); }
  // Seq2seq: the source (its index in the constructor's list) that
  // hypothesis b decodes; b for decoder-only sessions.
  int64_t source_of(int64_t b) const;

  // Appends tokens[b] (at least one token each, ids in [0, vocab_size)) to
  // sequence b, for every b, and writes the logits of each sequence's last
  // new token: logits [batch, vocab_size]. The prompt of a generation is one
  // Append; each step after it is Step. InvalidArgument (and nothing
  // changes) for a wrong count of sequences, an empty sequence, an id out of
  // range or a sequence that would exceed the capacity.
  void Append(const std::vector<std::vector<int32_t>>& tokens,
              std::vector<T>* logits);
  // One token per sequence (tokens [batch]): Append with one-token lists.
  void Step(const std::vector<int32_t>& tokens, std::vector<T>* logits);

  // Shortens every sequence to at most `length` tokens (>= 0): the cached
  // tokens beyond are forgotten (and overwritten by later appends).
  void Truncate(int64_t length);

  // The sequences become parents.size() >= 1 sequences, sequence j a copy
  // of the old sequence parents[j] (its cached tokens and, for seq2seq, its
  // source): beam search keeps, duplicates and drops hypotheses with it.
  // InvalidArgument (and nothing changes) for an empty list, a parent out
  // of range, or a cache too large to allocate.
  void Reorder(const std::vector<int64_t>& parents);

 private:
  // Sequence b's slot of layer l's self-attention cache: [H, slot_, dh]
  // at slot slot_of_[b].
  T* Keys(int64_t l, int64_t b);
  T* Values(int64_t l, int64_t b);
  // Makes every slot hold at least `positions` (<= capacity_) rows: the
  // slots grow by half (kSlotRound rows at least, at most to capacity_)
  // and the cached rows move over, sequence b's to slot b (the free slots
  // go).
  void Grow(int64_t positions);
  // The constructors' shared part: caches, position terms, XL tables.
  void Init(int64_t batch);
  // The validated new rows of an Append, packed: rows_.tokens, positions,
  // first[b] (sequence b's first row; first[batch] = all rows).
  void PackNewRows(const std::vector<std::vector<int32_t>>& tokens,
                   std::vector<int64_t>* first);
  // rows_.order, at, t_ordered: the sequences in their slots' order, for
  // SelfAttention (after Grow, which renumbers the slots).
  void OrderBySlot(const std::vector<int64_t>& first);
  // The sublayers of block l on the new rows (rows_.x the residual stream):
  // self-attention with the cache (leaves its output in rows_.branch),
  // cross-attention over the cached sources (seq2seq), feed-forward.
  void SelfAttention(int64_t l, const BlockWeights<T>& w,
                     const std::vector<int64_t>& first);
  void CrossAttention(int64_t l, const BlockWeights<T>& w,
                      const std::vector<int64_t>& first);
  void FeedForward(const BlockWeights<T>& w, const T* residual);
  // Seq2seq: every decoder layer's cross-attention keys and values of the
  // encoder's output `memory` (rows packed source after source).
  void CacheSources(const std::vector<std::vector<int32_t>>& sources,
                    const std::vector<T>& memory);

  // y [rows, out] = x W^T + b, in int8 when quantized_ holds w.
  void Linear(const std::vector<T>& x, const T* w, const T* b,
              std::vector<T>* y, int64_t rows, int64_t in, int64_t out) const;

  const BasicTransformer<T>* model_;
  const QuantizedLinears* quantized_;
  ModelConfig side_;  // the decoder stack's config (DecoderSide)
  int64_t batch_, capacity_;
  // Positions each sequence's cache slot holds now (<= capacity_): the
  // caches grow with the longest sequence instead of holding capacity_
  // rows from the start.
  int64_t slot_ = 0;
  std::vector<int64_t> lengths_;        // [batch]
  // The caches hold slots_ >= batch_ slots; sequence b's is slot_of_[b]
  // (distinct; the other slots are free). Reorder moves a kept sequence's
  // slot to its first child instead of copying it, so only a parent's
  // second and later children are copied, into free slots.
  int64_t slots_ = 0;
  std::vector<int64_t> slot_of_;        // [batch]
  std::vector<std::vector<T>> keys_;    // [layers][slots_, H, slot_, dh]
  std::vector<std::vector<T>> values_;  // as keys_
  // Absolute position terms: row p is what the input side adds to the token
  // embedding at position p, [capacity, d_model]; empty for the schemes
  // that add nothing (computed with AddInputPositions, so every input-side
  // scheme of the model is covered).
  std::vector<T> input_terms_;
  // Transformer-XL: each layer's key table and pb (empty otherwise).
  std::vector<nn::MhaCache<T>> xl_;
  // Seq2seq: the live sources (those some hypothesis decodes), in the
  // constructor's order: their original index and length; each
  // hypothesis's index into them; each layer's cross-attention keys and
  // values [live, H, source_pad, dh] (zeros beyond each length).
  bool seq2seq_ = false;
  std::vector<int64_t> live_sources_, source_lengths_, hyp_source_;
  int64_t source_pad_ = 0;
  std::vector<std::vector<T>> cross_k_, cross_v_;
  // Row buffers of one call, [rows, *] with rows = the new tokens.
  struct Rows {
    std::vector<int32_t> tokens;
    std::vector<int64_t> position;  // absolute position of each row
    std::vector<T> x, ln, mean, rstd, q, k, v, heads_q, heads_out, merged;
    std::vector<T> branch, hs, h, ff_pre, ff_act, last;
    // OrderBySlot: sequences by slot, each one's first query row in that
    // order, their lengths in that order.
    std::vector<int64_t> order, at, t_ordered;
  } rows_;
};

using DecoderSession = BasicDecoderSession<float>;

extern template class BasicDecoderSession<float>;
extern template class BasicDecoderSession<double>;

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_DECODER_SESSION_H_
