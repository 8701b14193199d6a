// The SentencePiece vocabulary (vocabulary.h), through SentencePiece's own
// API only: the trainer's key/value settings and in-memory sentence
// iterator, and the processor's serialised-model loader, so neither protobuf
// nor absl headers are needed.
#include "data/translate/vocabulary.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <string>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "data/translate/utf8.h"

namespace relpos::translate {
namespace {

// Feeds a list of sentences to the trainer, skipping empty ones.
class Sentences : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::vector<std::string>& sentences)
      : sentences_(sentences) {
    Skip();
  }
  bool done() const override { return next_ >= sentences_.size(); }
  void Next() override {
    ++next_;
    Skip();
  }
  const std::string& value() const override { return sentences_[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void Skip() {
    while (next_ < sentences_.size() && sentences_[next_].empty()) ++next_;
  }
  const std::vector<std::string>& sentences_;
  size_t next_ = 0;
};

// The longest sentence the trainer keeps, in bytes (longer ones it skips
// with a warning): above any pair the corpus keeps.
constexpr int64_t kMaxTrainSentenceBytes = 2 * kMaxPairTextBytes;

std::unordered_map<std::string, std::string> TrainerSettings(
    const VocabularyOptions& o) {
  return {
      {"model_type", "unigram"},
      {"vocab_size", std::to_string(o.size)},
      {"num_threads", std::to_string(o.threads)},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"max_sentence_length", std::to_string(kMaxTrainSentenceBytes)},
      {"pad_id", std::to_string(Vocabulary::kPad)},
      {"unk_id", std::to_string(Vocabulary::kUnk)},
      {"bos_id", std::to_string(Vocabulary::kBos)},
      {"eos_id", std::to_string(Vocabulary::kEos)},
      {"pad_piece", "<pad>"},
      {"unk_piece", "<unk>"},
      {"bos_piece", "<s>"},
      {"eos_piece", "</s>"},
      // Progress lines (INFO) off; SentencePiece's warnings stay on.
      {"minloglevel", "1"},
  };
}

}  // namespace

Vocabulary Vocabulary::Train(const std::vector<std::string>& sentences,
                             const VocabularyOptions& options) {
  RELPOS_CHECK_ARG(options.size >= kMinSize && options.size <= kMaxSize,
                   "vocabulary size must be in [" << kMinSize << ", "
                                                  << kMaxSize << "] (got "
                                                  << options.size << ")");
  RELPOS_CHECK_ARG(options.threads >= 1 && options.threads <= 128,
                   "vocabulary threads must be in [1, 128] (got "
                       << options.threads << ")");
  size_t non_empty = 0;
  for (size_t i = 0; i < sentences.size(); ++i) {
    RELPOS_CHECK_ARG(IsValidUtf8(sentences[i]),
                     "vocabulary training sentence " << i
                                                     << " is not valid UTF-8");
    non_empty += !sentences[i].empty();
  }
  RELPOS_CHECK_ARG(non_empty > 0, "no sentences to train a vocabulary on");
  Sentences input(sentences);
  std::string model;
  const sentencepiece::util::Status status =
      sentencepiece::SentencePieceTrainer::Train(TrainerSettings(options),
                                                 &input, &model);
  RELPOS_CHECK_ARG(status.ok(), "SentencePiece could not train a vocabulary of "
                                    << options.size << " pieces on "
                                    << non_empty
                                    << " sentences: " << status.message());
  return FromBytes(model, "the vocabulary just trained");
}

Vocabulary Vocabulary::TrainOnPairs(const std::vector<TranslationPair>& pairs,
                                    const VocabularyOptions& options) {
  std::vector<std::string> sentences;
  sentences.reserve(pairs.size() * 2);
  for (const TranslationPair& p : pairs) {
    sentences.push_back(p.source);
    sentences.push_back(p.target);
  }
  return Train(sentences, options);
}

Vocabulary Vocabulary::FromBytes(std::string_view model,
                                 const std::string& source) {
  if (static_cast<int64_t>(model.size()) > kMaxModelBytes) {
    RELPOS_THROW(FormatError, source << ": a SentencePiece model of "
                                     << model.size()
                                     << " bytes is larger than the "
                                     << kMaxModelBytes << " relpos reads");
  }
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status status = sp->LoadFromSerializedProto(model);
  if (!status.ok()) {
    RELPOS_THROW(FormatError, source << ": not a SentencePiece model ("
                                     << status.message() << ")");
  }
  const int pieces = sp->GetPieceSize();
  if (pieces < kMinSize || pieces > kMaxSize || sp->pad_id() != kPad ||
      sp->unk_id() != kUnk || sp->bos_id() != kBos || sp->eos_id() != kEos) {
    RELPOS_THROW(FormatError,
                 source << ": a SentencePiece model of " << pieces
                        << " pieces with pad/unk/bos/eos ids " << sp->pad_id()
                        << "/" << sp->unk_id() << "/" << sp->bos_id() << "/"
                        << sp->eos_id() << "; relpos's vocabularies have "
                        << kMinSize << ".." << kMaxSize
                        << " pieces and ids 0/1/2/3");
  }
  return Vocabulary(std::string(model), std::move(sp));
}

int32_t Vocabulary::size() const { return sp_->GetPieceSize(); }

std::vector<int32_t> Vocabulary::Encode(std::string_view text) const {
  RELPOS_CHECK_ARG(IsValidUtf8(text), "text to encode is not valid UTF-8");
  std::vector<int> ids;
  const sentencepiece::util::Status status = sp_->Encode(text, &ids);
  RELPOS_CHECK_ARG(status.ok(), "SentencePiece could not encode the text: "
                                    << status.message());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

void Vocabulary::CheckId(int32_t id) const {
  RELPOS_CHECK_ARG(id >= 0 && id < size(), "piece id " << id
                                                       << " is outside the "
                                                          "vocabulary [0, "
                                                       << size() << ")");
}

std::string Vocabulary::Decode(std::span<const int32_t> ids) const {
  std::vector<int> checked;
  checked.reserve(ids.size());
  for (const int32_t id : ids) {
    CheckId(id);
    checked.push_back(id);
  }
  std::string text;
  const sentencepiece::util::Status status = sp_->Decode(checked, &text);
  RELPOS_CHECK_ARG(status.ok(), "SentencePiece could not decode: "
                                    << status.message());
  return text;
}

std::string Vocabulary::Piece(int32_t id) const {
  CheckId(id);
  return sp_->IdToPiece(id);
}

}  // namespace relpos::translate
