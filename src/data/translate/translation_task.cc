#include "data/translate/translation_task.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "base/check.h"

namespace relpos::translate {
namespace {

Vocabulary MakeVocabulary(const ParallelText& text,
                          const TranslationTaskOptions& options) {
  if (options.vocabulary.empty()) {
    return Vocabulary::TrainOnPairs(
        text.train,
        {.size = options.vocabulary_size, .threads = kVocabularyThreads});
  }
  Vocabulary v = Vocabulary::FromBytes(options.vocabulary, kVocabularyFile);
  if (v.size() != options.vocabulary_size) {
    RELPOS_THROW(FormatError, kVocabularyFile
                                  << ": holds " << v.size()
                                  << " pieces, the config's sentencepiece_size"
                                     " is "
                                  << options.vocabulary_size);
  }
  return v;
}

std::vector<TokenisedPair> Tokenise(const std::vector<TranslationPair>& pairs,
                                    const Vocabulary& vocabulary) {
  std::vector<TokenisedPair> out;
  out.reserve(pairs.size());
  for (const TranslationPair& p : pairs) {
    out.push_back({.source = p.source,
                   .target = p.target,
                   .source_ids = vocabulary.Encode(p.source),
                   .target_ids = vocabulary.Encode(p.target),
                   .words = CountWords(p.source)});
  }
  return out;
}

std::vector<int64_t> ByWords(const std::vector<TokenisedPair>& pairs) {
  std::vector<int64_t> order(pairs.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return pairs[a].words < pairs[b].words;
  });
  return order;
}

}  // namespace

int64_t CountWords(const std::string& text) {
  if (text.empty()) return 0;
  return 1 + std::count(text.begin(), text.end(), ' ');
}

TranslationTask::TranslationTask(const TranslationTaskOptions& options)
    : TranslationTask(LoadParallelText(options.corpus), options) {}

TranslationTask::TranslationTask(ParallelText text,
                                 const TranslationTaskOptions& options)
    : vocabulary_(MakeVocabulary(text, options)) {
  train_ = Tokenise(text.train, vocabulary_);
  test_ = Tokenise(text.test, vocabulary_);
  train_by_words_ = ByWords(train_);
  test_by_words_ = ByWords(test_);
  for (const auto* split : {&train_, &test_}) {
    for (const TokenisedPair& p : *split)
      max_words_ = std::max(max_words_, p.words);
  }
  max_source_ids_.assign(static_cast<size_t>(max_words_ + 1), 0);
  max_target_ids_.assign(static_cast<size_t>(max_words_ + 1), 0);
  for (const auto* split : {&train_, &test_}) {
    for (const TokenisedPair& p : *split) {
      auto& s = max_source_ids_[static_cast<size_t>(p.words)];
      auto& t = max_target_ids_[static_cast<size_t>(p.words)];
      s = std::max<int64_t>(s, static_cast<int64_t>(p.source_ids.size()));
      t = std::max<int64_t>(t, static_cast<int64_t>(p.target_ids.size()));
    }
  }
  for (size_t w = 1; w < max_source_ids_.size(); ++w) {
    max_source_ids_[w] = std::max(max_source_ids_[w], max_source_ids_[w - 1]);
    max_target_ids_[w] = std::max(max_target_ids_[w], max_target_ids_[w - 1]);
  }
  std::ostringstream d;
  d << text.description << "\n  SentencePiece vocabulary: "
    << vocabulary_.size() << " pieces ("
    << (options.vocabulary.empty() ? "trained on the training split"
                                   : "from the checkpoint")
    << "); sources of 1-" << max_words_ << " words";
  description_ = d.str();
}

int64_t TranslationTask::MaxSourceTokens(int64_t length) const {
  return max_source_ids_[static_cast<size_t>(
      std::clamp<int64_t>(length, 0, max_words_))];
}

int64_t TranslationTask::MaxTargetTokens(int64_t length) const {
  return max_target_ids_[static_cast<size_t>(
      std::clamp<int64_t>(length, 0, max_words_))];
}

std::pair<const int64_t*, const int64_t*> TranslationTask::WithWords(
    const std::vector<int64_t>& by_words,
    const std::vector<TokenisedPair>& pairs, int64_t lo, int64_t hi) const {
  const int64_t* begin = by_words.data();
  const int64_t* end = begin + by_words.size();
  const int64_t* first = std::partition_point(
      begin, end, [&](int64_t i) { return pairs[i].words < lo; });
  const int64_t* last = std::partition_point(
      first, end, [&](int64_t i) { return pairs[i].words <= hi; });
  return {first, last};
}

tasks::SequencePair TranslationTask::Sample(int64_t length, bool held_out,
                                            Rng& rng) const {
  const auto& pairs = held_out ? test_ : train_;
  const auto [first, last] = WithWords(held_out ? test_by_words_
                                                : train_by_words_,
                                       pairs, length, length);
  RELPOS_CHECK_ARG(first != last, "task translate: no "
                                      << (held_out ? "held-out" : "training")
                                      << " pair has a source of " << length
                                      << " words");
  const TokenisedPair& p = pairs[first[rng.Below(
      static_cast<uint64_t>(last - first))]];
  return {.source = p.source_ids, .target = p.target_ids};
}

tasks::SequencePair TranslationTask::SampleTrain(int64_t min_length,
                                                 int64_t max_length,
                                                 Rng& rng) const {
  const auto [first, last] =
      WithWords(train_by_words_, train_, min_length, max_length);
  RELPOS_CHECK_ARG(first != last, "task translate: no training pair has a "
                                  "source of "
                                      << min_length << "-" << max_length
                                      << " words");
  const TokenisedPair& p =
      train_[first[rng.Below(static_cast<uint64_t>(last - first))]];
  return {.source = p.source_ids, .target = p.target_ids};
}

}  // namespace relpos::translate
