// What training and evaluation report: the validation curve's points, the
// per-length metrics, and the evaluation examples' seed. Plain types that
// the trainer and the evaluator (src/train/) fill and the public Training /
// Evaluate (relpos/lab/training.h) return.
#ifndef RELPOS_TRAIN_RESULTS_H_
#define RELPOS_TRAIN_RESULTS_H_

#include <cstdint>

namespace relpos {

// One point of a translation run's validation curve (the train settings
// eval_every, eval_bleu_sentences and patience; docs/training.md,
// "Validation curve and early stopping").
struct ValidationPoint {
  int64_t step = 0;  // updates done when it was measured
  // Plain (unsmoothed) cross-entropy in nats per target token (EOS
  // included) of the teacher-forced held-out split, the one relpos eval
  // translates; `pairs` of its pairs (those the model can take).
  double loss = 0;
  int64_t pairs = 0;
  // Corpus BLEU of the beam-4 translations of `bleu_sentences` held-out
  // pairs, as EvaluateTranslation with max_sentences = eval_bleu_sentences
  // scores them ("all"); bleu_sentences 0: not measured.
  double bleu = 0;
  int64_t bleu_sentences = 0;
};

// Evaluation examples come from this seed mixed with the length, apart from
// every training stream, so all models see the same examples.
inline constexpr uint64_t kDefaultEvalSeed = 0x5EED0E7A1ULL;

struct LengthMetrics {
  int64_t length = 0;            // the size parameter
  int64_t sequence_length = 0;   // tokens in each example
  double token_accuracy = 0;     // correct / scored positions
  double sequence_accuracy = 0;  // sequences with every scored position right
  double loss = 0;               // mean cross-entropy (nats) per scored token
  // loss / ln 2: mean bits per scored token; for lm (one token per byte)
  // the held-out bits per byte.
  double bits_per_token = 0;
  int64_t tokens = 0, sequences = 0;
  // Task translate in a compare grid (RunCompare): BLEU and chrF of the
  // beam-4 translations of the held-out pairs whose source has
  // (previous length, length] words (EvaluateTranslation's buckets);
  // `sequences` counts them and `sequence_length` is `length`. 0
  // elsewhere.
  double bleu = 0, chrf = 0;
};

}  // namespace relpos

#endif  // RELPOS_TRAIN_RESULTS_H_
