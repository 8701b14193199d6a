// BeamSearch and Translate of beam_search.h.
#include "model/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "model/arch.h"
#include "model/decoder_session.h"
#include "model/nn/cross_entropy.h"
#include "model/positions.h"

namespace relpos::model {

void Validate(const BeamSearchOptions& o, int64_t vocab_size) {
  RELPOS_CHECK_ARG(o.beam_size >= 1 && o.beam_size <= 4096,
                   "beam size must be in [1, 4096] (got " << o.beam_size
                                                          << ")");
  RELPOS_CHECK_ARG(std::isfinite(o.alpha) && o.alpha >= 0,
                   "length penalty alpha must be >= 0 (got " << o.alpha
                                                             << ")");
  RELPOS_CHECK_ARG(std::isfinite(o.max_length_ratio) && o.max_length_ratio > 0,
                   "max length ratio must be > 0 (got " << o.max_length_ratio
                                                        << ")");
  RELPOS_CHECK_ARG(o.max_length >= 1,
                   "max length must be >= 1 (got " << o.max_length << ")");
  RELPOS_CHECK_ARG(o.bos >= 0 && o.bos < vocab_size && o.eos >= 0 &&
                       o.eos < vocab_size,
                   "decoding needs BOS and EOS ids in [0, vocab_size = "
                       << vocab_size << ") (got " << o.bos << ", " << o.eos
                       << ")");
}

int64_t MaxDecodingSteps(int64_t source_length, const BeamSearchOptions& o) {
  const double steps =
      std::ceil(o.max_length_ratio * static_cast<double>(source_length));
  return std::clamp<int64_t>(
      steps >= static_cast<double>(o.max_length) ? o.max_length
                                                 : static_cast<int64_t>(steps),
      1, o.max_length);
}

double LengthPenaltyOf(const BeamSearchOptions& o, int64_t tokens,
                       bool ended_by_eos) {
  switch (o.length_penalty) {
    case LengthPenalty::kWu: {
      const double n = static_cast<double>(tokens + (ended_by_eos ? 1 : 0));
      return std::pow((5.0 + n) / 6.0, o.alpha);
    }
    case LengthPenalty::kPower:
      return std::pow(static_cast<double>(tokens + (ended_by_eos ? 1 : 0)),
                      o.alpha);
    case LengthPenalty::kNone:
      break;
  }
  return 1.0;
}

namespace {

// A live hypothesis of the search.
struct Live {
  int64_t sentence = 0;
  std::vector<int32_t> tokens;
  double log_prob = 0;
};

// One continuation: live hypothesis `parent` followed by `token`.
struct Candidate {
  int64_t parent = 0;
  int32_t token = 0;
  double score = 0;  // the cumulative log-probability
};

// Whether continuation a ranks before b: the higher score, then the lower
// hypothesis, then the lower token.
bool Before(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.parent != b.parent) return a.parent < b.parent;
  return a.token < b.token;
}

// The best min(k, hypotheses x V) continuations of live hypotheses
// [h0, h1), best first, into *out; hypothesis h's log-probabilities are
// its logits [V] minus lse[h] (in double). Each hypothesis contributes at
// most k of them, so its own best k (a heap of k over its row: one
// comparison per token for most tokens) are the only ones ranked; *out
// keeps its storage between steps.
template <typename T>
void TopCandidates(const std::vector<Live>& live, int64_t h0, int64_t h1,
                   const std::vector<T>& logits, const std::vector<double>& lse,
                   int64_t V, int64_t k, std::vector<Candidate>* out) {
  out->clear();
  const int64_t per_row = std::min(k, V);
  for (int64_t h = h0; h < h1; ++h) {
    const size_t first = out->size();
    const T* row = logits.data() + h * V;
    const double base = live[h].log_prob - lse[h];
    auto candidate = [&](int64_t v) {
      return Candidate{h, static_cast<int32_t>(v),
                       base + static_cast<double>(row[v])};
    };
    // With Before as its order, a heap's top is its worst candidate.
    for (int64_t v = 0; v < per_row; ++v) {
      out->push_back(candidate(v));
      std::push_heap(out->begin() + first, out->end(), Before);
    }
    // A later token ranks before the top only with a larger logit: the
    // score grows with the logit, and on equal scores the lower token
    // (every one in the heap) ranks first. So a plain comparison with the
    // top's logit passes over most of the row.
    // Blocks of kBlock logits are checked at once (vector code), and only
    // a block with a larger logit is looked at token by token.
    constexpr int64_t kBlock = 16;
    T worst = row[(*out)[first].token];
    for (int64_t v0 = per_row; v0 < V; v0 += kBlock) {
      const int64_t v1 = std::min(V, v0 + kBlock);
      if (v1 - v0 == kBlock) {
        bool any = false;
        for (int64_t i = 0; i < kBlock; ++i) any |= row[v0 + i] > worst;
        if (!any) continue;
      }
      for (int64_t v = v0; v < v1; ++v) {
        if (!(row[v] > worst)) continue;
        const Candidate c = candidate(v);
        if (Before(c, (*out)[first])) {
          std::pop_heap(out->begin() + first, out->end(), Before);
          out->back() = c;
          std::push_heap(out->begin() + first, out->end(), Before);
          worst = row[(*out)[first].token];
        }
      }
    }
  }
  const int64_t n = std::min<int64_t>(k, static_cast<int64_t>(out->size()));
  std::partial_sort(out->begin(), out->begin() + n, out->end(), Before);
  out->resize(n);
}

// The search's state between steps.
struct SearchState {
  std::vector<Live> live;
  std::vector<std::vector<Hypothesis>> finished;
  std::vector<uint8_t> top_finished;
};

// One sentence's step (CTranslate2's loop over the first `beam`
// candidates): finishes hypotheses, keeps `beam` alive unless the sentence
// is done, appending the kept ones to *next (and their parents).
void AdvanceSentence(const std::vector<Candidate>& cand, int64_t sentence,
                     bool last, const BeamSearchOptions& o, SearchState* st,
                     std::vector<Live>* next, std::vector<int64_t>* parents) {
  const int64_t K = static_cast<int64_t>(cand.size());
  const int64_t slots = std::min(o.beam_size, K);
  int64_t secondary = slots;
  std::vector<int64_t> kept;
  for (int64_t k = 0; k < slots; ++k) {
    const Candidate& c = cand[k];
    int64_t keep = k;
    if (c.token == o.eos || last) {
      if (k == 0) st->top_finished[sentence] = 1;
      Hypothesis h;
      h.tokens = st->live[c.parent].tokens;
      h.ended_by_eos = c.token == o.eos;
      if (!h.ended_by_eos) h.tokens.push_back(c.token);
      h.log_prob = c.score;
      st->finished[sentence].push_back(std::move(h));
      // The slot goes to the next candidate that does not end (none: the
      // slot stays empty, which only a vocabulary smaller than the beam's
      // candidates allows).
      keep = -1;
      for (int64_t j = secondary; j < K; ++j) {
        if (cand[j].token != o.eos) {
          keep = j;
          secondary = j + 1;
          break;
        }
      }
    }
    if (keep >= 0) kept.push_back(keep);
  }
  const bool early_exit =
      o.length_penalty == LengthPenalty::kNone || o.alpha == 0;
  const size_t found = st->finished[sentence].size();
  const bool done =
      last || (early_exit ? st->top_finished[sentence] && found >= 1
                          : found >= static_cast<size_t>(o.beam_size));
  if (done) return;
  for (int64_t k : kept) {
    const Candidate& c = cand[k];
    Live l{sentence, st->live[c.parent].tokens, c.score};
    l.tokens.push_back(c.token);
    next->push_back(std::move(l));
    parents->push_back(c.parent);
  }
}

// The best finished hypothesis by score (ties: the first registered).
Hypothesis Best(std::vector<Hypothesis>& finished,
                const BeamSearchOptions& o) {
  for (Hypothesis& h : finished) {
    h.score = h.log_prob / LengthPenaltyOf(o, static_cast<int64_t>(
                                                  h.tokens.size()),
                                           h.ended_by_eos);
  }
  const auto best = std::max_element(
      finished.begin(), finished.end(),
      [](const Hypothesis& a, const Hypothesis& b) { return a.score < b.score; });
  return *best;
}

template <typename T>
class SessionSteps final : public StepModel<T> {
 public:
  explicit SessionSteps(BasicDecoderSession<T>* session, int64_t vocab)
      : session_(session), vocab_(vocab) {}
  int64_t vocab_size() const override { return vocab_; }
  void Step(const std::vector<int32_t>& tokens,
            std::vector<T>* logits) override {
    session_->Step(tokens, logits);
  }
  void Reorder(const std::vector<int64_t>& parents) override {
    session_->Reorder(parents);
  }

