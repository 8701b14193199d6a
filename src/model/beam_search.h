// Beam search and greedy decoding for seq2seq models (docs/model.md,
// "Decoding"), batched over sentences, on the cached decoder of
// model/decoder_session.h.
//
// The search is CTranslate2's (src/decoding.cc, BeamSearch::search), so that
// a model exported there decodes to the same tokens:
// - every sentence starts with one hypothesis (BOS); each step takes the
//   2 * beam best continuations (cumulative log-probability) over all of the
//   sentence's hypotheses and the vocabulary;
// - of those, the first `beam` are visited in order: one ending in EOS (or
//   any, at the sentence's last step) becomes a finished hypothesis and its
//   slot goes to the next candidate that does not end in EOS, so `beam`
//   hypotheses stay alive;
// - a sentence is done at its last step, or once `beam` hypotheses have
//   finished (with a length penalty), or once its best candidate finished
//   (without one: no later hypothesis can score higher);
// - finished hypotheses are scored log P(y) / lp(y) and the best is kept.
// Greedy decoding is beam 1: the argmax token at each step until EOS.
//
// Length penalty (Wu et al. 2016, eq. 14; Vaswani et al. used alpha 0.6):
//   kWu     lp(y) = ((5 + |y|) / 6)^alpha, |y| counting the EOS token
//           (OpenNMT-py's length_penalty "wu", which divides each step's
//           candidates by lp(step + 1), EOS included);
//   kPower  lp(y) = |y|^alpha, |y| counting the EOS token (CTranslate2
//           4.8's length_penalty = alpha: a finished 6-token hypothesis
//           of log-probability -1.1216 scored -0.3489 = -1.1216 / 7^0.6);
//   kNone   lp(y) = 1 (as alpha = 0 for either).
// The penalty only compares finished hypotheses of different lengths: the
// candidates of one step all have the same length, so ranking them by
// log-probability is ranking them by score.
#ifndef RELPOS_SRC_MODEL_BEAM_SEARCH_H_
#define RELPOS_SRC_MODEL_BEAM_SEARCH_H_

#include <cstdint>
#include <vector>

#include "model/quantized_linears.h"
#include "model/transformer.h"

namespace relpos::model {

enum class LengthPenalty { kWu, kPower, kNone };

struct BeamSearchOptions {
  int64_t beam_size = 4;  // 1: greedy
  LengthPenalty length_penalty = LengthPenalty::kWu;
  double alpha = 0.6;
  // A sentence of n source tokens gets at most max(1, ceil(max_length_ratio
  // * n)) decoding steps, and never more than max_length; a hypothesis that
  // reaches them ends without EOS (CTranslate2's max_decoding_length).
  double max_length_ratio = 2.0;
  int64_t max_length = 1024;
  int32_t bos = -1, eos = -1;  // the vocabulary's (PairSource::tokens())
  // Int8 copies of the decoder's linear layers (compute type int8), or
  // nullptr for float; they must outlive the search.
  const QuantizedLinears* quantized = nullptr;
};

// InvalidArgument naming the option: beam_size >= 1, alpha >= 0 and finite,
// max_length_ratio > 0, max_length >= 1, bos and eos in [0, vocab_size).
void Validate(const BeamSearchOptions& options, int64_t vocab_size);

// The decoding steps of a sentence of `source_length` tokens.
int64_t MaxDecodingSteps(int64_t source_length,
                         const BeamSearchOptions& options);

// lp(y) of a finished hypothesis of `tokens` tokens (EOS not included) that
// ended with EOS or not.
double LengthPenaltyOf(const BeamSearchOptions& options, int64_t tokens,
                       bool ended_by_eos);

struct Hypothesis {
  std::vector<int32_t> tokens;  // without BOS and EOS
  double log_prob = 0;          // sum of the token log-probabilities (EOS's)
  double score = 0;             // log_prob / lp
  bool ended_by_eos = false;    // false: stopped at the length limit
};

// The model side of a search: the live hypotheses (grouped by sentence, in
// sentence order), one token each per step.
template <typename T>
class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual int64_t vocab_size() const = 0;
  // Appends tokens[i] to live hypothesis i; logits [hypotheses, V] of what
  // follows each.
  virtual void Step(const std::vector<int32_t>& tokens,
                    std::vector<T>* logits) = 0;
  // The live hypotheses become parents.size() ones, j a copy of parents[j].
  virtual void Reorder(const std::vector<int64_t>& parents) = 0;
};

// The best hypothesis of each of the `max_steps.size()` sentences that
// `model` starts with (one empty hypothesis each), sentence s searched for
// at most max_steps[s] steps. InvalidArgument for bad options.
template <typename T>
std::vector<Hypothesis> BeamSearch(StepModel<T>& model,
                                   const std::vector<int64_t>& max_steps,
                                   const BeamSearchOptions& options);

// Translates token-id sources with a seq2seq model: a decoder session of
// the sources, then BeamSearch (one Hypothesis per source, in order).
// InvalidArgument for a model of another architecture, bad options or bad
// sources (DecoderSession's checks; a learned table shorter than a source's
// decoding steps).
template <typename T>
std::vector<Hypothesis> Translate(
    const BasicTransformer<T>& model,
    const std::vector<std::vector<int32_t>>& sources,
    const BeamSearchOptions& options);

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_BEAM_SEARCH_H_
