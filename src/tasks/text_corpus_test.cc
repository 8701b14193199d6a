#include "tasks/text_corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <unistd.h>

#include "relpos/error.h"

namespace relpos::tasks {
namespace {

using ::testing::HasSubstr;
using namespace std::string_literals;

std::filesystem::path TempDir() {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   ("relpos_text_corpus_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(TextCorpusTest, GeneratedIsDeterministicExactSizeAndLooksLikeText) {
  const TextCorpus a = TextCorpus::Generated(3, 20000);
  const TextCorpus b = TextCorpus::Generated(3, 20000);
  const TextCorpus c = TextCorpus::Generated(4, 20000);
  EXPECT_EQ(a.size(), 20000);
  EXPECT_EQ(a.bytes(), b.bytes());
  EXPECT_NE(a.bytes(), c.bytes());
  // Printable ASCII plus newlines only, with sentences and paragraphs.
  std::set<char> chars(a.bytes().begin(), a.bytes().end());
  for (const char ch : chars) {
    EXPECT_TRUE(ch == '\n' || (ch >= ' ' && ch <= '~')) << int(ch);
  }
  EXPECT_NE(a.bytes().find(". "), std::string::npos);
  EXPECT_NE(a.bytes().find(".\n\n"), std::string::npos);
  EXPECT_NE(a.bytes().find(", and "), std::string::npos);
  // A small alphabet: a byte model's unigram entropy is well below 8 bits.
  EXPECT_LT(chars.size(), 60u);
  EXPECT_GT(chars.size(), 20u);
}

TEST(TextCorpusTest, SampleIsAShiftedWindowInsideTheSplit) {
  const TextCorpus corpus = TextCorpus::Generated(1, 1000);
  EXPECT_EQ(corpus.train_size(), 900);
  EXPECT_EQ(corpus.held_out_size(), 100);
  Rng rng(9);
  for (const bool held_out : {false, true}) {
    for (int rep = 0; rep < 200; ++rep) {
      const int64_t length = 1 + rep % corpus.MaxSampleLength(held_out);
      const Example e = corpus.Sample(length, held_out, rng);
      ASSERT_EQ(static_cast<int64_t>(e.tokens.size()), length);
      ASSERT_EQ(e.targets.size(), e.tokens.size());
      // Find where the window starts and check it lies inside the split.
      const std::string window(e.tokens.begin(), e.tokens.end());
      std::string window_plus = window;
      window_plus.push_back(static_cast<char>(e.targets.back()));
      const int64_t lo = held_out ? corpus.train_size() : 0;
      const int64_t hi = held_out ? corpus.size() : corpus.train_size();
      bool found = false;
      for (size_t at = corpus.bytes().find(window_plus, lo);
           at != std::string::npos && static_cast<int64_t>(at) + length + 1 <= hi;
           at = corpus.bytes().find(window_plus, at + 1)) {
        found = true;
        break;
      }
      ASSERT_TRUE(found) << "window not inside the split";
      for (int64_t i = 0; i + 1 < length; ++i) {
        ASSERT_EQ(e.targets[i], e.tokens[i + 1]);  // next-byte targets
      }
    }
  }
  // The longest window of the held-out split is the whole split.
  const Example whole = corpus.Sample(99, true, rng);
  EXPECT_EQ(std::string(whole.tokens.begin(), whole.tokens.end()),
            corpus.bytes().substr(900, 99));
}

TEST(TextCorpusTest, SampleRejectsBadLengths) {
  const TextCorpus corpus = TextCorpus::Generated(1, 1000);
  Rng rng(1);
  EXPECT_THROW(corpus.Sample(0, false, rng), InvalidArgument);
  EXPECT_THROW(corpus.Sample(100, true, rng), InvalidArgument);
  try {
    corpus.Sample(5000, false, rng);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("[1, 899]"));
    EXPECT_THAT(e.what(), HasSubstr("got 5000"));
  }
}

TEST(TextCorpusTest, FromFileReadsBytesAndReportsProblems) {
  const auto dir = TempDir();
  const std::string text(300, 'a');
  WriteFile(dir / "ok.txt", text + "\xff\x00z"s);
  const TextCorpus corpus = TextCorpus::FromFile((dir / "ok.txt").string());
  EXPECT_EQ(corpus.size(), 303);
  // Bytes >= 128 become tokens 128..255 (not negative chars).
  Rng rng(0);
  const Example e = corpus.Sample(corpus.MaxSampleLength(true), true, rng);
  ASSERT_EQ(e.tokens.size(), 29u);  // the whole held-out split [273, 303)
  EXPECT_EQ(e.tokens[27], 0xff);
  EXPECT_EQ(e.tokens[28], 0);
  EXPECT_EQ(e.targets.back(), 'z');

  EXPECT_THROW(TextCorpus::FromFile((dir / "missing.txt").string()), IoError);
  EXPECT_THROW(TextCorpus::FromFile(dir.string()), IoError);  // a directory
  WriteFile(dir / "empty.txt", "");
  WriteFile(dir / "short.txt", "tiny");
  for (const char* name : {"empty.txt", "short.txt"}) {
    try {
      TextCorpus::FromFile((dir / name).string());
      FAIL() << name;
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr(name));
      EXPECT_THAT(e.what(), HasSubstr("at least 100 bytes"));
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace relpos::tasks