 private:
  BasicDecoderSession<T>* session_;
  int64_t vocab_;
};

}  // namespace

template <typename T>
std::vector<Hypothesis> BeamSearch(StepModel<T>& model,
                                   const std::vector<int64_t>& max_steps,
                                   const BeamSearchOptions& o) {
  const int64_t V = model.vocab_size();
  Validate(o, V);
  const int64_t S = static_cast<int64_t>(max_steps.size());
  RELPOS_CHECK_ARG(S >= 1, "beam search: no sentence");
  SearchState st;
  st.finished.resize(S);
  st.top_finished.assign(S, 0);
  for (int64_t s = 0; s < S; ++s) {
    RELPOS_CHECK_ARG(max_steps[s] >= 1, "beam search: max_steps["
                                            << s << "] must be >= 1 (got "
                                            << max_steps[s] << ")");
    st.live.push_back({s, {}, 0.0});
  }
  std::vector<int32_t> feed(S, o.bos);
  std::vector<T> logits;
  std::vector<double> lse;
  std::vector<Candidate> candidates;
  for (int64_t step = 0; !st.live.empty(); ++step) {
    model.Step(feed, &logits);
    const int64_t rows = static_cast<int64_t>(logits.size()) / V;
    lse.resize(static_cast<size_t>(rows));
    nn::LogSumExpRows(logits.data(), rows, V, lse.data());
    std::vector<Live> next;
    std::vector<int64_t> parents;
    const int64_t live = static_cast<int64_t>(st.live.size());
    for (int64_t h0 = 0; h0 < live;) {
      const int64_t s = st.live[h0].sentence;
      int64_t h1 = h0 + 1;
      while (h1 < live && st.live[h1].sentence == s) ++h1;
      TopCandidates(st.live, h0, h1, logits, lse, V, 2 * o.beam_size,
                    &candidates);
      AdvanceSentence(candidates, s, step + 1 >= max_steps[s], o, &st, &next,
                      &parents);
      h0 = h1;
    }
    feed.clear();
    for (const Live& l : next) feed.push_back(l.tokens.back());
    if (!next.empty()) model.Reorder(parents);
    st.live = std::move(next);
  }
  std::vector<Hypothesis> best;
  for (int64_t s = 0; s < S; ++s) best.push_back(Best(st.finished[s], o));
  return best;
}

