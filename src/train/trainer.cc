#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/check.h"
#include "tasks/text_corpus.h"
#include "train/checkpoint.h"

namespace relpos::train {

// ================================================================ lengths

namespace {

// Strict decimal parse of a positive integer (no sign, no spaces, no
// overflow). Returns false on anything else.
bool ParsePositive(const std::string& s, int64_t* value) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *value = v;
  return true;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    parts.push_back(
        s.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

}  // namespace

std::pair<int64_t, int64_t> ParseLengthRange(const std::string& spec,
                                             const std::string& flag,
                                             int64_t max_length) {
  const std::vector<std::string> parts = Split(spec, '-');
  int64_t lo = 0, hi = 0;
  const bool ok =
      (parts.size() == 1 && ParsePositive(parts[0], &lo) && (hi = lo, true)) ||
      (parts.size() == 2 && ParsePositive(parts[0], &lo) &&
       ParsePositive(parts[1], &hi));
  RELPOS_CHECK_ARG(ok, flag << " must be a length range A-B with positive "
                               "integers (got '"
                            << spec << "')");
  RELPOS_CHECK_ARG(lo <= hi, flag << " range " << spec
                                  << " is reversed (the first length must "
                                     "not exceed the second)");
  RELPOS_CHECK_ARG(lo >= 1 && hi <= max_length,
                   flag << " lengths must be in [1, " << max_length
                        << "] (got '" << spec << "')");
  return {lo, hi};
}

std::vector<int64_t> ParseLengths(const std::string& spec,
                                  const std::string& flag, int64_t max_length) {
  constexpr size_t kMaxCount = 4096;
  std::set<int64_t> lengths;
  RELPOS_CHECK_ARG(!spec.empty(), flag << " must not be empty");
  for (const std::string& item : Split(spec, ',')) {
    const std::vector<std::string> range_step = Split(item, ':');
    RELPOS_CHECK_ARG(
        range_step.size() <= 2,
        flag << ": bad item '" << item << "' (expected N, A-B or A-B:STEP)");
    const auto [lo, hi] = ParseLengthRange(range_step[0], flag, max_length);
    int64_t stride = 1;
    if (range_step.size() == 2) {
      RELPOS_CHECK_ARG(ParsePositive(range_step[1], &stride) && stride >= 1,
                       flag << ": bad step in '" << item
                            << "' (expected a positive integer)");
    }
    RELPOS_CHECK_ARG((hi - lo) / stride + 1 + lengths.size() <= kMaxCount,
                     flag << " lists more than " << kMaxCount << " lengths ('"
                          << spec << "')");
    for (int64_t n = lo; n <= hi; n += stride) lengths.insert(n);
    lengths.insert(hi);
  }
  return {lengths.begin(), lengths.end()};
}

std::string FormatLengthRange(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo)
                  : std::to_string(lo) + "-" + std::to_string(hi);
}

// =================================================================== data

namespace {

// Largest size parameter the trainer accepts for the formal tasks: far
// beyond anything a small model can process, small enough that a typo
// cannot request gigabytes.
constexpr int64_t kMaxTaskSize = int64_t{1} << 16;

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

 private:
  tasks::TextCorpus corpus_;
};

}  // namespace

