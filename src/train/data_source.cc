#include "train/data_source.h"

#include <algorithm>
#include <mutex>

#include "base/check.h"
#include "data/tasks/pair_tasks.h"
#include "data/tasks/text_corpus.h"
#include "data/translate/translation_task.h"

namespace relpos::train {

tasks::Example DataSource::SampleTrain(int64_t min_length, int64_t max_length,
                                       Rng& rng) const {
  const uint64_t span = static_cast<uint64_t>(max_length - min_length + 1);
  const int64_t length = min_length + static_cast<int64_t>(rng.Below(span));
  return Sample(length, /*held_out=*/false, rng);
}

namespace {

class TaskData final : public DataSource {
 public:
  explicit TaskData(std::unique_ptr<tasks::Task> task)
      : task_(std::move(task)) {}
  std::string name() const override { return task_->info().name; }
  int32_t vocab_size() const override { return task_->info().vocab_size; }
  model::Arch default_arch() const override { return model::Arch::kEncoder; }
  int64_t min_length() const override { return task_->info().min_length; }
  int64_t max_length() const override { return kMaxTaskSize; }
  int64_t SequenceLength(int64_t length) const override {
    return task_->SequenceLength(length);
  }
  tasks::Example Sample(int64_t length, bool /*held_out*/,
                        Rng& rng) const override {
    return task_->Generate(length, rng);
  }
  std::string metric_description() const override {
    return "per-token accuracy over the output positions";
  }

 private:
  std::unique_ptr<tasks::Task> task_;
};

class LmData final : public DataSource {
 public:
  explicit LmData(tasks::TextCorpus corpus) : corpus_(std::move(corpus)) {}
  std::string name() const override { return kLanguageModelTask; }
  int32_t vocab_size() const override { return tasks::TextCorpus::kVocabSize; }
  model::Arch default_arch() const override { return model::Arch::kDecoder; }
  int64_t min_length() const override { return 1; }
  int64_t max_length() const override {
    return std::min({corpus_.MaxSampleLength(false),
                     corpus_.MaxSampleLength(true), kMaxTaskSize});
  }
  int64_t SequenceLength(int64_t length) const override { return length; }
  tasks::Example Sample(int64_t length, bool held_out,
                        Rng& rng) const override {
    return corpus_.Sample(length, held_out, rng);
  }
  std::string metric_description() const override {
    return "next-byte accuracy on held-out text";
  }
  std::string source_description() const override { return corpus_.source(); }

 private:
  tasks::TextCorpus corpus_;
};

// Source-target pairs under teacher forcing.
class PairData final : public DataSource {
 public:
  explicit PairData(std::shared_ptr<const tasks::PairSource> pairs)
      : pairs_(std::move(pairs)) {}
  std::string name() const override { return pairs_->name(); }
  int32_t vocab_size() const override { return pairs_->vocab_size(); }
  model::Arch default_arch() const override { return model::Arch::kSeq2seq; }
  int64_t min_length() const override { return pairs_->min_length(); }
  int64_t max_length() const override {
    return std::min(pairs_->max_length(), kMaxTaskSize);
  }
  int64_t SequenceLength(int64_t length) const override {
    return std::max(pairs_->MaxSourceTokens(length),
                    pairs_->MaxTargetTokens(length) + 1);
  }
  tasks::Example Sample(int64_t length, bool held_out,
                        Rng& rng) const override {
    return tasks::TeacherForced(pairs_->Sample(length, held_out, rng),
                                pairs_->tokens());
  }
  tasks::Example SampleTrain(int64_t min_length, int64_t max_length,
                             Rng& rng) const override {
    return tasks::TeacherForced(
        pairs_->SampleTrain(min_length, max_length, rng), pairs_->tokens());
  }
  const tasks::PairSource* pairs() const override { return pairs_.get(); }
  std::string vocabulary() const override { return pairs_->vocabulary(); }
  std::string metric_description() const override {
    return pairs_->metric_description();
  }
  std::string source_description() const override {
    return pairs_->source_description();
  }

