// Byte-level LM data and relpos's own synthetic text.
#include "tasks/text_corpus.h"

#include <array>
#include <sstream>
#include <string_view>

#include "core/check.h"
#include "io/file_io.h"

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

}  // namespace

TextCorpus TextCorpus::FromFile(const std::string& path) {
  return FromBytes(io::ReadFileBounded(path, kMaxFileBytes), path);
}

TextCorpus TextCorpus::FromBytes(std::string bytes, const std::string& source) {
  if (static_cast<int64_t>(bytes.size()) < kMinBytes) {
    RELPOS_THROW(FormatError,
                 source << ": a text corpus needs at least " << kMinBytes
                        << " bytes (got " << bytes.size()
                        << "), so that the held-out split (last 10%) is usable");
  }
  return TextCorpus(std::move(bytes), source);
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
  return TextCorpus(std::move(text), source.str());
}

int64_t TextCorpus::train_size() const { return size() - size() / 10; }

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