std::vector<std::string> DataTaskNames() {
  std::vector<std::string> names = tasks::TaskNames();
  names.push_back(kLanguageModelTask);
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<DataSource> MakeDataSource(const DataConfig& config) {
  if (config.task == kLanguageModelTask) {
    RELPOS_CHECK_ARG(config.corpus_bytes >= tasks::TextCorpus::kMinBytes &&
                         config.corpus_bytes <= (int64_t{1} << 30),
                     "corpus_bytes must be in [" << tasks::TextCorpus::kMinBytes
                                                 << ", 2^30] (got "
                                                 << config.corpus_bytes << ")");
    if (!config.corpus_path.empty()) {
      return std::make_unique<LmData>(
          tasks::TextCorpus::FromFile(config.corpus_path));
    }
    return std::make_unique<LmData>(
        tasks::TextCorpus::Generated(config.corpus_seed, config.corpus_bytes));
  }
  const std::vector<std::string> known = tasks::TaskNames();
  if (std::find(known.begin(), known.end(), config.task) == known.end()) {
    std::string list;
    for (const std::string& n : DataTaskNames())
      list += (list.empty() ? "" : ", ") + n;
    RELPOS_THROW(InvalidArgument, "unknown task '" << config.task
                                                   << "' (known tasks: " << list
                                                   << ")");
  }
  RELPOS_CHECK_ARG(config.corpus_path.empty(),
                   "a corpus file is only used by task 'lm' (task is '"
                       << config.task << "')");
  return std::make_unique<TaskData>(tasks::MakeTask(config.task));
}

// ================================================================= config

nlohmann::json ToJson(const TrainConfig& c) {
  return {
      {"task", c.data.task},
      {"corpus_path", c.data.corpus_path},
      {"corpus_seed", c.data.corpus_seed},
      {"corpus_bytes", c.data.corpus_bytes},
      {"train_min_length", c.train_min_length},
      {"train_max_length", c.train_max_length},
      {"steps", c.steps},
      {"batch_size", c.batch_size},
      {"lr", c.lr},
      {"warmup_steps", c.warmup_steps},
      {"min_lr_ratio", c.min_lr_ratio},
      {"beta1", c.adamw.beta1},
      {"beta2", c.adamw.beta2},
      {"eps", c.adamw.eps},
      {"weight_decay", c.adamw.weight_decay},
      {"clip_norm", c.clip_norm},
      {"seed", c.seed},
      {"threads", c.threads},
      {"checkpoint_every", c.checkpoint_every},
  };
}

namespace {

// Typed field readers: FormatError naming the field on a type mismatch.
void ReadString(const nlohmann::json& j, const char* key, std::string* out) {
  if (!j.contains(key)) return;
  if (!j[key].is_string()) {
    RELPOS_THROW(FormatError,
                 "train config: field '" << key << "' must be a string");
  }
  *out = j[key].get<std::string>();
}

template <typename Int>
void ReadInt(const nlohmann::json& j, const char* key, Int* out) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j[key];
  if constexpr (std::is_unsigned_v<Int>) {
    if (!v.is_number_unsigned()) {
      RELPOS_THROW(FormatError, "train config: field '"
                                    << key
                                    << "' must be a non-negative integer");
    }
    *out = static_cast<Int>(v.get<uint64_t>());
  } else {
    if (!v.is_number_integer()) {
      RELPOS_THROW(FormatError,
                   "train config: field '" << key << "' must be an integer");
    }
    const int64_t x =
        v.is_number_unsigned()
            ? static_cast<int64_t>(std::min<uint64_t>(
                  v.get<uint64_t>(), std::numeric_limits<int64_t>::max()))
            : v.get<int64_t>();
    if (x < std::numeric_limits<Int>::min() ||
        x > std::numeric_limits<Int>::max()) {
      RELPOS_THROW(FormatError, "train config: field '"
                                    << key << "' is out of range (" << x
                                    << ")");
    }
    *out = static_cast<Int>(x);
  }
}

void ReadDouble(const nlohmann::json& j, const char* key, double* out) {
  if (!j.contains(key)) return;
  if (!j[key].is_number()) {
    RELPOS_THROW(FormatError,
                 "train config: field '" << key << "' must be a number");
  }
  *out = j[key].get<double>();
}

}  // namespace

