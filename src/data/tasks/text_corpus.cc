// Byte-level LM data and relpos's own synthetic text.
#include "data/tasks/text_corpus.h"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include "base/check.h"
#include "base/io/file_io.h"
#include "base/io/path_text.h"

namespace relpos::tasks {
namespace {

// The synthetic text's vocabulary: small enough that a tiny byte-level model
// learns the spelling within a short context, varied enough that the next
// word is not trivially predictable.
constexpr std::array<std::string_view, 12> kNames = {
    "Ada", "Bram", "Cleo", "Dov", "Elin", "Fay",
    "Gus", "Hana", "Ivo", "Juno", "Kit", "Lars"};
constexpr std::array<std::string_view, 5> kDeterminers = {
    "the", "this", "that", "every", "one"};
constexpr std::array<std::string_view, 10> kAdjectives = {
    "small", "red", "quiet", "old", "bright",
    "green", "heavy", "cold", "tall", "round"};
constexpr std::array<std::string_view, 12> kNouns = {
    "cat",   "river", "house", "tree", "lamp", "garden",
    "stone", "bird",  "road",  "window", "boat", "hill"};
constexpr std::array<std::string_view, 10> kTransitive = {
    "saw", "found", "liked", "moved", "kept",
    "painted", "followed", "built", "carried", "washed"};
constexpr std::array<std::string_view, 6> kIntransitive = {
    "slept", "waited", "smiled", "left", "sang", "laughed"};
constexpr std::array<std::string_view, 5> kPrepositions = {
    "near", "under", "behind", "beside", "above"};
constexpr std::array<std::string_view, 5> kAdverbs = {
    "slowly", "again", "today", "quietly", "at dawn"};

template <size_t N>
std::string_view Pick(const std::array<std::string_view, N>& words, Rng& rng) {
  return words[rng.Below(N)];
}

bool Chance(Rng& rng, double p) { return rng.Uniform() < p; }

// Grammar (one paragraph has a main character and a favourite noun, which
// recur, so a longer context helps to predict them):
//   Paragraph -> Sentence{3..6} "\n\n"
//   Sentence  -> Clause ("," "and" Clause)? "."        (first letter upper)
//   Clause    -> Subject Verb-phrase (Prep NP)? Adverb?
//   Subject   -> Hero | NP          Verb-phrase -> Vt NP | Vi
//   NP        -> Det Adj? Noun      (Noun = the favourite noun half the time)
class TextGenerator {
 public:
  explicit TextGenerator(uint64_t seed) : rng_(seed) {}

  void Paragraph(std::string& out) {
    hero_ = Pick(kNames, rng_);
    favourite_ = Pick(kNouns, rng_);
    const int sentences = 3 + static_cast<int>(rng_.Below(4));
    for (int s = 0; s < sentences; ++s) {
      if (s > 0) out += ' ';
      Sentence(out);
    }
    out += "\n\n";
  }

 private:
  void Sentence(std::string& out) {
    const size_t start = out.size();
    Clause(out);
    if (Chance(rng_, 0.3)) {
      out += ", and ";
      Clause(out);
    }
    out += '.';
    // Capitalise the sentence's first letter (names already are).
    if (out[start] >= 'a' && out[start] <= 'z') out[start] -= 'a' - 'A';
  }

  void Clause(std::string& out) {
    if (Chance(rng_, 0.6)) {
      out += hero_;
    } else {
      NounPhrase(out);
    }
    out += ' ';
    if (Chance(rng_, 0.7)) {
      out += Pick(kTransitive, rng_);
      out += ' ';
      NounPhrase(out);
    } else {
      out += Pick(kIntransitive, rng_);
    }
    if (Chance(rng_, 0.35)) {
      out += ' ';
      out += Pick(kPrepositions, rng_);
      out += ' ';
      NounPhrase(out);
    }
    if (Chance(rng_, 0.2)) {
      out += ' ';
      out += Pick(kAdverbs, rng_);
    }
  }

  void NounPhrase(std::string& out) {
    out += Pick(kDeterminers, rng_);
    out += ' ';
    if (Chance(rng_, 0.4)) {
      out += Pick(kAdjectives, rng_);
      out += ' ';
    }
    out += Chance(rng_, 0.5) ? favourite_ : Pick(kNouns, rng_);
  }

