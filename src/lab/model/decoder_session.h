// Incremental (key/value-cached) decoding for the decoder-only transformer of
// model/transformer.h.
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
// The result equals the model's Forward(ForwardMode::kInference) on the
// whole prefix (up to rounding; decoder_session_test.cc checks it for every
// position scheme the model has). The session allocates only its cache, the
// absolute position terms of positions [0, capacity) (for schemes that add
// one at the input) and row buffers for the tokens of one call; nothing of a
// training pass.
//
// The session reads the model's parameters on every call and keeps a
// pointer to the model: the model must outlive the session, and its weights
// must not change while the session holds tokens (the cached keys and values
// and the position terms were computed from them).
#ifndef RELPOS_SRC_LAB_MODEL_DECODER_SESSION_H_
#define RELPOS_SRC_LAB_MODEL_DECODER_SESSION_H_

#include <cstdint>
#include <vector>

#include "model/transformer.h"
#include "model/transformer_block.h"

namespace relpos::model {

template <typename T>
class BasicDecoderSession {
 public:
  // A session of `batch` empty sequences holding up to `capacity` tokens
  // each. InvalidArgument naming the argument for an encoder model
  // (incremental decoding needs the causal mask), batch < 1, capacity < 1,
  // capacity > max_len with learned positions, or a cache too large to
  // allocate (more than 2^34 elements).
  BasicDecoderSession(const BasicTransformer<T>& model, int64_t batch,
                      int64_t capacity);

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  // Tokens in sequence b's cache.
  int64_t length(int64_t b) const { return lengths_.at(b); }

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

 private:
  // Layer `l`'s cache of sequence b: [heads, capacity, dh] at b's slot.
  T* Keys(int64_t l, int64_t b);
  T* Values(int64_t l, int64_t b);

  const BasicTransformer<T>* model_;
  int64_t batch_, capacity_;
  std::vector<int64_t> lengths_;        // [batch]
  std::vector<std::vector<T>> keys_;    // [layers][batch, H, capacity, dh]
  std::vector<std::vector<T>> values_;  // as keys_
  // Absolute position terms: row p is what the input side adds to the token
  // embedding at position p, [capacity, d_model]; empty for the schemes
  // that add nothing (computed with AddInputPositions, so every input-side
  // scheme of the model is covered).
  std::vector<T> input_terms_;
  // Transformer-XL: each layer's key table and pb (empty otherwise).
  std::vector<nn::MhaCache<T>> xl_;
  // Row buffers of one call, [rows, *] with rows = the new tokens.
  struct Rows {
    std::vector<int32_t> tokens;
    std::vector<int64_t> position;  // absolute position of each row
    std::vector<T> x, ln, mean, rstd, q, k, v, heads_q, heads_out, merged;
    std::vector<T> branch, h, ff_pre, ff_act, last;
  } rows_;
};

using DecoderSession = BasicDecoderSession<float>;

extern template class BasicDecoderSession<float>;
extern template class BasicDecoderSession<double>;

}  // namespace relpos::model

#endif  // RELPOS_SRC_LAB_MODEL_DECODER_SESSION_H_