TrainConfig TrainConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object())
    RELPOS_THROW(FormatError, "train config must be a JSON object");
  TrainConfig c;
  const nlohmann::json known = ToJson(c);
  for (const auto& [key, value] : j.items()) {
    if (!known.contains(key)) {
      RELPOS_THROW(FormatError, "train config: unknown field '" << key << "'");
    }
  }
  ReadString(j, "task", &c.data.task);
  ReadString(j, "corpus_path", &c.data.corpus_path);
  ReadInt(j, "corpus_seed", &c.data.corpus_seed);
  ReadInt(j, "corpus_bytes", &c.data.corpus_bytes);
  ReadInt(j, "train_min_length", &c.train_min_length);
  ReadInt(j, "train_max_length", &c.train_max_length);
  ReadInt(j, "steps", &c.steps);
  ReadInt(j, "batch_size", &c.batch_size);
  ReadDouble(j, "lr", &c.lr);
  ReadInt(j, "warmup_steps", &c.warmup_steps);
  ReadDouble(j, "min_lr_ratio", &c.min_lr_ratio);
  ReadDouble(j, "beta1", &c.adamw.beta1);
  ReadDouble(j, "beta2", &c.adamw.beta2);
  ReadDouble(j, "eps", &c.adamw.eps);
  ReadDouble(j, "weight_decay", &c.adamw.weight_decay);
  ReadDouble(j, "clip_norm", &c.clip_norm);
  ReadInt(j, "seed", &c.seed);
  ReadInt(j, "threads", &c.threads);
  ReadInt(j, "checkpoint_every", &c.checkpoint_every);
  Validate(c);
  return c;
}

ScheduleConfig MakeSchedule(const TrainConfig& c) {
  return ScheduleConfig{.peak_lr = c.lr,
                        .warmup_steps = c.warmup_steps,
                        .total_steps = c.steps,
                        .min_lr_ratio = c.min_lr_ratio};
}

void Validate(const TrainConfig& c) {
  RELPOS_CHECK_ARG(!c.data.task.empty(), "task must not be empty");
  RELPOS_CHECK_ARG(
      c.train_min_length >= 1 && c.train_max_length <= kMaxTaskSize,
      "train lengths must be in [1, " << kMaxTaskSize << "] (got "
                                      << c.train_min_length << "-"
                                      << c.train_max_length << ")");
  RELPOS_CHECK_ARG(c.train_min_length <= c.train_max_length,
                   "train length range " << c.train_min_length << "-"
                                         << c.train_max_length
                                         << " is reversed");
  RELPOS_CHECK_ARG(c.steps >= 1 && c.steps <= 1'000'000'000,
                   "steps must be in [1, 1e9] (got " << c.steps << ")");
  RELPOS_CHECK_ARG(
      c.batch_size >= 1 && c.batch_size <= 65536,
      "batch_size must be in [1, 65536] (got " << c.batch_size << ")");
  RELPOS_CHECK_ARG(c.warmup_steps >= 0 && c.warmup_steps <= c.steps,
                   "warmup_steps must be in [0, steps="
                       << c.steps << "] (got " << c.warmup_steps << ")");
  Validate(MakeSchedule(c));
  Validate(c.adamw);
  RELPOS_CHECK_ARG(std::isfinite(c.clip_norm) && c.clip_norm >= 0,
                   "clip_norm must be >= 0 (got " << c.clip_norm << ")");
  RELPOS_CHECK_ARG(c.threads >= 1 && c.threads <= 1024,
                   "threads must be in [1, 1024] (got " << c.threads << ")");
  RELPOS_CHECK_ARG(
      c.checkpoint_every >= 0,
      "checkpoint_every must be >= 0 (got " << c.checkpoint_every << ")");
  RELPOS_CHECK_ARG(
      c.data.corpus_bytes >= 1 && c.data.corpus_bytes <= (int64_t{1} << 30),
      "corpus_bytes must be in [1, 2^30] (got " << c.data.corpus_bytes << ")");
}