  Rng rng_;
  std::string_view hero_;
  std::string_view favourite_;
};

// Appends at most `budget` bytes of the regular file at `path` to `out`
// (io::AppendFilePrefix: never opens a FIFO or device); IoError naming the
// corpus and the path.
void AppendFilePrefix(const std::string& path, int64_t budget, std::string& out,
                      bool* whole) {
  try {
    io::AppendFilePrefix(path, budget, &out, whole);
  } catch (const IoError& e) {
    RELPOS_THROW(IoError, "text corpus: " << MessageBody(e));
  }
}

// "4500 bytes", "10.71 MiB".
std::string MiB(int64_t bytes) {
  if (bytes < (int64_t{1} << 20)) return std::to_string(bytes) + " bytes";
  std::ostringstream os;
  os.precision(2);
  os << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return os.str();
}

void CheckOptions(const CorpusOptions& options) {
  RELPOS_CHECK_ARG(options.max_bytes >= TextCorpus::kMinBytes &&
                       options.max_bytes <= TextCorpus::kMaxFileBytes,
                   "corpus_max_bytes must be in [" << TextCorpus::kMinBytes
                                                   << ", 2^30] (got "
                                                   << options.max_bytes << ")");
  RELPOS_CHECK_ARG(!options.pattern.empty() &&
                       options.pattern.find('/') == std::string::npos,
                   "corpus_pattern must be a non-empty file-name glob without "
                   "'/' (got "
                       << io::QuotedPath(options.pattern) << ")");
}

}  // namespace

uint64_t TextCorpus::PathHash(std::string_view relative_path) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
  for (const char c : relative_path) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;  // FNV-1a 64 prime
  }
  return h;
}

TextCorpus TextCorpus::FromFile(const std::string& path) {
  return FromBytes(io::ReadFileBounded(path, kMaxFileBytes), io::PathText(path));
}

TextCorpus TextCorpus::FromPath(const std::string& path,
                                const CorpusOptions& options) {
  CheckOptions(options);
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    RELPOS_THROW(IoError, "text corpus: cannot open "
                              << io::QuotedPath(path) << ": "
                              << (ec ? ec.message() : "no such file"));
  }
  if (std::filesystem::is_directory(st)) return FromDirectory(path, options);
  std::string bytes;
  bool whole = false;
  AppendFilePrefix(path, options.max_bytes, bytes, &whole);
  if (bytes.find('\0') != std::string::npos) {
    RELPOS_THROW(FormatError,
                 "text corpus: " << io::QuotedPath(path)
                                  << " holds NUL bytes: a binary file, not "
                                     "text (directories skip such files)");
  }
  std::string source = io::PathText(path);
  if (!whole) {
    source += " (first " + std::to_string(bytes.size()) +
              " bytes: corpus_max_bytes reached)";
  }
  TextCorpus corpus = FromBytes(std::move(bytes), source);
  corpus.stats_.files_matched = corpus.stats_.files_read = 1;
  corpus.stats_.truncated = !whole;
  return corpus;
}

namespace {

namespace fs = std::filesystem;

// A matching file of a directory corpus.
struct CorpusFile {
  uint64_t hash;
  std::string relative;  // '/'-separated
};

// The regular files under `path` (and links to them) whose name matches
// `pattern`, sorted by path hash (a spread sample when the cap cuts the
// list short); ties by path. IoError / FormatError / InvalidArgument for an
// unreadable tree, no files, no match or more than kMaxFiles files.
std::vector<CorpusFile> ListCorpusFiles(const std::string& path,
                                        const std::string& pattern) {
  std::vector<CorpusFile> files;
  int64_t seen = 0;
  std::error_code ec;
  // Not following directory links: a link loop cannot recur. An unreadable
  // directory is an error (skip_permission_denied is not set).
  fs::recursive_directory_iterator it(path, fs::directory_options::none, ec);
  if (ec) {
    RELPOS_THROW(IoError, "text corpus: cannot list directory "
                              << io::QuotedPath(path) << ": " << ec.message());
  }
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::directory_entry& e = *it;
    std::error_code type_ec;
    // Directories are walked by the iterator; links to them are skipped.
    if (e.is_directory(type_ec)) continue;
    // Regular files and links to them; a broken link counts as a file
    // (reading it then names it). Devices, sockets, FIFOs are not text.
    const bool dangling = e.is_symlink(type_ec) && !fs::exists(e.path(), type_ec);
    if (!dangling && !e.is_regular_file(type_ec)) continue;
    ++seen;
    RELPOS_CHECK_ARG(seen <= TextCorpus::kMaxFiles,
                     "text corpus: directory " << io::QuotedPath(path)
                                                << " holds more than "
                                                << TextCorpus::kMaxFiles
                                                << " files; point --corpus at "
                                                   "a smaller tree");
    const std::string name = e.path().filename().string();
    if (::fnmatch(pattern.c_str(), name.c_str(), 0) != 0) continue;
    std::string rel = e.path().lexically_relative(path).generic_string();
    files.push_back({TextCorpus::PathHash(rel), std::move(rel)});
  }
  if (ec) {
    RELPOS_THROW(IoError, "text corpus: cannot walk directory "
                              << io::QuotedPath(path) << ": " << ec.message());
  }
  if (seen == 0) {
    RELPOS_THROW(FormatError,
                 "text corpus: directory " << io::QuotedPath(path)
                                         << " holds no files");
  }
  if (files.empty()) {
    RELPOS_THROW(FormatError, "text corpus: no file under "
                                  << io::QuotedPath(path)
                                  << " matches corpus_pattern "
                                  << io::QuotedPath(pattern) << " (" << seen
                                  << " files seen)");
  }
  std::sort(files.begin(), files.end(),
            [](const CorpusFile& a, const CorpusFile& b) {
              return a.hash != b.hash ? a.hash < b.hash
                                      : a.relative < b.relative;
            });
  return files;
}

