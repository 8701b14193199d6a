#include "data/tasks/text_corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>
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

// A fresh directory under TempDir() for one test.
std::filesystem::path FreshDir(const std::string& name) {
  const auto dir = TempDir() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

template <typename E, typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

// "m7": appended piecewise (GCC 12 warns, -Wrestrict, on "m" + string).
std::string Numbered(const char* prefix, int i) {
  return std::string(prefix).append(std::to_string(i));
}

// Text of `n` bytes that names its file, so tests can tell files apart.
std::string TextOf(const std::string& name, size_t n) {
  std::string s;
  while (s.size() < n) s.append("<").append(name).append("> ");
  s.resize(n);
  return s;
}

TEST(TextCorpusFromPath, DirectoryIsWalkedRecursivelyAndSplitByFileHash) {
  namespace fs = std::filesystem;
  const auto dir = FreshDir("tree");
  fs::create_directories(dir / "pkg" / "sub");
  std::vector<std::string> names;
  for (int i = 0; i < 30; ++i) {
    const std::string rel = (i % 3 == 0   ? "pkg/sub/"
                             : i % 3 == 1 ? "pkg/"
                                          : "") +
                            (Numbered("m", i) + ".py");
    WriteFile(dir / rel, TextOf(rel, 200));
    names.push_back(rel);
  }
  WriteFile(dir / "notes.txt", TextOf("notes.txt", 500));  // not *.py
  const TextCorpus c =
      TextCorpus::FromPath(dir.string(), {.pattern = "*.py"});
  EXPECT_EQ(c.stats().files_matched, 30);
  EXPECT_EQ(c.stats().files_read, 30);
  EXPECT_EQ(c.size(), 30 * 200);
  EXPECT_EQ(c.bytes().find("notes.txt"), std::string::npos);
  // Every file is wholly in the split its path hash chooses.
  int64_t held = 0;
  for (const std::string& rel : names) {
    const bool is_held = TextCorpus::HeldOutByHash(TextCorpus::PathHash(rel));
    held += is_held;
    const size_t at = c.bytes().find(TextOf(rel, 200));
    ASSERT_NE(at, std::string::npos) << rel;
    EXPECT_EQ(static_cast<int64_t>(at) >= c.train_size(), is_held) << rel;
  }
  ASSERT_GT(held, 0) << "pick names so that some file is held out";
  EXPECT_EQ(c.stats().held_out_files, held);
  EXPECT_EQ(c.held_out_size(), held * 200);
  EXPECT_THAT(c.source(), HasSubstr("30 of 30 matching files"));
  // The split of a file does not depend on the others: remove half the
  // files and the kept ones stay where they were.
  for (int i = 0; i < 30; i += 2) fs::remove(dir / names[i]);
  const TextCorpus half =
      TextCorpus::FromPath(dir.string(), {.pattern = "*.py"});
  for (int i = 1; i < 30; i += 2) {
    const size_t at = half.bytes().find(TextOf(names[i], 200));
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(static_cast<int64_t>(at) >= half.train_size(),
              TextCorpus::HeldOutByHash(TextCorpus::PathHash(names[i])));
  }
  // Deterministic: the same bytes on a second read.
  EXPECT_EQ(TextCorpus::FromPath(dir.string(), {.pattern = "*.py"}).bytes(),
            half.bytes());
  // The FNV-1a 64 test vector: hash("a") = 0xaf63dc4c8601ec8c.
  EXPECT_EQ(TextCorpus::PathHash("a"), 0xaf63dc4c8601ec8cULL);
}

TEST(TextCorpusFromPath, EmptyDirectoryNoMatchAndBadOptionsAreClearErrors) {
  const auto dir = FreshDir("empty");
  std::filesystem::create_directories(dir / "only_dirs" / "deeper");
  EXPECT_THAT(ErrorOf<FormatError>(
                  [&] { TextCorpus::FromPath(dir.string()); }),
              HasSubstr("holds no files"));
  WriteFile(dir / "a.txt", TextOf("a", 300));
  const std::string no_match = ErrorOf<FormatError>(
      [&] { TextCorpus::FromPath(dir.string(), {.pattern = "*.py"}); });
  EXPECT_THAT(no_match, HasSubstr("no file under"));
  EXPECT_THAT(no_match, HasSubstr("'*.py'"));
  EXPECT_THAT(no_match, HasSubstr("1 files seen"));
  EXPECT_THAT(ErrorOf<IoError>([&] {
                TextCorpus::FromPath((dir / "missing").string());
              }),
              HasSubstr("missing"));
  EXPECT_THAT(ErrorOf<InvalidArgument>([&] {
                TextCorpus::FromPath(dir.string(), {.pattern = "a/*.py"});
              }),
              HasSubstr("corpus_pattern"));
  EXPECT_THAT(ErrorOf<InvalidArgument>([&] {
                TextCorpus::FromPath(dir.string(), {.max_bytes = 10});
              }),
              HasSubstr("corpus_max_bytes"));
  // One matching file: split by position, like a single file.
  const TextCorpus one = TextCorpus::FromPath(dir.string());
  EXPECT_EQ(one.size(), 300);
  EXPECT_EQ(one.train_size(), 270);
}

TEST(TextCorpusFromPath, BinaryFilesAreSkippedAndCounted) {
  const auto dir = FreshDir("binary");
  for (int i = 0; i < 12; ++i) {
    WriteFile(dir / (Numbered("t", i) + ".txt"),
              TextOf(Numbered("t", i), 120));
  }
  WriteFile(dir / "blob.txt", "text then \0 a NUL"s + std::string(200, 'b'));
  WriteFile(dir / "image.txt", "\x89PNG\r\n\x1a\n\0\0\0\rIHDR"s);
  const TextCorpus c = TextCorpus::FromPath(dir.string());
  EXPECT_EQ(c.stats().skipped_binary, 2);
  EXPECT_EQ(c.stats().files_read, 12);
  EXPECT_EQ(c.bytes().find('\0'), std::string::npos);
  EXPECT_THAT(c.source(), HasSubstr("skipped 2 binary"));
  // Only binary files: refused; a single binary file: refused.
  const auto bin = FreshDir("all_binary");
  WriteFile(bin / "a.bin", "\0\1\2"s + std::string(200, 'x'));
  WriteFile(bin / "b.bin", "\0\1\2"s + std::string(200, 'y'));
  EXPECT_THAT(ErrorOf<FormatError>(
                  [&] { TextCorpus::FromPath(bin.string()); }),
              HasSubstr("NUL bytes (binary)"));
  EXPECT_THAT(ErrorOf<FormatError>(
                  [&] { TextCorpus::FromPath((bin / "a.bin").string()); }),
              HasSubstr("binary file"));
}

TEST(TextCorpusFromPath, UnreadableFilesAreErrorsNamingThem) {
  const auto dir = FreshDir("unreadable");
  for (int i = 0; i < 5; ++i) {
    WriteFile(dir / (Numbered("f", i) + ".txt"), TextOf("f", 100));
  }
  // A broken link is unreadable for every user, root included.
  std::filesystem::create_symlink(dir / "gone.txt", dir / "broken.txt");
  const std::string broken =
      ErrorOf<IoError>([&] { TextCorpus::FromPath(dir.string()); });
  EXPECT_THAT(broken, HasSubstr("broken.txt"));
  EXPECT_THAT(broken, HasSubstr("cannot open"));
  std::filesystem::remove(dir / "broken.txt");
  // Mode 000 blocks reading unless the tests run as root (who reads any
  // file): then the corpus simply reads it.
  const auto locked = dir / "locked.txt";
  WriteFile(locked, TextOf("locked", 100));
  std::filesystem::permissions(locked, std::filesystem::perms::none);
  if (::geteuid() != 0) {
    const std::string denied =
        ErrorOf<IoError>([&] { TextCorpus::FromPath(dir.string()); });
    EXPECT_THAT(denied, HasSubstr("locked.txt"));
    EXPECT_THAT(denied, HasSubstr("Permission denied"));
  } else {
    EXPECT_EQ(TextCorpus::FromPath(dir.string()).stats().files_read, 6);
  }
  std::filesystem::permissions(locked, std::filesystem::perms::owner_all);
}

TEST(TextCorpusFromPath, LinksToDirectoriesAreNotFollowedSoLoopsEnd) {
  namespace fs = std::filesystem;
  const auto dir = FreshDir("loops");
  fs::create_directories(dir / "a");
  for (int i = 0; i < 4; ++i) {
    WriteFile(dir / "a" / (Numbered("x", i) + ".txt"),
              TextOf(Numbered("x", i), 100));
  }
  fs::create_directory_symlink(dir, dir / "a" / "loop");  // a -> .. -> a ...
  fs::create_directory_symlink(dir / "a", dir / "alias");
  // A link to a file is read as the file.
  fs::create_symlink(dir / "a" / "x0.txt", dir / "link.txt");
  const TextCorpus c = TextCorpus::FromPath(dir.string());
  EXPECT_EQ(c.stats().files_matched, 5);  // x0..x3 and link.txt
  EXPECT_EQ(c.size(), 500);
}

TEST(TextCorpusFromPath, ReadingStopsAtTheByteCap) {
  const auto dir = FreshDir("huge");
  for (int i = 0; i < 40; ++i) {
    WriteFile(dir / (Numbered("f", i) + ".txt"),
              TextOf(Numbered("f", i), 1000));
  }
  // 40 kB of files, a 4500-byte cap shared 90 / 10 by the splits: the
  // training split takes 4 whole files and 50 bytes of a fifth, the held-out
  // split the first 450 bytes of its first file.
  const TextCorpus c = TextCorpus::FromPath(dir.string(), {.max_bytes = 4500});
  EXPECT_EQ(c.size(), 4500);
  EXPECT_EQ(c.train_size(), 4050);
  EXPECT_EQ(c.held_out_size(), 450);
  EXPECT_EQ(c.stats().files_read, 6);
  EXPECT_TRUE(c.stats().truncated);
  EXPECT_EQ(c.stats().files_not_read, 34);
  EXPECT_THAT(c.source(), HasSubstr("capped at corpus_max_bytes 4500"));
  // A single file beyond the cap is truncated to its first max_bytes.
  const auto big = dir / "big.log";
  {
    std::ofstream out(big, std::ios::binary);
    const std::string block = TextOf("big", 1 << 16);
    for (int i = 0; i < 64; ++i) out << block;  // 4 MiB
  }
  const TextCorpus head =
      TextCorpus::FromPath(big.string(), {.max_bytes = 1 << 16});
  EXPECT_EQ(head.size(), 1 << 16);
  EXPECT_TRUE(head.stats().truncated);
  EXPECT_THAT(head.source(), HasSubstr("corpus_max_bytes reached"));
  EXPECT_EQ(head.bytes(), TextOf("big", 1 << 16));
}

}  // namespace
}  // namespace relpos::tasks
