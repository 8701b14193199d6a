// BLEU and chrF as sacrebleu 2.x computes them by default
// (include/relpos/data/metrics.h), written from sacrebleu's documented
// behaviour: mteval-v13a's tokeniser, clipped n-gram counts, the brevity
// penalty and the "exp" smoothing for BLEU; whitespace-free character
// n-grams and effective-order averaging for chrF.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "relpos/data/metrics.h"
#include "data/translate/utf8.h"

namespace relpos {
namespace {

using translate::DecodeUtf8;
using translate::EncodeUtf8;
using translate::IsPythonSpace;

// Replaces every occurrence of `from` in `s` by `to`, scanning left to right
// without overlaps (Python's str.replace).
void ReplaceAll(std::u32string& s, std::u32string_view from,
                std::u32string_view to) {
  if (s.find(from) == std::u32string::npos) return;
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  for (size_t hit; (hit = s.find(from, i)) != std::u32string::npos;
       i = hit + from.size()) {
    out.append(s, i, hit - i);
    out.append(to);
  }
  out.append(s, i, std::u32string::npos);
  s = std::move(out);
}

bool IsDigit(char32_t c) { return c >= U'0' && c <= U'9'; }

// The characters mteval-v13a pads with spaces: ASCII punctuation and
// symbols except ' , - . (and space, which splitting removes anyway).
bool IsPaddedSymbol(char32_t c) {
  return (c >= U'{' && c <= U'~') || (c >= U'[' && c <= U'`') ||
         (c >= U' ' && c <= U'&') || (c >= U'(' && c <= U'+') ||
         (c >= U':' && c <= U'@') || c == U'/';
}

// One regex rule "(A)(B)" -> "<before>\1<middle>\2<after>" applied as
// Python's re.sub does it: the leftmost two-character match, then the scan
// resumes after it (matches never overlap).
template <typename First, typename Second>
std::u32string PairRule(const std::u32string& s, First first, Second second,
                        std::u32string_view before, std::u32string_view middle,
                        std::u32string_view after) {
  std::u32string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      out.append(before);
      out.push_back(s[i]);
      out.append(middle);
      out.push_back(s[i + 1]);
      out.append(after);
      i += 2;
    } else {
      out.push_back(s[i]);
      ++i;
    }
  }
  return out;
}

std::vector<std::string> SplitPythonSpace(const std::u32string& s) {
  std::vector<std::string> tokens;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsPythonSpace(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !IsPythonSpace(s[i])) ++i;
    if (i > start) {
      tokens.push_back(
          EncodeUtf8(std::u32string_view(s).substr(start, i - start)));
    }
  }
  return tokens;
}

std::vector<std::string> Tokenize13aCodePoints(std::u32string line) {
  // sacrebleu strips trailing whitespace before tokenising (so a final
  // "-\n" is not joined to the next word: there is none).
  while (!line.empty() && IsPythonSpace(line.back())) line.pop_back();
  // mteval-v13a's language-independent part.
  ReplaceAll(line, U"<skipped>", U"");
  ReplaceAll(line, U"-\n", U"");
  ReplaceAll(line, U"\n", U" ");
  if (line.find(U'&') != std::u32string::npos) {
    ReplaceAll(line, U"&quot;", U"\"");
    ReplaceAll(line, U"&amp;", U"&");
    ReplaceAll(line, U"&lt;", U"<");
    ReplaceAll(line, U"&gt;", U">");
  }
  // The language-dependent part (Western languages), on " line ".
  std::u32string padded;
  padded.reserve(line.size() * 2 + 2);
  padded.push_back(U' ');
  for (const char32_t c : line) {
    if (IsPaddedSymbol(c)) {
      padded.push_back(U' ');
      padded.push_back(c);
      padded.push_back(U' ');
    } else {
      padded.push_back(c);
    }
  }
  padded.push_back(U' ');
  const auto not_digit = [](char32_t c) { return !IsDigit(c); };
  const auto period_or_comma = [](char32_t c) {
    return c == U'.' || c == U',';
  };
  // Period and comma are split off unless preceded by a digit ...
  padded = PairRule(padded, not_digit, period_or_comma, U"", U" ", U" ");
  // ... or unless followed by one.
  padded = PairRule(padded, period_or_comma, not_digit, U" ", U" ", U"");
  // A dash after a digit is split off.
  padded = PairRule(padded, IsDigit, [](char32_t c) { return c == U'-'; },
                    U"", U" ", U" ");
  return SplitPythonSpace(padded);
}