template <typename T>
std::vector<Hypothesis> Translate(
    const BasicTransformer<T>& model,
    const std::vector<std::vector<int32_t>>& sources,
    const BeamSearchOptions& o) {
  const ModelConfig& c = model.config();
  RELPOS_CHECK_ARG(Describe(c.arch).source,
                   "translation needs a seq2seq model; this model's arch is "
                       << ToString(c.arch));
  Validate(o, c.vocab_size);
  RELPOS_CHECK_ARG(!sources.empty(), "translation: no source sentence");
  std::vector<int64_t> steps;
  int64_t capacity = 1;
  for (const auto& src : sources) {
    int64_t n = MaxDecodingSteps(static_cast<int64_t>(src.size()), o);
    // A learned position table has no row beyond max_len.
    if (HasLearnedInputTable(c)) n = std::min(n, c.scheme.max_len);
    steps.push_back(n);
    capacity = std::max(capacity, n);
  }
  BasicDecoderSession<T> session(model, sources, capacity, o.quantized);
  SessionSteps<T> steps_model(&session, c.vocab_size);
  return BeamSearch<T>(steps_model, steps, o);
}

template std::vector<Hypothesis> BeamSearch<float>(StepModel<float>&,
                                                   const std::vector<int64_t>&,
                                                   const BeamSearchOptions&);
template std::vector<Hypothesis> BeamSearch<double>(
    StepModel<double>&, const std::vector<int64_t>&, const BeamSearchOptions&);
template std::vector<Hypothesis> Translate<float>(
    const BasicTransformer<float>&, const std::vector<std::vector<int32_t>>&,
    const BeamSearchOptions&);
template std::vector<Hypothesis> Translate<double>(
    const BasicTransformer<double>&, const std::vector<std::vector<int32_t>>&,
    const BeamSearchOptions&);

}  // namespace relpos::model