 private:
  std::shared_ptr<const tasks::PairSource> pairs_;
};

// Task translate. Reading the corpus and training the vocabulary take
// seconds, and one run builds its data several times (resolving the config,
// the trainer, decoding), so the last one built is kept: the same corpus
// settings with no vocabulary bytes, or with the bytes it holds, share it.
std::unique_ptr<DataSource> MakeTranslationData(const DataConfig& config) {
  static std::mutex mutex;
  static DataConfig cached_config;
  static std::shared_ptr<const translate::TranslationTask> cached;
  const std::string path =
      config.corpus_path.empty() ? "/usr/share/locale" : config.corpus_path;
  std::lock_guard<std::mutex> lock(mutex);
  const bool same = cached && cached_config.corpus_path == path &&
                    cached_config.src_lang == config.src_lang &&
                    cached_config.tgt_lang == config.tgt_lang &&
                    cached_config.sentencepiece_size ==
                        config.sentencepiece_size &&
                    (config.vocabulary.empty() ||
                     config.vocabulary == cached->vocabulary());
  if (!same) {
    cached.reset();
    cached = std::make_shared<const translate::TranslationTask>(
        translate::TranslationTaskOptions{
            .corpus = {.path = path,
                       .source_language = config.src_lang,
                       .target_language = config.tgt_lang},
            .vocabulary_size = config.sentencepiece_size,
            .vocabulary = config.vocabulary});
    cached_config = config;
    cached_config.corpus_path = path;
  }
  return std::make_unique<PairData>(cached);
}

}  // namespace

std::vector<std::string> DataTaskNames() {
  std::vector<std::string> names = tasks::TaskNames();
  for (const std::string& n : tasks::PairTaskNames()) names.push_back(n);
  names.push_back(kLanguageModelTask);
  names.push_back(translate::kTranslateTask);
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<DataSource> MakePairDataSource(
    std::unique_ptr<tasks::PairSource> pairs) {
  RELPOS_CHECK_ARG(pairs != nullptr, "MakePairDataSource: no pair source");
  return std::make_unique<PairData>(std::move(pairs));
}

std::unique_ptr<DataSource> MakeDataSource(const DataConfig& config) {
  if (config.task == kLanguageModelTask) {
    RELPOS_CHECK_ARG(config.corpus_bytes >= tasks::TextCorpus::kMinBytes &&
                         config.corpus_bytes <= (int64_t{1} << 30),
                     "corpus_bytes must be in [" << tasks::TextCorpus::kMinBytes
                                                 << ", 2^30] (got "
                                                 << config.corpus_bytes << ")");
    if (!config.corpus_path.empty()) {
      return std::make_unique<LmData>(tasks::TextCorpus::FromPath(
          config.corpus_path, {.pattern = config.corpus_pattern,
                               .max_bytes = config.corpus_max_bytes}));
    }
    return std::make_unique<LmData>(
        tasks::TextCorpus::Generated(config.corpus_seed, config.corpus_bytes));
  }
  if (config.task == translate::kTranslateTask) return MakeTranslationData(config);
  const std::vector<std::string> pair_tasks = tasks::PairTaskNames();
  const bool pair = std::find(pair_tasks.begin(), pair_tasks.end(),
                              config.task) != pair_tasks.end();
  const std::vector<std::string> known = tasks::TaskNames();
  if (!pair &&
      std::find(known.begin(), known.end(), config.task) == known.end()) {
    std::string list;
    for (const std::string& n : DataTaskNames())
      list += (list.empty() ? "" : ", ") + n;
    RELPOS_THROW(InvalidArgument, "unknown task '" << config.task
                                                   << "' (known tasks: " << list
                                                   << ")");
  }
  RELPOS_CHECK_ARG(config.corpus_path.empty(),
                   "a corpus is only used by tasks 'lm' and 'translate' (task is '"
                       << config.task << "')");
  if (pair) return MakePairDataSource(tasks::MakePairTask(config.task));
  return std::make_unique<TaskData>(tasks::MakeTask(config.task));
}

}  // namespace relpos::train