// The split: hash % 10 == 0 is held out. If no file is, the one with the
// smallest hash (read first) is; if every file is, the one with the largest
// hash trains. One file is split by position later (false here).
std::vector<bool> HeldOutFiles(const std::vector<CorpusFile>& files) {
  std::vector<bool> held(files.size());
  size_t n_held = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    held[i] = TextCorpus::HeldOutByHash(files[i].hash);
    n_held += held[i];
  }
  if (files.size() >= 2) {
    if (n_held == 0) held.front() = true;
    if (n_held == files.size()) held.back() = false;
  }
  if (files.size() == 1) held.front() = false;
  return held;
}

// Reads the files into the two splits. The cap is shared 90 / 10 by the
// splits, so that a capped corpus keeps a held-out split of its usual
// share. Each split takes files in hash order until its share is full (its
// last file may be cut short); files with NUL bytes are skipped as binary.
CorpusStats ReadSplits(const std::string& path,
                       const std::vector<CorpusFile>& files,
                       const std::vector<bool>& held, int64_t max_bytes,
                       std::string* train, std::string* held_out) {
  CorpusStats stats;
  stats.files_matched = static_cast<int64_t>(files.size());
  int64_t budget[2] = {max_bytes - max_bytes / 10,
                       max_bytes / 10};  // train, held-out
  if (files.size() == 1) budget[0] = max_bytes;
  for (size_t i = 0; i < files.size(); ++i) {
    const int split = held[i] ? 1 : 0;
    if (budget[split] == 0) {
      ++stats.files_not_read;
      continue;
    }
    std::string& dest = split ? *held_out : *train;
    const size_t start = dest.size();
    bool whole = false;
    AppendFilePrefix((fs::path(path) / files[i].relative).string(),
                     budget[split], dest, &whole);
    if (std::memchr(dest.data() + start, '\0', dest.size() - start)) {
      dest.resize(start);
      ++stats.skipped_binary;
      continue;
    }
    budget[split] -= static_cast<int64_t>(dest.size() - start);
    ++stats.files_read;
    ++(split ? stats.held_out_files : stats.train_files);
    if (!whole) stats.truncated = true;
  }
  return stats;
}

// What a directory corpus read, for its source description.
std::string DescribeDirectory(const std::string& path,
                              const CorpusOptions& options,
                              const CorpusStats& stats, size_t train_bytes,
                              size_t held_out_bytes) {
  const auto kept = static_cast<int64_t>(train_bytes + held_out_bytes);
  std::ostringstream source;
  source << io::PathText(path) << " (" << io::PathText(options.pattern)
         << "): " << stats.files_read
         << " of " << stats.files_matched << " matching files, "
         << MiB(kept) << "; train " << stats.train_files << " files "
         << MiB(static_cast<int64_t>(train_bytes)) << ", held-out "
         << stats.held_out_files << " files "
         << MiB(static_cast<int64_t>(held_out_bytes));
  if (stats.skipped_binary > 0) {
    source << "; skipped " << stats.skipped_binary << " binary";
  }
  if (stats.truncated || stats.files_not_read > 0) {
    source << "; capped at corpus_max_bytes " << options.max_bytes << " ("
           << stats.files_not_read << " files not read)";
  }
  return source.str();
}

}  // namespace

