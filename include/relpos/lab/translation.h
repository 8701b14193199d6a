// Translating text with a checkpoint of task "translate" (a seq2seq model
// trained on a parallel corpus, with its SentencePiece vocabulary stored in
// the checkpoint as sentencepiece.model), and scoring it on the corpus's
// held-out split with BLEU and chrF per source-length bucket
// (docs/translation.md, "Training, evaluating and translating").
//
//   relpos::Translator t = relpos::Translator::Load("out");
//   for (const auto& r : t.Translate({"File not found"}, {.beam_size = 4}))
//     std::cout << r.text << "\n";
#ifndef RELPOS_LAB_TRANSLATION_H_
#define RELPOS_LAB_TRANSLATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "relpos/lab/model.h"
#include "relpos/lab/training.h"

namespace relpos {

// The task name, and the checkpoint file that holds the vocabulary.
inline constexpr const char* kTranslateTaskName = "translate";
inline constexpr const char* kSentencePieceFile = "sentencepiece.model";

// One translated line.
struct TextTranslation {
  std::string text;           // the decoded target text
  Translation best;           // its ids, log-probability, score
  int64_t source_tokens = 0;  // pieces of the (normalised) source
};

class Translator {
 public:
  // The model and vocabulary of a checkpoint of task translate. The corpus
  // is not read. InvalidArgument for a checkpoint of another task or
  // architecture; IoError / FormatError for a damaged one, one without
  // sentencepiece.model, or a vocabulary that does not fit the model.
  // compute_type as Model::Load takes it ("int8" / "int8_a8": loaded
  // quantized, for that compute type only).
  static Translator Load(const std::string& checkpoint_dir,
                         const std::string& compute_type = "float32");
  // The model of a Training (or Model::Load) of task translate, borrowed:
  // it must outlive the Translator.
  explicit Translator(Model& model);
  ~Translator();
  Translator(Translator&&) noexcept;
  Translator& operator=(Translator&&) noexcept;

  // The pieces of one line of text, normalised as the corpus is (runs of
  // whitespace become one space, the ends trimmed). InvalidArgument naming
  // the problem for text that is not UTF-8, empty (or only whitespace),
  // holds control characters, is longer than a corpus pair
  // (kMaxPairTextBytes, 4096 bytes) or has more than max_source_tokens()
  // pieces.
  std::vector<int32_t> Encode(const std::string& text) const;
  std::string Decode(const std::vector<int32_t>& ids) const;
  // The longest source the model takes: its max_len with learned absolute
  // positions, else kMaxTranslationSourceTokens.
  int64_t max_source_tokens() const;
  // Encodes every line (all are checked first), then decodes them as one
  // batch. BOS / EOS of `options` are the vocabulary's.
  std::vector<TextTranslation> Translate(const std::vector<std::string>& lines,
                                         const DecodeOptions& options = {});
  // The same for lines already encoded.
  std::vector<TextTranslation> TranslateIds(
      const std::vector<std::vector<int32_t>>& sources,
      const DecodeOptions& options = {});

  Model& model();

 private:
  Translator();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Longest source, in pieces, of a model without learned positions: a bound
// on decoding memory (the corpus's sides are at most 4096 bytes).
inline constexpr int64_t kMaxTranslationSourceTokens = 4096;

struct TranslationEvalOptions {
  DecodeOptions decode;
  // At most this many held-out pairs, evenly spaced through the split (in
  // its order); 0: all.
  int64_t max_sentences = 0;
  int64_t batch_size = 32;  // sentences decoded together
  int threads = 0;          // 0: the model's training thread count
  ProgressOptions progress{.label = "translate"};
};

// Scores of one set of held-out pairs.
struct TranslationScores {
  std::string label;  // "all", "1-16 (inside)", "17-32 (beyond)", ...
  int64_t min_words = 0, max_words = 0;  // of the source; max -1: unbounded
  bool inside = false;  // within the training lengths
  int64_t sentences = 0;
  double bleu = 0, chrf = 0;  // sacrebleu's corpus BLEU and chrF (0..100)
};

struct TranslationEvalResult {
  // "all" first, then the buckets that hold pairs: shorter than the
  // training lengths, inside them, then (L, 2L], (2L, 4L], beyond 4L for
  // L the longest training length.
  std::vector<TranslationScores> scores;
  std::vector<std::string> sources, references, hypotheses;  // split order
  int64_t skipped = 0;  // held-out sources longer than max_source_tokens()
  double seconds = 0;   // decoding
};

// Beam search on the held-out split of the model's corpus (read again from
// its corpus path, tokenised with the checkpoint's vocabulary), scored with
// CorpusBleu / CorpusChrf (relpos/data/metrics.h). InvalidArgument for a
// model of another task, bad options.
TranslationEvalResult EvaluateTranslation(Model& model,
                                          const TranslationEvalOptions& options);

}  // namespace relpos

#endif  // RELPOS_LAB_TRANSLATION_H_
