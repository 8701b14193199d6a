// Task "translate": a parallel corpus (parallel_text.h: gettext catalogs, a
// folder of .mo / .po files, or a TSV file) tokenised with one joint
// SentencePiece vocabulary (vocabulary.h), as a tasks::PairSource for the
// seq2seq model (docs/translation.md, "Training a translation model").
//
// The size parameter `length` of a pair is its source's number of words
// (space-separated; the corpus's text is normalised), so --train-lengths A-B
// trains on pairs whose source has A to B words and evaluation buckets speak
// of sentence lengths. The vocabulary is trained on the training split
// unless its bytes are given (out of a checkpoint's sentencepiece.model).
#ifndef RELPOS_SRC_DATA_TRANSLATE_TRANSLATION_TASK_H_
#define RELPOS_SRC_DATA_TRANSLATE_TRANSLATION_TASK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "relpos/data/parallel_text.h"
#include "data/tasks/pair_source.h"
#include "data/translate/vocabulary.h"

namespace relpos::translate {

inline constexpr const char* kTranslateTask = "translate";
// The checkpoint file that holds the vocabulary (Vocabulary::bytes()).
inline constexpr const char* kVocabularyFile = "sentencepiece.model";
// Trainer threads of the vocabulary: fixed, so that the model's bytes do not
// depend on the machine (vocabulary.h, "Determinism").
inline constexpr int32_t kVocabularyThreads = 2;

struct TranslationTaskOptions {
  ParallelTextOptions corpus;
  int32_t vocabulary_size = 8000;
  // A serialised vocabulary to use instead of training one (empty: train).
  std::string vocabulary;
};

// Words of a normalised text: its spaces + 1 (0 for "").
int64_t CountWords(const std::string& text);

// One pair of the corpus, as text and as piece ids.
struct TokenisedPair {
  std::string source, target;
  std::vector<int32_t> source_ids, target_ids;
  int64_t words = 0;  // of the source
};

class TranslationTask final : public tasks::PairSource {
 public:
  // Reads the corpus and trains (or reads) the vocabulary. Errors: those of
  // LoadParallelText and Vocabulary; FormatError when given vocabulary bytes
  // of another size than `vocabulary_size`.
  explicit TranslationTask(const TranslationTaskOptions& options);

  std::string name() const override { return kTranslateTask; }
  int32_t vocab_size() const override { return vocabulary_.size(); }
  tasks::PairTokens tokens() const override {
    return {.bos = Vocabulary::kBos, .eos = Vocabulary::kEos};
  }
  int64_t min_length() const override { return 1; }
  // The most source words of any pair (either split).
  int64_t max_length() const override { return max_words_; }
  int64_t MaxSourceTokens(int64_t length) const override;
  int64_t MaxTargetTokens(int64_t length) const override;
  // A pair whose source has exactly `length` words, uniformly among those of
  // the split; InvalidArgument if the split has none.
  tasks::SequencePair Sample(int64_t length, bool held_out,
                             Rng& rng) const override;
  // A training pair, uniformly among those whose source has min_length to
  // max_length words (so the corpus's own distribution of lengths);
  // InvalidArgument if there is none.
  tasks::SequencePair SampleTrain(int64_t min_length, int64_t max_length,
                                  Rng& rng) const override;
  std::string metric_description() const override {
    return "per-token accuracy of the teacher-forced target";
  }
  std::string source_description() const override { return description_; }

  std::string vocabulary() const override { return vocabulary_.bytes(); }
  const Vocabulary& vocab() const { return vocabulary_; }
  const std::vector<TokenisedPair>& train() const { return train_; }
  const std::vector<TokenisedPair>& test() const { return test_; }

 private:
  TranslationTask(ParallelText text, const TranslationTaskOptions& options);
  // Pairs whose source has [lo, hi] words: a range of `by_words`.
  std::pair<const int64_t*, const int64_t*> WithWords(
      const std::vector<int64_t>& by_words,
      const std::vector<TokenisedPair>& pairs, int64_t lo, int64_t hi) const;

  std::vector<TokenisedPair> train_, test_;
  // Indices of train_ / test_ sorted by source words (stable).
  std::vector<int64_t> train_by_words_, test_by_words_;
  // [w]: the most source / target ids among pairs of at most w words.
  std::vector<int64_t> max_source_ids_, max_target_ids_;
  int64_t max_words_ = 1;
  std::string description_;
  Vocabulary vocabulary_;
};

}  // namespace relpos::translate

#endif  // RELPOS_SRC_DATA_TRANSLATE_TRANSLATION_TASK_H_