void CheckModelAndData(const model::ModelConfig& m, const TrainConfig& t,
                       const DataSource& data) {
  RELPOS_CHECK_ARG(m.vocab_size == data.vocab_size(),
                   "model vocab_size "
                       << m.vocab_size << " does not match task '"
                       << data.name() << "' (" << data.vocab_size() << ")");
  RELPOS_CHECK_ARG(t.train_min_length >= data.min_length() &&
                       t.train_max_length <= data.max_length(),
                   "train lengths "
                       << t.train_min_length << "-" << t.train_max_length
                       << " must be within [" << data.min_length() << ", "
                       << data.max_length() << "] for task '" << data.name()
                       << "'");
  const int64_t longest = data.SequenceLength(t.train_max_length);
  RELPOS_CHECK_ARG(
      m.position != model::PositionScheme::kLearned || longest <= m.max_len,
      "learned positions: max_len " << m.max_len
                                    << " is shorter than the longest "
                                       "training sequence ("
                                    << longest << " tokens)");
}

// ================================================================ batches

namespace {

// Pads `examples` into one batch (pad token 0, target -1).
model::Batch Pack(std::vector<tasks::Example>& examples) {
  model::Batch b;
  b.batch = static_cast<int64_t>(examples.size());
  for (const auto& e : examples) {
    b.length =
        std::max<int64_t>(b.length, static_cast<int64_t>(e.tokens.size()));
  }
  b.tokens.assign(static_cast<size_t>(b.batch * b.length), 0);
  b.targets.assign(static_cast<size_t>(b.batch * b.length), -1);
  b.lengths.resize(static_cast<size_t>(b.batch));
  for (int64_t i = 0; i < b.batch; ++i) {
    const auto& e = examples[static_cast<size_t>(i)];
    std::copy(e.tokens.begin(), e.tokens.end(),
              b.tokens.begin() + i * b.length);
    std::copy(e.targets.begin(), e.targets.end(),
              b.targets.begin() + i * b.length);
    b.lengths[static_cast<size_t>(i)] = static_cast<int64_t>(e.tokens.size());
  }
  return b;
}

}  // namespace

model::Batch MakeTrainBatch(const DataSource& data, int64_t batch_size,
                            int64_t min_length, int64_t max_length, Rng& rng) {
  std::vector<tasks::Example> examples;
  examples.reserve(static_cast<size_t>(batch_size));
  const uint64_t span = static_cast<uint64_t>(max_length - min_length + 1);
  for (int64_t i = 0; i < batch_size; ++i) {
    const int64_t length = min_length + static_cast<int64_t>(rng.Below(span));
    examples.push_back(data.Sample(length, /*held_out=*/false, rng));
  }
  return Pack(examples);
}

model::Batch MakeFixedBatch(const DataSource& data, int64_t count,
                            int64_t length, bool held_out, Rng& rng) {
  std::vector<tasks::Example> examples;
  examples.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    examples.push_back(data.Sample(length, held_out, rng));
  }
  return Pack(examples);
}

// ============================================================= evaluation

uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  // SplitMix64's finaliser over (seed, stream): nearby inputs give unrelated
  // outputs, so streams 1, 2, 3 of one seed do not overlap in practice.
  uint64_t z = seed ^ (stream * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void CheckEvalLengths(const model::ModelConfig& m, const DataSource& data,
                      const std::vector<int64_t>& lengths) {
  RELPOS_CHECK_ARG(!lengths.empty(), "--lengths must name at least one length");
  for (int64_t n : lengths) {
    RELPOS_CHECK_ARG(n >= data.min_length() && n <= data.max_length(),
                     "--lengths: " << n << " is outside [" << data.min_length()
                                   << ", " << data.max_length()
                                   << "] for task '" << data.name() << "'");
    const int64_t tokens = data.SequenceLength(n);
    RELPOS_CHECK_ARG(
        m.position != model::PositionScheme::kLearned || tokens <= m.max_len,
        "--lengths: length " << n << " needs " << tokens
                             << " positions but the learned table "
                                "has max_len "
                             << m.max_len << " rows");
  }
}

std::vector<LengthResult> EvaluateByLength(model::Transformer& model,
                                           const DataSource& data,
                                           const EvalConfig& config,
                                           Progress* progress) {
  RELPOS_CHECK_ARG(config.sequences_per_length >= 1,
                   "sequences per length must be >= 1 (got "
                       << config.sequences_per_length << ")");
  RELPOS_CHECK_ARG(config.batch_size >= 1, "eval batch size must be >= 1 (got "
                                               << config.batch_size << ")");
  CheckEvalLengths(model.config(), data, config.lengths);
  std::vector<LengthResult> results;
  int64_t done = 0, tokens_seen = 0;
  for (int64_t length : config.lengths) {
    // One stream per length: the examples at a length do not depend on which
    // other lengths are evaluated.
    Rng rng(DeriveSeed(config.seed, static_cast<uint64_t>(length)));
    model::Metrics metrics;
    for (int64_t start = 0; start < config.sequences_per_length;
         start += config.batch_size) {
      const int64_t count =
          std::min(config.batch_size, config.sequences_per_length - start);
      const model::Batch batch =
          MakeFixedBatch(data, count, length, /*held_out=*/true, rng);
      model.Evaluate(batch, &metrics, nullptr);
      tokens_seen += batch.batch * batch.length;
      if (progress) progress->Update(++done, -1.0, tokens_seen);
    }
    LengthResult r;
    r.length = length;
    r.sequence_length = data.SequenceLength(length);
    r.tokens = metrics.tokens;
    r.sequences = metrics.sequences;
    const double tok =
        static_cast<double>(std::max<int64_t>(metrics.tokens, 1));
    r.token_accuracy = static_cast<double>(metrics.correct_tokens) / tok;
    r.sequence_accuracy =
        static_cast<double>(metrics.correct_sequences) /
        static_cast<double>(std::max<int64_t>(metrics.sequences, 1));
    r.loss = metrics.loss_sum / tok;
    results.push_back(r);
  }
  return results;
}

// ================================================================ trainer

int SetThreads(int threads) {
  RELPOS_CHECK_ARG(threads >= 1,
                   "threads must be >= 1 (got " << threads << ")");
  omp_set_num_threads(threads);
  return omp_get_max_threads();
}

namespace {

// Stream ids under TrainConfig::seed.
constexpr uint64_t kInitStream = 1, kDataStream = 2, kDropoutStream = 3;

// Decoupled weight decay goes to the weight matrices of the linear layers and
// the token embedding; biases, LayerNorm gains and every position table
// (absolute or relative) are left alone, as in common practice: decaying
// rarely-seen position rows would pull them to zero for no benefit.
bool DecayParameter(const model::Parameter& p) {
  if (p.shape.size() < 2) return false;
  const std::string& n = p.name;
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  return !(has("pos") || has("rel") || has("norm") || has("ln"));
}

std::vector<ParamSlot> Slots(model::Transformer& model) {
  std::vector<ParamSlot> slots;
  for (model::Parameter& p : model.parameters()) {
    slots.push_back({std::span<float>(p.value), std::span<const float>(p.grad),
                     DecayParameter(p)});
  }
  return slots;
}

// Name of the first tensor holding a non-finite value in `field`, or "".
template <typename Field>
std::string FirstNonFinite(const model::Transformer& model, Field field) {
  for (const model::Parameter& p : model.parameters()) {
    for (float x : field(p)) {
      if (!std::isfinite(x)) return p.name;
    }
  }
  return "";
}

}  // namespace

Trainer::Trainer(const model::ModelConfig& model_config,
                 const TrainConfig& config)
    : config_(config) {
  Validate(config_);
  data_ = MakeDataSource(config_.data);
  model::ModelConfig m = model_config;
  m.vocab_size = data_->vocab_size();
  m.seed = DeriveSeed(config_.seed, kInitStream);
  model::Validate(m);
  CheckModelAndData(m, config_, *data_);
  SetThreads(config_.threads);
  model_ = std::make_unique<model::Transformer>(m);
  state_.step = 0;
  state_.data_rng = DeriveSeed(config_.seed, kDataStream);
  state_.dropout_rng = DeriveSeed(config_.seed, kDropoutStream);
  InitOptimizer();
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;

void Trainer::InitOptimizer() {
  std::vector<int64_t> sizes;
  for (const model::Parameter& p : model_->parameters())
    sizes.push_back(p.numel());
  optimizer_ = std::make_unique<AdamW>(config_.adamw, std::move(sizes));
}

void Trainer::set_total_steps(int64_t steps) {
  TrainConfig c = config_;
  c.steps = steps;
  c.warmup_steps = std::min(c.warmup_steps, steps);
  Validate(c);
  RELPOS_CHECK_ARG(
      steps >= state_.step,
      "--steps " << steps << " is below the checkpoint's step " << state_.step);
  config_ = c;
}

Trainer Trainer::Resume(const std::string& dir) {
  Checkpoint ck = ReadCheckpoint(dir, /*with_optimizer=*/true);
  Trainer t;
  t.config_ = ck.train_config;
  t.data_ = MakeDataSource(t.config_.data);
  CheckModelAndData(ck.model_config, t.config_, *t.data_);
  SetThreads(t.config_.threads);
  t.model_ = std::make_unique<model::Transformer>(ck.model_config);
  SetParameters(ck.parameters, dir, *t.model_);
  t.InitOptimizer();
  const size_t n = t.model_->parameters().size();
  std::vector<std::vector<float>> m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    m[i] = std::move(ck.optimizer[i].data);
    v[i] = std::move(ck.optimizer[n + i].data);
  }
  t.optimizer_->SetState(ck.state.step, std::move(m), std::move(v));
  t.state_ = ck.state;
  t.last_saved_dir_ = dir;
  t.last_saved_step_ = ck.state.step;
  return t;
}

void Trainer::Save(const std::string& dir) {
  if (dir == last_saved_dir_ && state_.step == last_saved_step_) return;
  Checkpoint ck;
  ck.model_config = model_->config();
  ck.train_config = config_;
  ck.state = state_;
  ck.parameters = GetParameters(*model_);
  const auto& params = model_->parameters();
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < params.size(); ++i) {
      io::NamedTensor t;
      t.name = (pass == 0 ? "exp_avg." : "exp_avg_sq.") + params[i].name;
      t.shape = params[i].shape;
      t.data = pass == 0 ? optimizer_->m(i) : optimizer_->v(i);
      ck.optimizer.push_back(std::move(t));
    }
  }
  WriteCheckpoint(dir, ck);
  last_saved_dir_ = dir;
  last_saved_step_ = state_.step;
}

