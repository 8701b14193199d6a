// Translation metrics: BLEU and chrF exactly as sacrebleu 2.x computes them
// with its default settings (docs/translation.md, "Metrics").
//
// - BLEU (Papineni et al. 2002): corpus-level, one reference per segment,
//   n-grams of order 1..4 over the 13a tokenisation (mteval-v13a, the WMT
//   standard) of detokenised text, clipped counts, brevity penalty, and
//   sacrebleu's default "exp" smoothing (an order with no match counts as
//   1 / (2^k * total), k the number of such orders so far). Case-sensitive.
// - chrF (Popović 2015): character n-grams of order 1..6 with whitespace
//   removed, no word n-grams, beta = 2; corpus statistics are summed over
//   segments, precision and recall averaged over the orders both sides
//   have, then combined into F-beta (sacrebleu's default, without epsilon
//   smoothing).
//
// Scores are on sacrebleu's 0..100 scale. Every text is UTF-8; a string that
// is not well-formed UTF-8 is an InvalidArgument naming it ("hypothesis 3").
// python/tests/test_translate_metrics.py checks these functions against
// sacrebleu on a few hundred segments; tests/golden/gen_metrics.py writes
// the golden values the C++ test uses.
//
// The *Stats structs are sacrebleu's sufficient statistics: they add up
// over segments, so a score per subset (for example per source-length
// bucket) costs one pass.
#ifndef RELPOS_DATA_METRICS_H_
#define RELPOS_DATA_METRICS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace relpos {

// The 13a tokenisation of one segment (sacrebleu's Tokenizer13a, after its
// right strip of whitespace): the tokens, in order.
std::vector<std::string> Tokenize13a(std::string_view segment);

inline constexpr int kBleuMaxOrder = 4;

// BLEU's sufficient statistics: tokens and n-gram counts (index n - 1 for
// order n) of the hypotheses, and the reference lengths.
struct BleuStats {
  int64_t hyp_len = 0, ref_len = 0;
  std::array<int64_t, kBleuMaxOrder> correct{};  // clipped matches
  std::array<int64_t, kBleuMaxOrder> total{};    // hypothesis n-grams
  BleuStats& operator+=(const BleuStats& other);
};

struct BleuScore {
  double score = 0;  // 0..100
  std::array<double, kBleuMaxOrder> precisions{};  // percent; smoothed
  double brevity_penalty = 0;
  BleuStats stats;
};

// The statistics of one hypothesis against its reference.
BleuStats SegmentBleuStats(std::string_view hypothesis,
                           std::string_view reference);
// BLEU from summed statistics. `effective_order`: leave out the orders no
// hypothesis n-gram reaches (sacrebleu's sentence_bleu default; its corpus
// default is false, where such an order makes the score 0).
BleuScore BleuFromStats(const BleuStats& stats, bool effective_order = false);
// sacrebleu.corpus_bleu(hypotheses, [references]).score and its details.
// InvalidArgument unless both have the same, non-zero number of segments.
BleuScore CorpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::string>& references);
// sacrebleu.sentence_bleu(hypothesis, [reference]) (effective order).
BleuScore SentenceBleu(std::string_view hypothesis, std::string_view reference);

inline constexpr int kChrfCharOrder = 6;
inline constexpr int kChrfBeta = 2;

// chrF's sufficient statistics per character n-gram order (index n - 1):
// hypothesis n-grams (counted only where the reference has n-grams of that
// order, as sacrebleu does), reference n-grams, clipped matches.
struct ChrfStats {
  std::array<int64_t, kChrfCharOrder> hyp{}, ref{}, match{};
  ChrfStats& operator+=(const ChrfStats& other);
};

ChrfStats SegmentChrfStats(std::string_view hypothesis,
                           std::string_view reference);
// chrF (0..100) from summed statistics.
double ChrfFromStats(const ChrfStats& stats);
// sacrebleu.corpus_chrf(hypotheses, [references]).score. InvalidArgument
// unless both have the same, non-zero number of segments.
double CorpusChrf(const std::vector<std::string>& hypotheses,
                  const std::vector<std::string>& references);
// sacrebleu.sentence_chrf(hypothesis, [reference]).score.
double SentenceChrf(std::string_view hypothesis, std::string_view reference);

}  // namespace relpos

#endif  // RELPOS_DATA_METRICS_H_