TextCorpus TextCorpus::FromDirectory(const std::string& path,
                                     const CorpusOptions& options) {
  const std::vector<CorpusFile> files = ListCorpusFiles(path, options.pattern);
  std::string train, held_out;
  const CorpusStats stats = ReadSplits(path, files, HeldOutFiles(files),
                                       options.max_bytes, &train, &held_out);
  const std::string source =
      DescribeDirectory(path, options, stats, train.size(), held_out.size());
  if (stats.files_read == 0) {
    RELPOS_THROW(FormatError, "text corpus: every one of the "
                                  << stats.files_matched
                                  << " files matching "
                                  << io::QuotedPath(options.pattern)
                                  << " under " << io::QuotedPath(path)
                                  << " holds NUL bytes (binary); none is text");
  }
  if (files.size() == 1 || stats.files_read == 1) {
    // One text file: split it by position like a single file.
    std::string bytes = train.empty() ? std::move(held_out) : std::move(train);
    TextCorpus corpus = FromBytes(std::move(bytes), source);
    corpus.stats_ = stats;
    return corpus;
  }
  for (const auto& [split, size] :
       {std::pair<const char*, size_t>{"training", train.size()},
        std::pair<const char*, size_t>{"held-out", held_out.size()}}) {
    if (static_cast<int64_t>(size) < kMinSplitBytes) {
      RELPOS_THROW(FormatError,
                   "text corpus: the " << split << " split of " << source
                                       << " holds " << size
                                       << " bytes; it needs at least "
                                       << kMinSplitBytes
                                       << " (add files or raise "
                                          "corpus_max_bytes)");
    }
  }
  const int64_t train_size = static_cast<int64_t>(train.size());
  train += held_out;
  held_out = std::string();
  TextCorpus corpus(std::move(train), source, train_size);
  corpus.stats_ = stats;
  return corpus;
}

TextCorpus TextCorpus::FromBytes(std::string bytes, const std::string& source) {
  if (static_cast<int64_t>(bytes.size()) < kMinBytes) {
    RELPOS_THROW(FormatError,
                 source << ": a text corpus needs at least " << kMinBytes
                        << " bytes (got " << bytes.size()
                        << "), so that the held-out split (last 10%) is usable");
  }
  const int64_t size = static_cast<int64_t>(bytes.size());
  return TextCorpus(std::move(bytes), source, size - size / 10);
}

TextCorpus TextCorpus::Generated(uint64_t seed, int64_t bytes) {
  RELPOS_CHECK_ARG(bytes >= kMinBytes && bytes <= kMaxFileBytes,
                   "generated corpus size must be in [" << kMinBytes << ", "
                                                        << kMaxFileBytes
                                                        << "] bytes (got "
                                                        << bytes << ")");
  TextGenerator generator(seed);
  std::string text;
  text.reserve(static_cast<size_t>(bytes) + 1024);
  while (static_cast<int64_t>(text.size()) < bytes) generator.Paragraph(text);
  text.resize(static_cast<size_t>(bytes));
  std::ostringstream source;
  source << "generated text (seed " << seed << ", " << bytes << " bytes)";
  return FromBytes(std::move(text), source.str());
}

int64_t TextCorpus::MaxSampleLength(bool held_out) const {
  return (held_out ? held_out_size() : train_size()) - 1;
}

Example TextCorpus::Sample(int64_t length, bool held_out, Rng& rng) const {
  const int64_t max_length = MaxSampleLength(held_out);
  RELPOS_CHECK_ARG(length >= 1 && length <= max_length,
                   "text sample length must be in [1, "
                       << max_length << "] for the "
                       << (held_out ? "held-out" : "training") << " split of "
                       << source_ << " (got " << length << ")");
  const int64_t lo = held_out ? train_size() : 0;
  // Windows of length + 1 bytes fit at lo .. lo + split - (length + 1).
  const int64_t starts = max_length - length + 1;
  const int64_t start = lo + static_cast<int64_t>(rng.Below(
                                 static_cast<uint64_t>(starts)));
  Example example;
  example.tokens.resize(static_cast<size_t>(length));
  example.targets.resize(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) {
    example.tokens[i] = static_cast<unsigned char>(bytes_[start + i]);
    example.targets[i] = static_cast<unsigned char>(bytes_[start + i + 1]);
  }
  return example;
}

}  // namespace relpos::tasks