// Counts of every n-gram of order 1..kBleuMaxOrder, keyed by the tokens
// joined with single spaces (tokens hold no whitespace, so keys of different
// orders or tokens cannot collide).
using NgramCounts = std::unordered_map<std::string, int64_t>;

NgramCounts CountNgrams(const std::vector<std::string>& tokens) {
  NgramCounts counts;
  const size_t n_tokens = tokens.size();
  for (size_t i = 0; i < n_tokens; ++i) {
    std::string key;
    for (size_t n = 1; n <= kBleuMaxOrder && i + n <= n_tokens; ++n) {
      if (n > 1) key.push_back(' ');
      key += tokens[i + n - 1];
      ++counts[key];
    }
  }
  return counts;
}

int NgramOrder(const std::string& key) {
  int order = 1;
  for (const char c : key) order += c == ' ';
  return order;
}

// sacrebleu's floored log: log(0) counts as -9999999999.
double FlooredLog(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

// Sums a metric's segment statistics over a corpus, checking that there is
// one reference per hypothesis and naming the segment of any bad text.
template <typename Stats, typename SegmentStats>
Stats SumOverCorpus(const std::vector<std::string>& hypotheses,
                    const std::vector<std::string>& references,
                    const char* metric, SegmentStats segment_stats) {
  RELPOS_CHECK_ARG(hypotheses.size() == references.size(),
                   metric << ": " << hypotheses.size() << " hypotheses but "
                          << references.size()
                          << " references; one reference per hypothesis");
  RELPOS_CHECK_ARG(!hypotheses.empty(), metric << ": no segments to score");
  Stats sum;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    sum += segment_stats(hypotheses[i], references[i],
                         "hypothesis " + std::to_string(i),
                         "reference " + std::to_string(i));
  }
  return sum;
}

BleuStats StatsOf(std::string_view hypothesis, std::string_view reference,
                  std::string_view hyp_name, std::string_view ref_name) {
  const std::vector<std::string> hyp =
      Tokenize13aCodePoints(DecodeUtf8(hypothesis, hyp_name));
  const std::vector<std::string> ref =
      Tokenize13aCodePoints(DecodeUtf8(reference, ref_name));
  const NgramCounts ref_counts = CountNgrams(ref);
  BleuStats stats;
  stats.hyp_len = static_cast<int64_t>(hyp.size());
  stats.ref_len = static_cast<int64_t>(ref.size());
  for (const auto& [ngram, count] : CountNgrams(hyp)) {
    const int n = NgramOrder(ngram) - 1;
    stats.total[n] += count;
    const auto it = ref_counts.find(ngram);
    if (it != ref_counts.end()) stats.correct[n] += std::min(count, it->second);
  }
  return stats;
}

}  // namespace

std::vector<std::string> Tokenize13a(std::string_view segment) {
  return Tokenize13aCodePoints(DecodeUtf8(segment, "13a segment"));
}

BleuStats& BleuStats::operator+=(const BleuStats& other) {
  hyp_len += other.hyp_len;
  ref_len += other.ref_len;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    correct[n] += other.correct[n];
    total[n] += other.total[n];
  }
  return *this;
}

BleuStats SegmentBleuStats(std::string_view hypothesis,
                           std::string_view reference) {
  return StatsOf(hypothesis, reference, "hypothesis", "reference");
}

BleuScore BleuFromStats(const BleuStats& stats, bool effective_order) {
  BleuScore result;
  result.stats = stats;
  // Brevity penalty: exp(1 - r / c) for a corpus shorter than its references.
  result.brevity_penalty = 1.0;
  if (stats.hyp_len < stats.ref_len) {
    result.brevity_penalty =
        stats.hyp_len > 0
            ? std::exp(1.0 - static_cast<double>(stats.ref_len) /
                                 static_cast<double>(stats.hyp_len))
            : 0.0;
  }
  bool any_match = false;
  for (const int64_t c : stats.correct) any_match |= c > 0;
  if (!any_match) return result;  // score 0, precisions 0 (as sacrebleu)

  // Precisions in percent. An order without hypothesis n-grams ends the
  // loop (its precision stays 0, so the score is 0 unless effective_order
  // leaves it out); an order without matches gets the "exp" smoothing.
  double smooth = 1.0;
  int orders = kBleuMaxOrder;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    if (stats.total[n] == 0) break;
    if (effective_order) orders = n + 1;
    const double total = static_cast<double>(stats.total[n]);
    if (stats.correct[n] == 0) {
      smooth *= 2;
      result.precisions[n] = 100.0 / (smooth * total);
    } else {
      result.precisions[n] =
          100.0 * static_cast<double>(stats.correct[n]) / total;
    }
  }
  double log_sum = 0;
  for (int n = 0; n < orders; ++n) log_sum += FlooredLog(result.precisions[n]);
  result.score = result.brevity_penalty * std::exp(log_sum / orders);
  return result;
}

