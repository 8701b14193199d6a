// relpos::Translator and relpos::EvaluateTranslation: text in and out of a
// seq2seq checkpoint of task translate, through its SentencePiece vocabulary
// (translate/vocabulary.h), and BLEU / chrF on the held-out split.
#include "relpos/lab/translation.h"

#include <chrono>
#include <sstream>

#include "lab/api/internal.h"
#include "base/check.h"
#include "model/arch.h"
#include "relpos/data/metrics.h"
#include "relpos/data/parallel_text.h"
#include "train/lengths.h"
#include "train/progress.h"
#include "data/translate/parallel_corpus.h"
#include "data/translate/translation_task.h"
#include "data/translate/utf8.h"
#include "data/translate/vocabulary.h"

namespace relpos {
namespace {

using translate::Vocabulary;

Vocabulary VocabularyOf(const Model& model) {
  const auto& c = Internals(model.config());
  RELPOS_CHECK_ARG(c.train.data.task == translate::kTranslateTask,
                   "not a translation checkpoint: its task is '"
                       << c.train.data.task << "' (translation needs task "
                       << translate::kTranslateTask << ")");
  RELPOS_CHECK_ARG(model::Describe(c.model.arch).source,
                   "not a translation checkpoint: its arch is "
                       << model::ToString(c.model.arch));
  if (c.train.data.vocabulary.empty()) {
    RELPOS_THROW(FormatError, "the checkpoint has no vocabulary ("
                                  << kSentencePieceFile << ")");
  }
  Vocabulary v =
      Vocabulary::FromBytes(c.train.data.vocabulary, kSentencePieceFile);
  if (v.size() != c.model.vocab_size) {
    RELPOS_THROW(FormatError, kSentencePieceFile
                                  << " holds " << v.size()
                                  << " pieces, the model has vocab_size "
                                  << c.model.vocab_size);
  }
  return v;
}

int64_t MaxSourceTokens(const Model& model) {
  const model::ModelConfig& m = Internals(model.config()).model;
  return m.position == model::PositionScheme::kLearned
             ? m.scheme.max_len
             : kMaxTranslationSourceTokens;
}

DecodeOptions WithTokens(DecodeOptions o) {
  o.bos = Vocabulary::kBos;
  o.eos = Vocabulary::kEos;
  return o;
}

}  // namespace

struct Translator::Impl {
  std::unique_ptr<Model> owned;
  Model* model = nullptr;
  std::unique_ptr<Vocabulary> vocabulary;
};

Translator::Translator() : impl_(std::make_unique<Impl>()) {}
Translator::~Translator() = default;
Translator::Translator(Translator&&) noexcept = default;
Translator& Translator::operator=(Translator&&) noexcept = default;

Translator::Translator(Model& model) : Translator() {
  impl_->vocabulary = std::make_unique<Vocabulary>(VocabularyOf(model));
  impl_->model = &model;
}

Translator Translator::Load(const std::string& dir,
                            const std::string& compute_type) {
  Translator t;
  t.impl_->owned = std::make_unique<Model>(Model::Load(dir, compute_type));
  t.impl_->vocabulary =
      std::make_unique<Vocabulary>(VocabularyOf(*t.impl_->owned));
  t.impl_->model = t.impl_->owned.get();
  return t;
}

Model& Translator::model() { return *impl_->model; }

int64_t Translator::max_source_tokens() const {
  return MaxSourceTokens(*impl_->model);
}

std::vector<int32_t> Translator::Encode(const std::string& text) const {
  RELPOS_CHECK_ARG(translate::IsValidUtf8(text), "the text is not UTF-8");
  std::string normalised = text;
  RELPOS_CHECK_ARG(translate::NormaliseText(normalised),
                   "the text holds control characters");
  RELPOS_CHECK_ARG(!normalised.empty(), "the text is empty");
  RELPOS_CHECK_ARG(static_cast<int64_t>(normalised.size()) <=
                       kMaxPairTextBytes,
                   "the text has " << normalised.size()
                                   << " bytes, more than a corpus pair has ("
                                   << kMaxPairTextBytes << ")");
  std::vector<int32_t> ids = impl_->vocabulary->Encode(normalised);
  const int64_t limit = max_source_tokens();
  RELPOS_CHECK_ARG(static_cast<int64_t>(ids.size()) <= limit,
                   "the text has " << ids.size()
                                   << " pieces, more than the model takes ("
                                   << limit << ")");
  return ids;
}

std::string Translator::Decode(const std::vector<int32_t>& ids) const {
  return impl_->vocabulary->Decode(ids);
}

std::vector<TextTranslation> Translator::TranslateIds(
    const std::vector<std::vector<int32_t>>& sources,
    const DecodeOptions& options) {
  std::vector<Translation> best =
      impl_->model->Translate(sources, WithTokens(options));
  std::vector<TextTranslation> out;
  for (size_t i = 0; i < best.size(); ++i) {
    out.push_back({.text = Decode(best[i].tokens),
                   .best = std::move(best[i]),
                   .source_tokens = static_cast<int64_t>(sources[i].size())});
  }
  return out;
}

std::vector<TextTranslation> Translator::Translate(
    const std::vector<std::string>& lines, const DecodeOptions& options) {
  std::vector<std::vector<int32_t>> sources;
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      sources.push_back(Encode(lines[i]));
    } catch (const InvalidArgument& e) {
      RELPOS_THROW(InvalidArgument,
                   "line " << i + 1 << ": " << MessageBody(e));
    }
  }
  return TranslateIds(sources, options);
}

