// Byte-level language-modelling data: a text file (or relpos's own generated
// text) cut into a training split (first 90%) and a held-out split (last 10%);
// random windows of either become next-byte-prediction examples.
#ifndef RELPOS_SRC_TASKS_TEXT_CORPUS_H_
#define RELPOS_SRC_TASKS_TEXT_CORPUS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "core/rng.h"
#include "tasks/task.h"

namespace relpos::tasks {

class TextCorpus {
 public:
  static constexpr int32_t kVocabSize = 256;          // one token per byte
  static constexpr int64_t kMaxFileBytes = int64_t{1} << 30;  // 1 GiB cap
  // Smallest accepted corpus: both splits must hold a few windows.
  static constexpr int64_t kMinBytes = 100;

  // Reads a whole file as bytes. IoError if it cannot be read or is larger
  // than kMaxFileBytes; FormatError if it holds fewer than kMinBytes bytes.
  static TextCorpus FromFile(const std::string& path);

  // relpos's own synthetic English-like text (a small grammar over a small
  // vocabulary, with punctuation and per-paragraph recurring names): exactly
  // `bytes` bytes, a pure function of `seed`. bytes >= kMinBytes.
  static TextCorpus Generated(uint64_t seed, int64_t bytes);

  // Wraps given bytes (size >= kMinBytes, else FormatError naming `source`).
  static TextCorpus FromBytes(std::string bytes, const std::string& source);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes() const { return bytes_; }
  const std::string& source() const { return source_; }

  // Split sizes: train = [0, train_size()), held-out = [train_size(), size()).
  int64_t train_size() const;
  int64_t held_out_size() const { return size() - train_size(); }

  // Longest window Sample() accepts for a split (= split size - 1).
  int64_t MaxSampleLength(bool held_out) const;

  // A window of `length + 1` bytes starting at a uniformly random offset
  // inside the chosen split: tokens = bytes[0..length), targets =
  // bytes[1..length] (every position is scored). InvalidArgument unless
  // 1 <= length <= MaxSampleLength(held_out).
  Example Sample(int64_t length, bool held_out, Rng& rng) const;

 private:
  TextCorpus(std::string bytes, std::string source)
      : bytes_(std::move(bytes)), source_(std::move(source)) {}
  std::string bytes_;
  std::string source_;  // file path or "generated(seed=..)", for messages
};

}  // namespace relpos::tasks

#endif  // RELPOS_SRC_TASKS_TEXT_CORPUS_H_
