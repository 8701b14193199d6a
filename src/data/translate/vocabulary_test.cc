#include "data/translate/vocabulary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sentencepiece_trainer.h>

#include <string>
#include <vector>

#include "relpos/error.h"
#include "support/expect_invalid.h"
#include "base/rng.h"

namespace relpos::translate {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// Three thousand short sentences of made-up words (syllables drawn from a
// seeded Rng, so thousands of distinct words share pieces), every tenth a
// German one with umlauts, ß, typographic quotes and an ellipsis (which NFKC
// would rewrite) and a placeholder.
std::vector<std::string> Sentences() {
  static constexpr const char* kSyllables[] = {
      "ka", "lo", "mi", "ne", "ru", "sa", "ti", "bo", "da", "fe", "gu",
      "hi", "jo", "ze", "ver", "ung", "sch", "ei", "au", "str", "en", "er"};
  constexpr size_t kCount = sizeof(kSyllables) / sizeof(kSyllables[0]);
  Rng rng(7);
  std::vector<std::string> out;
  for (int i = 0; i < 3000; ++i) {
    if (i % 10 == 0) {
      out.push_back("Datei „%s“ öffnen … Größe: " + std::to_string(i) + " Bytes");
      continue;
    }
    std::string s;
    const int words = 3 + static_cast<int>(rng.Below(8));
    for (int w = 0; w < words; ++w) {
      if (w > 0) s += ' ';
      const int syllables = 1 + static_cast<int>(rng.Below(4));
      for (int k = 0; k < syllables; ++k) s += kSyllables[rng.Below(kCount)];
    }
    out.push_back(s + (i % 3 ? "." : "?"));
  }
  return out;
}

const Vocabulary& Trained() {
  static const Vocabulary v = Vocabulary::Train(Sentences(), {.size = 400});
  return v;
}

TEST(VocabularyTest, TrainingIsDeterministicWithFixedSpecialIds) {
  const Vocabulary again = Vocabulary::Train(Sentences(), {.size = 400});
  EXPECT_EQ(again.bytes(), Trained().bytes());  // byte-identical model
  EXPECT_EQ(Trained().size(), 400);
  EXPECT_EQ(Trained().Piece(Vocabulary::kPad), "<pad>");
  EXPECT_EQ(Trained().Piece(Vocabulary::kUnk), "<unk>");
  EXPECT_EQ(Trained().Piece(Vocabulary::kBos), "<s>");
  EXPECT_EQ(Trained().Piece(Vocabulary::kEos), "</s>");
  // Another size is another model.
  EXPECT_NE(Vocabulary::Train(Sentences(), {.size = 300}).bytes(),
            Trained().bytes());
}

TEST(VocabularyTest, EncodeDecodeRoundTripsTrainingText) {
  const std::vector<std::string> sentences = Sentences();
  int64_t pieces = 0;
  for (const std::string& s : sentences) {
    const std::vector<int32_t> ids = Trained().Encode(s);
    EXPECT_THAT(ids, ::testing::Not(Contains(Vocabulary::kUnk))) << s;
    for (const int32_t id : ids) EXPECT_GE(id, 4) << s;
    EXPECT_EQ(Trained().Decode(ids), s);
    pieces += static_cast<int64_t>(ids.size());
  }
  // Subwords, not characters: well under one piece per byte.
  int64_t bytes = 0;
  for (const std::string& s : sentences) bytes += static_cast<int64_t>(s.size());
  EXPECT_LT(pieces, bytes / 2);
  // No NFKC: the ellipsis and the typographic quotes survive.
  const std::string german = "Datei „%s“ öffnen … Größe";
  EXPECT_EQ(Trained().Decode(Trained().Encode(german)), german);
}

TEST(VocabularyTest, SpecialIdsAndUnknownCharacters) {
  std::vector<int32_t> ids = Trained().Encode("kalo mine");
  std::vector<int32_t> framed = {Vocabulary::kBos};
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.push_back(Vocabulary::kEos);
  framed.push_back(Vocabulary::kPad);
  EXPECT_EQ(Trained().Decode(framed), "kalo mine");
  // A character the training text never had is <unk>.
  EXPECT_THAT(Trained().Encode("kalo € mine"), Contains(Vocabulary::kUnk));
  EXPECT_TRUE(Trained().Encode("").empty());
}

TEST(VocabularyTest, FromBytesRoundTripsAndRejectsGarbage) {
  const Vocabulary loaded =
      Vocabulary::FromBytes(Trained().bytes(), "checkpoint/vocab");
  EXPECT_EQ(loaded.bytes(), Trained().bytes());
  EXPECT_EQ(loaded.Encode("kalo mine rusa."),
            Trained().Encode("kalo mine rusa."));
  const std::string& good = Trained().bytes();
  for (const std::string& garbage :
       {std::string(""), std::string("not a model"),
        std::string(1000, '\xFF'), good.substr(0, good.size() / 2),
        good.substr(7)}) {
    try {
      Vocabulary::FromBytes(garbage, "checkpoint/vocab");
      ADD_FAILURE() << "accepted " << garbage.size() << " bytes of garbage";
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr("checkpoint/vocab"));
    }
  }
  EXPECT_THROW(Vocabulary::FromBytes(
                   std::string(Vocabulary::kMaxModelBytes + 1, '\0'), "big"),
               FormatError);
}

TEST(VocabularyTest, RefusesAModelWithOtherSpecialIds) {
  // SentencePiece's own defaults: unk 0, bos 1, eos 2, no pad.
  const std::vector<std::string> sentences = Sentences();
  struct Iterator : sentencepiece::SentenceIterator {
    explicit Iterator(const std::vector<std::string>& s) : s_(s) {}
    bool done() const override { return i_ >= s_.size(); }
    void Next() override { ++i_; }
    const std::string& value() const override { return s_[i_]; }
    sentencepiece::util::Status status() const override { return {}; }
    const std::vector<std::string>& s_;
    size_t i_ = 0;
  } input(sentences);
  std::string model;
  ASSERT_TRUE(sentencepiece::SentencePieceTrainer::Train(
                  {{"vocab_size", "150"}, {"minloglevel", "1"}}, &input, &model)
                  .ok());
  try {
    Vocabulary::FromBytes(model, "foreign.model");
    ADD_FAILURE() << "accepted other special ids";
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("foreign.model"));
    EXPECT_THAT(e.what(), HasSubstr("ids 0/1/2/3"));
  }
}

TEST(VocabularyTest, BadArgumentsAreInvalidArgument) {
  const std::vector<std::string> few = {"a b c", "d e f"};
  ExpectInvalid([&] { Vocabulary::Train(few, {.size = 8}); },
                {"vocabulary size", "8"});
  ExpectInvalid([&] { Vocabulary::Train(few, {.size = 5000}); },
                {"could not train", "5000"});
  ExpectInvalid([&] { Vocabulary::Train({"", ""}, {.size = 100}); },
                {"no sentences"});
  ExpectInvalid([&] { Vocabulary::Train({"ok", "bad \xFF"}, {.size = 100}); },
                {"sentence 1", "UTF-8"});
  ExpectInvalid([&] { Vocabulary::Train(few, {.threads = 0}); },
                {"threads"});
  ExpectInvalid([] { Trained().Encode("bad \xC3"); }, {"UTF-8"});
  const std::vector<int32_t> out_of_range = {5, 400};
  ExpectInvalid([&] { Trained().Decode(out_of_range); }, {"400", "[0, 400)"});
  ExpectInvalid([] { Trained().Piece(-1); }, {"-1"});
}

}  // namespace
}  // namespace relpos::translate
