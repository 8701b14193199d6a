// Byte-level language-modelling data: a text file, a directory of text files
// or relpos's own generated text, cut into a training split and a held-out
// split; random windows of either become next-byte-prediction examples.
//
// A single file (or generated text) is split by position: the first 90% is
// for training, the last 10% is held out. A directory is split by file
// (docs/tasks.md, "Text corpora"): a file is held out when the 64-bit FNV-1a
// hash of its path relative to the directory ('/'-separated) is 0 modulo 10,
// so the split does not depend on which other files exist or on the order
// the file system lists them.
#ifndef RELPOS_SRC_DATA_TASKS_TEXT_CORPUS_H_
#define RELPOS_SRC_DATA_TASKS_TEXT_CORPUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "base/rng.h"
#include "data/tasks/task.h"

namespace relpos::tasks {

// How a corpus on disk is read (FromPath).
struct CorpusOptions {
  // Directories only: a glob on file names (not paths), fnmatch(3) syntax:
  // "*.py", "*.[ch]", "*". Ignored when the path is a file.
  std::string pattern = "*";
  // At most this many bytes are kept (a file beyond the cap is truncated and
  // no further file is read; the corpus description says so).
  int64_t max_bytes = int64_t{64} << 20;
};

// What FromPath read, for messages and reports.
struct CorpusStats {
  int64_t files_matched = 0;   // regular files whose name matches the pattern
  int64_t files_read = 0;      // of which kept (train + held-out)
  int64_t train_files = 0, held_out_files = 0;
  int64_t skipped_binary = 0;  // files holding a NUL byte (not text)
  int64_t files_not_read = 0;  // left out once max_bytes was reached
  bool truncated = false;      // the last file read was cut at max_bytes
};

class TextCorpus {
 public:
  static constexpr int32_t kVocabSize = 256;          // one token per byte
  static constexpr int64_t kMaxFileBytes = int64_t{1} << 30;  // 1 GiB cap
  // Smallest accepted corpus: both splits must hold a few windows.
  static constexpr int64_t kMinBytes = 100;

  // Reads a whole file as bytes. IoError if it cannot be read or is larger
  // than kMaxFileBytes; FormatError if it holds fewer than kMinBytes bytes.
  static TextCorpus FromFile(const std::string& path);

  // A file or a directory (walked recursively; symbolic links to files are
  // read, links to directories are not followed, so link loops cannot
  // recur). Files are read in the order of their path hash; the cap
  // options.max_bytes is shared 90 / 10 by the training and held-out splits,
  // and each split stops taking files once its share is full (its last file
  // cut short), so a capped corpus is a spread sample of the tree, the same
  // on every machine. Memory: the kept bytes, about twice while the splits
  // are joined, plus the list of file names. Files holding a NUL byte are
  // binary: skipped in a directory (and counted in stats()), refused as a
  // single file. Errors: IoError for a missing path or an unreadable file or
  // directory (naming it); FormatError for a directory with no file, no file
  // matching the pattern, only binary files, or a split below kMinSplitBytes;
  // InvalidArgument for a bad pattern or max_bytes.
  static TextCorpus FromPath(const std::string& path,
                             const CorpusOptions& options = {});
  // Smallest accepted split of a directory corpus.
  static constexpr int64_t kMinSplitBytes = 16;
  // Most files a directory walk lists (a guard against walking "/").
  static constexpr int64_t kMaxFiles = int64_t{1} << 20;

  // The split a directory corpus puts a file in, from its relative path:
  // FNV-1a-64(path) % 10 == 0 -> held out.
  static uint64_t PathHash(std::string_view relative_path);
  static bool HeldOutByHash(uint64_t hash) { return hash % 10 == 0; }

  // relpos's own synthetic English-like text (a small grammar over a small
  // vocabulary, with punctuation and per-paragraph recurring names): exactly
  // `bytes` bytes, a pure function of `seed`. bytes >= kMinBytes.
  static TextCorpus Generated(uint64_t seed, int64_t bytes);

  // Wraps given bytes (size >= kMinBytes, else FormatError naming `source`).
  static TextCorpus FromBytes(std::string bytes, const std::string& source);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes() const { return bytes_; }
  // The path or "generated text (...)", and for a directory a summary of
  // what was read ("/usr/lib/python3.11 (*.py): 640 files, ..."), for
  // messages.
  const std::string& source() const { return source_; }
  const CorpusStats& stats() const { return stats_; }

  // Split sizes: train = [0, train_size()), held-out = [train_size(), size()).
  int64_t train_size() const { return train_size_; }
  int64_t held_out_size() const { return size() - train_size(); }

  // Longest window Sample() accepts for a split (= split size - 1).
  int64_t MaxSampleLength(bool held_out) const;

  // A window of `length + 1` bytes starting at a uniformly random offset
  // inside the chosen split: tokens = bytes[0..length), targets =
  // bytes[1..length] (every position is scored). InvalidArgument unless
  // 1 <= length <= MaxSampleLength(held_out).
  Example Sample(int64_t length, bool held_out, Rng& rng) const;

 private:
  TextCorpus(std::string bytes, std::string source, int64_t train_size)
      : bytes_(std::move(bytes)),
        source_(std::move(source)),
        train_size_(train_size) {}
  static TextCorpus FromDirectory(const std::string& path,
                                  const CorpusOptions& options);
  std::string bytes_;
  std::string source_;  // file path or "generated(seed=..)", for messages
  int64_t train_size_ = 0;
  CorpusStats stats_;
};

}  // namespace relpos::tasks

#endif  // RELPOS_SRC_DATA_TASKS_TEXT_CORPUS_H_