BleuScore CorpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::string>& references) {
  return BleuFromStats(
      SumOverCorpus<BleuStats>(hypotheses, references, "BLEU", StatsOf),
      /*effective_order=*/false);
}

BleuScore SentenceBleu(std::string_view hypothesis,
                       std::string_view reference) {
  return BleuFromStats(SegmentBleuStats(hypothesis, reference),
                       /*effective_order=*/true);
}

// --- chrF ------------------------------------------------------------------

namespace {

// The code points of a segment without its whitespace (sacrebleu joins the
// words of str.split() before taking character n-grams).
std::u32string WithoutSpaces(std::string_view text, std::string_view what) {
  std::u32string chars = DecodeUtf8(text, what);
  std::erase_if(chars, IsPythonSpace);
  return chars;
}

using CharNgramCounts = std::unordered_map<std::u32string_view, int64_t>;

CharNgramCounts CountCharNgrams(const std::u32string& chars, size_t n) {
  CharNgramCounts counts;
  const std::u32string_view view(chars);
  for (size_t i = 0; i + n <= chars.size(); ++i) ++counts[view.substr(i, n)];
  return counts;
}

ChrfStats ChrfStatsOf(std::string_view hypothesis, std::string_view reference,
                      std::string_view hyp_name, std::string_view ref_name) {
  const std::u32string hyp = WithoutSpaces(hypothesis, hyp_name);
  const std::u32string ref = WithoutSpaces(reference, ref_name);
  ChrfStats stats;
  for (size_t n = 1; n <= kChrfCharOrder; ++n) {
    const CharNgramCounts ref_counts = CountCharNgrams(ref, n);
    int64_t hyp_total = 0, ref_total = 0, match = 0;
    for (const auto& [ngram, count] : ref_counts) ref_total += count;
    for (const auto& [ngram, count] : CountCharNgrams(hyp, n)) {
      hyp_total += count;
      const auto it = ref_counts.find(ngram);
      if (it != ref_counts.end()) match += std::min(count, it->second);
    }
    // sacrebleu counts no hypothesis n-grams of an order the reference
    // lacks (so a too-short reference does not lower the precision).
    stats.hyp[n - 1] = ref_counts.empty() ? 0 : hyp_total;
    stats.ref[n - 1] = ref_total;
    stats.match[n - 1] = match;
  }
  return stats;
}

}  // namespace

ChrfStats& ChrfStats::operator+=(const ChrfStats& other) {
  for (int n = 0; n < kChrfCharOrder; ++n) {
    hyp[n] += other.hyp[n];
    ref[n] += other.ref[n];
    match[n] += other.match[n];
  }
  return *this;
}

ChrfStats SegmentChrfStats(std::string_view hypothesis,
                           std::string_view reference) {
  return ChrfStatsOf(hypothesis, reference, "hypothesis", "reference");
}

double ChrfFromStats(const ChrfStats& stats) {
  // Precision and recall averaged over the orders where both sides have
  // n-grams ("effective order"), then F-beta of the averages.
  double precision = 0, recall = 0;
  int orders = 0;
  for (int n = 0; n < kChrfCharOrder; ++n) {
    if (stats.hyp[n] > 0 && stats.ref[n] > 0) {
      precision += static_cast<double>(stats.match[n]) /
                   static_cast<double>(stats.hyp[n]);
      recall += static_cast<double>(stats.match[n]) /
                static_cast<double>(stats.ref[n]);
      ++orders;
    }
  }
  if (orders == 0) return 0.0;
  precision /= orders;
  recall /= orders;
  if (precision + recall == 0.0) return 0.0;
  constexpr double kFactor = kChrfBeta * kChrfBeta;
  double score = (1 + kFactor) * precision * recall;
  score /= kFactor * precision + recall;
  return 100 * score;
}

double CorpusChrf(const std::vector<std::string>& hypotheses,
                  const std::vector<std::string>& references) {
  return ChrfFromStats(
      SumOverCorpus<ChrfStats>(hypotheses, references, "chrF", ChrfStatsOf));
}

double SentenceChrf(std::string_view hypothesis, std::string_view reference) {
  return ChrfFromStats(SegmentChrfStats(hypothesis, reference));
}

}  // namespace relpos
