// The subword vocabulary of a translation model: one joint SentencePiece
// unigram model (Kudo 2018) over both languages, trained by relpos on the
// training split, carried as bytes (SentencePiece's serialised ModelProto)
// so that a checkpoint holds it and translates raw text
// (docs/translation.md, "Vocabulary").
//
// Fixed ids: 0 <pad>, 1 <unk>, 2 <s> (bos), 3 </s> (eos); pieces from 4.
// Text is not normalised beyond what the corpus already did (SentencePiece's
// "identity" rule: no NFKC, so "…" stays "…"), runs of spaces collapse and
// the ends are trimmed, and every character of the training text has a
// piece (character coverage 1.0). So Decode(Encode(s)) == s for any
// corpus-normalised s (parallel_corpus.h's NormaliseText) whose characters
// the training text had; a character it never saw encodes as <unk>, which
// decodes as " ⁇ ".
//
// Determinism: SentencePiece's unigram trainer draws no random numbers on
// this path (it samples only when told to sample input sentences), so the
// model's bytes are a pure function of the sentences, their order, the
// vocabulary size and the thread count (per-thread sums in the EM step), which
// is why the thread count is a setting rather than the machine's core count.
#ifndef RELPOS_SRC_DATA_TRANSLATE_VOCABULARY_H_
#define RELPOS_SRC_DATA_TRANSLATE_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "relpos/data/parallel_text.h"

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace relpos::translate {

struct VocabularyOptions {
  int32_t size = 8000;  // pieces, the four special ones included
  int32_t threads = 2;  // trainer threads (part of what fixes the result)
};

class Vocabulary {
 public:
  static constexpr int32_t kPad = 0, kUnk = 1, kBos = 2, kEos = 3;
  static constexpr int32_t kMinSize = 16;
  static constexpr int32_t kMaxSize = 1 << 20;
  // Largest model FromBytes accepts.
  static constexpr int64_t kMaxModelBytes = int64_t{64} << 20;

  // Trains on `sentences` (UTF-8, one line each; empty ones are skipped).
  // InvalidArgument for a size outside [kMinSize, kMaxSize], threads outside
  // [1, 128], no sentences, a sentence that is not UTF-8, or a size larger
  // than the text supports (SentencePiece's message says the largest).
  static Vocabulary Train(const std::vector<std::string>& sentences,
                          const VocabularyOptions& options = {});
  // Trains on both sides of `pairs`: source, then target, pair by pair.
  static Vocabulary TrainOnPairs(const std::vector<TranslationPair>& pairs,
                                 const VocabularyOptions& options = {});

  // A model from Train's bytes() (for example out of a checkpoint). Untrusted:
  // FormatError naming `source` for more than kMaxModelBytes, bytes that are
  // not a SentencePiece model, or a model whose special ids are not the ones
  // above.
  static Vocabulary FromBytes(std::string_view model, const std::string& source);

  // The serialised model (what FromBytes reads back).
  const std::string& bytes() const { return bytes_; }
  int32_t size() const;

  // Piece ids of `text`, without <s> / </s>. InvalidArgument if `text` is not
  // valid UTF-8.
  std::vector<int32_t> Encode(std::string_view text) const;
  // The text of `ids`; <pad>, <s> and </s> decode to nothing.
  // InvalidArgument for an id outside [0, size()).
  std::string Decode(std::span<const int32_t> ids) const;
  // The piece of an id ("▁Datei"); InvalidArgument outside [0, size()).
  std::string Piece(int32_t id) const;

 private:
  Vocabulary(std::string bytes,
             std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp)
      : bytes_(std::move(bytes)), sp_(std::move(sp)) {}
  void CheckId(int32_t id) const;

  std::string bytes_;
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace relpos::translate

#endif  // RELPOS_SRC_DATA_TRANSLATE_VOCABULARY_H_