RunResult Trainer::Run(const RunOptions& options) {
  RunResult result;
  const ScheduleConfig schedule = MakeSchedule(config_);
  const int64_t until = options.stop_at_step >= 0
                            ? std::min(options.stop_at_step, config_.steps)
                            : config_.steps;
  SetThreads(config_.threads);
  // A checkpoint (or a caller) could hand us non-finite parameters: refuse
  // them before spending any compute.
  if (const std::string bad = FirstNonFinite(
          *model_,
          [](const model::Parameter& p) -> const std::vector<float>& {
            return p.value;
          });
      !bad.empty()) {
    RELPOS_THROW(NumericalError, "training stopped at step "
                                     << state_.step << ": parameter '" << bad
                                     << "' holds NaN or Inf before the step");
  }

  std::unique_ptr<Progress> progress;
  if (options.progress_out) {
    progress = std::make_unique<Progress>(*options.progress_out, options.label,
                                          config_.steps, options.progress_mode);
  }
  auto where_saved = [&]() -> std::string {
    if (last_saved_step_ < 0) return "no checkpoint was written";
    return "the last good checkpoint (step " +
           std::to_string(last_saved_step_) + ") is kept in " + last_saved_dir_;
  };

  Rng data_rng(state_.data_rng), dropout_rng(state_.dropout_rng);
  int64_t tokens_total = 0;
  double recent_loss_sum = 0;
  std::deque<float> recent;
  const auto start = std::chrono::steady_clock::now();
  while (state_.step < until) {
    const int64_t step = state_.step;
    const model::Batch batch =
        MakeTrainBatch(*data_, config_.batch_size, config_.train_min_length,
                       config_.train_max_length, data_rng);
    model::Metrics metrics;
    const float loss = model_->ForwardBackward(batch, dropout_rng, &metrics);
    if (!std::isfinite(loss)) {
      if (progress) progress->Finish();
      RELPOS_THROW(NumericalError, "training stopped at step "
                                       << step << ": the loss is " << loss
                                       << "; " << where_saved());
    }
    std::vector<ParamSlot> slots = Slots(*model_);
    const double norm = GradNorm(slots);
    if (!std::isfinite(norm)) {
      if (progress) progress->Finish();
      const std::string bad = FirstNonFinite(
          *model_, [](const model::Parameter& p) -> const std::vector<float>& {
            return p.grad;
          });
      RELPOS_THROW(NumericalError, "training stopped at step "
                                       << step << ": the gradient of '" << bad
                                       << "' holds NaN or Inf; "
                                       << where_saved());
    }
    const double lr = LearningRate(schedule, step);
    optimizer_->Step(slots, lr, ClipScale(norm, config_.clip_norm));
    if (const std::string bad = FirstNonFinite(
            *model_,
            [](const model::Parameter& p) -> const std::vector<float>& {
              return p.value;
            });
        !bad.empty()) {
      if (progress) progress->Finish();
      RELPOS_THROW(NumericalError,
                   "training stopped at step "
                       << step << ": parameter '" << bad
                       << "' became NaN or Inf after the update; "
                       << where_saved());
    }
    state_.step = step + 1;
    state_.data_rng = data_rng.state();
    state_.dropout_rng = dropout_rng.state();

    int64_t batch_tokens = 0;
    for (int64_t n : batch.lengths) batch_tokens += n;
    tokens_total += batch_tokens;
    StepRecord rec{step, loss, norm, lr, batch_tokens};
    result.steps.push_back(rec);
    if (options.on_step) options.on_step(rec);
    // Progress shows the mean loss over the last 100 updates (a single
    // batch's loss is too noisy to read).
    recent.push_back(loss);
    recent_loss_sum += loss;
    if (recent.size() > 100) {
      recent_loss_sum -= recent.front();
      recent.pop_front();
    }
    const double shown = recent_loss_sum / static_cast<double>(recent.size());
    if (progress) progress->Update(state_.step, shown, tokens_total);

    const bool stop = (options.stop_flag && *options.stop_flag != 0) ||
                      state_.step == options.stop_at_step;
    if (!options.checkpoint_dir.empty() &&
        ((config_.checkpoint_every > 0 &&
          state_.step % config_.checkpoint_every == 0) ||
         state_.step == config_.steps || stop)) {
      Save(options.checkpoint_dir);
    }
    if (stop && state_.step < config_.steps) {
      result.interrupted = true;
      break;
    }
  }
  if (progress) progress->Finish();
  result.final_step = state_.step;
  result.completed = state_.step >= config_.steps;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  // Recompute the final loss as a plain mean (the running sum drifts by
  // rounding over long runs).
  double sum = 0;
  for (float x : recent) sum += x;
  result.final_loss =
      recent.empty() ? 0.0 : sum / static_cast<double>(recent.size());
  if (!options.checkpoint_dir.empty() && result.completed)
    Save(options.checkpoint_dir);
  return result;
}

}  // namespace relpos::train