namespace {

// The buckets of TranslationEvalResult::scores, before counting.
std::vector<TranslationScores> Buckets(int64_t lo, int64_t hi) {
  std::vector<TranslationScores> b;
  auto add = [&](int64_t a, int64_t z, bool inside) {
    std::ostringstream label;
    if (z < 0) {
      label << '>' << a - 1;
    } else {
      label << train::FormatLengthRange(a, z);
    }
    label << (inside ? " (inside)" : (a > hi ? " (beyond)" : " (shorter)"));
    b.push_back({.label = label.str(), .min_words = a, .max_words = z,
                 .inside = inside});
  };
  b.push_back({.label = "all", .min_words = 1, .max_words = -1});
  if (lo > 1) add(1, lo - 1, false);
  add(lo, hi, true);
  add(hi + 1, 2 * hi, false);
  add(2 * hi + 1, 4 * hi, false);
  add(4 * hi + 1, -1, false);
  return b;
}

bool InBucket(const TranslationScores& b, int64_t words) {
  return words >= b.min_words && (b.max_words < 0 || words <= b.max_words);
}

}  // namespace

TranslationEvalResult EvaluateTranslation(
    Model& model, const TranslationEvalOptions& options) {
  Translator translator(model);  // checks the task and the vocabulary
  RELPOS_CHECK_ARG(options.batch_size >= 1 && options.max_sentences >= 0,
                   "batch size must be >= 1 and max sentences >= 0 (got "
                       << options.batch_size << ", " << options.max_sentences
                       << ")");
  const train::TrainConfig& tc = Internals(model.config()).train;
  const std::unique_ptr<train::DataSource> data =
      train::MakeDataSource(tc.data);
  const auto* task =
      dynamic_cast<const translate::TranslationTask*>(data->pairs());
  RELPOS_CHECK_ARG(task != nullptr, "the model's data is not a corpus");
  const auto& test = task->test();
  const int64_t n = static_cast<int64_t>(test.size());
  const int64_t take = options.max_sentences > 0
                           ? std::min(options.max_sentences, n)
                           : n;
  TranslationEvalResult r;
  std::vector<const translate::TokenisedPair*> pairs;
  for (int64_t k = 0; k < take; ++k) {
    const auto& p = test[static_cast<size_t>(k * n / take)];
    if (static_cast<int64_t>(p.source_ids.size()) >
        translator.max_source_tokens()) {
      ++r.skipped;
      continue;
    }
    pairs.push_back(&p);
  }
  RELPOS_CHECK_ARG(!pairs.empty(), "no held-out pair to translate");
  DecodeOptions decode = options.decode;
  if (options.threads > 0) decode.threads = options.threads;
  // A batch per thread at a time (the threads take the batches in turn).
  const int workers = decode.threads > 0 ? decode.threads : tc.threads;
  decode.max_batch_size = options.batch_size;
  const int64_t total = static_cast<int64_t>(pairs.size());
  const int64_t group =
      options.batch_size >= total
          ? total
          : std::min<int64_t>(total, options.batch_size * std::max(1, workers));
  std::unique_ptr<train::Progress> progress;
  if (options.progress.out) {
    progress = std::make_unique<train::Progress>(
        *options.progress.out, options.progress.label, total,
        ProgressModeOf(options.progress.mode));
  }
  const auto start = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < total; b += group) {
    std::vector<std::vector<int32_t>> sources;
    for (int64_t i = b; i < std::min(total, b + group); ++i)
      sources.push_back(pairs[static_cast<size_t>(i)]->source_ids);
    for (TextTranslation& t : translator.TranslateIds(sources, decode))
      r.hypotheses.push_back(std::move(t.text));
    if (progress) progress->Update(static_cast<int64_t>(r.hypotheses.size()));
  }
  if (progress) progress->Finish();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            start)
                  .count();
  for (const auto* p : pairs) {
    r.sources.push_back(p->source);
    r.references.push_back(p->target);
  }
  for (TranslationScores& s : Buckets(tc.train_min_length,
                                      tc.train_max_length)) {
    BleuStats bleu;
    ChrfStats chrf;
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (!InBucket(s, pairs[i]->words)) continue;
      ++s.sentences;
      bleu += SegmentBleuStats(r.hypotheses[i], r.references[i]);
      chrf += SegmentChrfStats(r.hypotheses[i], r.references[i]);
    }
    if (s.sentences == 0) continue;
    s.bleu = BleuFromStats(bleu).score;
    s.chrf = ChrfFromStats(chrf);
    r.scores.push_back(s);
  }
  return r;
}

}  // namespace relpos
