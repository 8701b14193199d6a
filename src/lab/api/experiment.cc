// relpos::RunExperiment and the runs of `relpos demo` and `relpos sweep`
// (include/relpos/lab/experiment.h); TrainAndEvaluate, the one trained run
// that RunCompare's cells are too (api/experiment_run.h).
#include "relpos/lab/experiment.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "lab/api/experiment_run.h"
#include "lab/api/internal.h"
#include "base/check.h"
#include "base/io/path_text.h"
#include "relpos/lab/inspect.h"
#include "relpos/lab/model.h"
#include "relpos/lab/translation.h"
#include "relpos/schemes.h"
#include "train/lengths.h"
#include "model/memory_plan.h"

namespace relpos {
namespace {

using Json = nlohmann::ordered_json;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       since)
      .count();
}

// A translate run's scores: EvaluateTranslation's buckets at the lengths
// (a bucket's upper end, in source words).
std::vector<LengthMetrics> EvaluateTranslationBuckets(
    Model& model, const std::vector<int64_t>& lengths, int64_t sentences) {
  TranslationEvalOptions options;
  options.max_sentences = sentences;
  options.progress.out = nullptr;
  const TranslationEvalResult r = EvaluateTranslation(model, options);
  std::vector<LengthMetrics> out;
  for (int64_t length : lengths) {
    LengthMetrics m;
    m.length = length;
    m.sequence_length = length;  // the bucket's longest source, in words
    for (const TranslationScores& b : r.scores) {
      if (b.max_words == length && b.label != "all") {
        m.bleu = b.bleu;
        m.chrf = b.chrf;
        m.sequences = b.sentences;
      }
    }
    out.push_back(m);
  }
  return out;
}

// Share of all relative-table rows that training left untrained (Inspect's
// default rule); < 0 when the model has no tables or no signal.
double UntrainedShare(const Model& model) {
  const Inspection in = Inspect(model);
  int64_t rows = 0, untrained = 0;
  for (const TableInspection& t : in.tables) {
    rows += t.rows;
    untrained += t.untrained_rows;
  }
  return rows > 0 && in.has_signal
             ? static_cast<double>(untrained) / static_cast<double>(rows)
             : -1.0;
}

// Mean token and sequence accuracy over the lengths <= hi and > hi.
void FillMeans(int64_t hi, ExperimentRunResult* r) {
  double sums[4] = {0, 0, 0, 0};
  int64_t n_in = 0, n_out = 0;
  for (const LengthMetrics& x : r->by_length) {
    const int side = x.length <= hi ? 0 : 2;
    sums[side] += x.token_accuracy;
    sums[side + 1] += x.sequence_accuracy;
    ++(side == 0 ? n_in : n_out);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto mean = [&](double sum, int64_t n) {
    return n > 0 ? sum / static_cast<double>(n) : nan;
  };
  r->accuracy_train_lengths = mean(sums[0], n_in);
  r->sequence_accuracy_train_lengths = mean(sums[1], n_in);
  r->accuracy_longer_lengths = mean(sums[2], n_out);
  r->sequence_accuracy_longer_lengths = mean(sums[3], n_out);
}

// A name inside the output folder: one path component. `what` names it in
// the error ("run 'k=4': checkpoint").
void CheckFolderName(const std::string& name, const std::string& what) {
  RELPOS_CHECK_ARG(
      !name.empty() && name != "." && name != ".." &&
          name.find('/') == std::string::npos &&
          name.find('\0') == std::string::npos,
      what << " must name one file or folder inside the output folder (got "
           << io::QuotedPath(name) << ")");
}

// The names and folders of the runs: present, unique, within the cap.
void CheckRuns(const ExperimentSpec& spec, const ExperimentOptions& options) {
  RELPOS_CHECK_ARG(!spec.runs.empty(), "an experiment needs at least one run");
  RELPOS_CHECK_ARG(
      static_cast<int64_t>(spec.runs.size()) <= kMaxExperimentRuns,
      "an experiment plans at most " << kMaxExperimentRuns << " runs (got "
                                     << spec.runs.size() << ")");
  std::set<std::string> names, folders;
  for (const ExperimentRun& run : spec.runs) {
    RELPOS_CHECK_ARG(!run.name.empty(), "every run needs a name");
    RELPOS_CHECK_ARG(names.insert(run.name).second,
                     "runs names '" << run.name << "' twice");
    if (run.checkpoint.empty()) continue;
    CheckFolderName(run.checkpoint, "run '" + run.name + "': checkpoint");
    RELPOS_CHECK_ARG(run.checkpoint != options.json_file,
                     "run '" << run.name << "': its checkpoint folder is the "
                             << "result file's name");
    RELPOS_CHECK_ARG(folders.insert(run.checkpoint).second,
                     "runs name the checkpoint folder "
                         << io::QuotedPath(run.checkpoint) << " twice");
  }
  RELPOS_CHECK_ARG(folders.empty() || !options.out_dir.empty(),
                   "runs with a checkpoint folder need an output folder");
  if (!options.json_file.empty()) {
    CheckFolderName(options.json_file, "the result file");
  }
  RELPOS_CHECK_ARG(!spec.lengths.empty(),
                   "an experiment needs at least one evaluation length");
  RELPOS_CHECK_ARG(spec.sequences_per_length >= 1 &&
                       spec.eval_batch_size >= 1,
                   "sequences per length and batch size must be >= 1 (got "
                       << spec.sequences_per_length << ", "
                       << spec.eval_batch_size << ")");
}

Json Number(double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); }

Json Section(const ExperimentConfig& c, const char* section) {
  return Json::parse(c.ToJson())[section];
}

Json RunJson(const ExperimentRunResult& r) {
  Json settings = Json::object();
  for (const SettingValue& s : r.settings) settings[s.key] = s.value;
  Json acc = Json::object(), seq = Json::object(), loss = Json::object();
  for (const LengthMetrics& x : r.by_length) {
    const std::string n = std::to_string(x.length);
    acc[n] = x.token_accuracy;
    seq[n] = x.sequence_accuracy;
    loss[n] = x.loss;
  }
  return {
      {"name", r.name},
      {"settings", settings},
      {"position", r.config.Get("model", "position")},
      {"max_distance", std::stoll(r.config.Get("model", "max_distance"))},
      {"checkpoint", r.checkpoint.empty() ? Json(nullptr) : Json(r.checkpoint)},
      {"parameters", r.parameters},
      {"final_train_loss", r.train.final_loss},
      {"train_seconds", r.train.seconds},
      {"eval_seconds", r.eval_seconds},
      {"accuracy_train_lengths", Number(r.accuracy_train_lengths)},
      {"accuracy_longer_lengths", Number(r.accuracy_longer_lengths)},
      {"sequence_accuracy_train_lengths",
       Number(r.sequence_accuracy_train_lengths)},
      {"sequence_accuracy_longer_lengths",
       Number(r.sequence_accuracy_longer_lengths)},
      {"untrained_row_share", r.untrained_row_share >= 0
                                  ? Json(r.untrained_row_share)
                                  : Json(nullptr)},
      {"accuracy_by_length", acc},
      {"sequence_accuracy_by_length", seq},
      {"loss_by_length", loss},
      {"model_config", Section(r.config, "model")},
  };
}

}  // namespace

void CheckRunFits(const ExperimentConfig& c, int64_t longest,
                  int64_t sequences, const std::string& what) {
  const model::ModelConfig& m = Internals(c).model;
  const train::TrainConfig& t = Internals(c).train;
  try {
    model::CheckMemory(model::PlanTraining(
        m, t.batch_size, SequenceLength(c, t.train_max_length), t.threads));
    model::CheckMemory(model::PlanInference(
        m, std::min<int64_t>(64, sequences), SequenceLength(c, longest),
        t.threads));
  } catch (const ResourceError& e) {
    RELPOS_THROW(ResourceError, what << ": " << MessageBody(e));
  }
}

bool TrainAndEvaluate(const ExperimentConfig& config, const TrainOptions& train,
                      const RunEvaluation& eval, ExperimentRunResult* out) {
  Training training(config);
  const TrainSummary summary = training.Run(train);
  // Stopped mid-training (an early stop by patience is a finished run).
  if (!summary.completed && !summary.stopped_early) return false;
  const auto eval_start = std::chrono::steady_clock::now();
  out->by_length =
      IsTranslateTask(config.Get("train", "task"))
          ? EvaluateTranslationBuckets(training.model(), eval.lengths,
                                       eval.sequences_per_length)
          : Evaluate(training.model(),
                     {.lengths = eval.lengths,
                      .sequences_per_length = eval.sequences_per_length,
                      .batch_size = eval.batch_size,
                      .threads = eval.threads,
                      .progress = eval.progress});
  out->eval_seconds = Seconds(eval_start);
  out->config = training.config();
  out->parameters = training.model().NumParameters();
  out->train = summary;
  FillMeans(std::stoll(out->config.Get("train", "train_max_length")), out);
  if (eval.inspect) out->untrained_row_share = UntrainedShare(training.model());
  return true;
}

OutFolder::OutFolder(const std::string& dir,
                     const std::function<bool(const std::string&)>& owned)
    : dir_(dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    created_ = std::filesystem::create_directories(dir, ec);
    if (ec) {
      RELPOS_THROW(IoError, "cannot create the folder " << io::QuotedPath(dir)
                                                        << ": "
                                                        << ec.message());
    }
  } else if (!std::filesystem::is_directory(dir, ec)) {
    RELPOS_THROW(IoError, io::QuotedPath(dir) << " is not a folder");
  }
  lock_ = io::FolderLock(dir);
  io::RemoveTemporaryFiles(dir, owned);
}

OutFolder::~OutFolder() {
  std::error_code ec;
  if (created_ && !kept_) std::filesystem::remove(dir_, ec);  // if empty
}

ExperimentConfig ExperimentRunConfig(const ExperimentSpec& spec,
                                     const ExperimentRun& run) {
  ExperimentConfig c = spec.base;
  for (const SettingValue& s : run.settings) {
    c.Set(s.section, s.key, s.value);
  }
  c.Resolve();
  return c;
}

namespace {

// Every run's resolved configuration, each checked (CheckRuns, its lengths,
// its memory) before anything is trained.
std::vector<ExperimentConfig> PlanRuns(const ExperimentSpec& spec,
                                       const ExperimentOptions& options) {
  CheckRuns(spec, options);
  std::vector<ExperimentConfig> configs;
  int64_t longest = 0;
  for (int64_t n : spec.lengths) longest = std::max(longest, n);
  for (const ExperimentRun& run : spec.runs) {
    ExperimentConfig c = ExperimentRunConfig(spec, run);
    const bool translate = IsTranslateTask(c.Get("train", "task"));
    if (!translate) CheckEvalLengths(c, spec.lengths);
    CheckRunFits(c,
                 translate ? std::stoll(c.Get("train", "train_max_length"))
                           : longest,
                 spec.sequences_per_length, "the run '" + run.name + "'");
    configs.push_back(std::move(c));
  }
  return configs;
}

}  // namespace

void CheckExperiment(const ExperimentSpec& spec,
                     const ExperimentOptions& options) {
  PlanRuns(spec, options);
}

ExperimentResult RunExperiment(const ExperimentSpec& spec,
                               const ExperimentOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ExperimentConfig> configs = PlanRuns(spec, options);
  ExperimentResult result;
  const ExperimentConfig& first = configs.front();
  result.task = first.Get("train", "task");
  result.metric = DescribeData(first).metric;
  result.train_min_length = std::stoll(first.Get("train", "train_min_length"));
  result.train_max_length = std::stoll(first.Get("train", "train_max_length"));
  result.lengths = spec.lengths;
  result.sequences_per_length = spec.sequences_per_length;
  result.base = spec.base;

  std::optional<OutFolder> folder;
  if (!options.out_dir.empty()) {
    folder.emplace(options.out_dir, [&](const std::string& target) {
      return !options.json_file.empty() && target == options.json_file;
    });
  }
  const auto total = static_cast<int64_t>(spec.runs.size());
  for (int64_t i = 0; i < total; ++i) {
    if (options.stop_flag != nullptr && *options.stop_flag != 0) {
      result.interrupted = true;
      break;
    }
    const ExperimentRun& run = spec.runs[static_cast<size_t>(i)];
    std::ostringstream label_text;
    label_text << "[" << i + 1 << "/" << total << "] " << run.name;
    const std::string label = label_text.str();
    TrainOptions train;
    if (!run.checkpoint.empty()) {
      train.checkpoint_dir =
          (std::filesystem::path(options.out_dir) / run.checkpoint).string();
      folder->Keep();  // the checkpoint is written even if stopped
    }
    train.progress = options.progress;
    train.progress.label = label + " train";
    train.stop_flag = options.stop_flag;
    RunEvaluation eval{.lengths = spec.lengths,
                       .sequences_per_length = spec.sequences_per_length,
                       .batch_size = spec.eval_batch_size,
                       .threads = spec.eval_threads,
                       .progress = options.progress,
                       .inspect = true};
    eval.progress.label = label + " eval";
    ExperimentRunResult r{
        .name = run.name, .checkpoint = run.checkpoint, .settings = run.settings};
    if (!TrainAndEvaluate(configs[static_cast<size_t>(i)], train, eval, &r)) {
      result.interrupted = true;
      break;
    }
    result.runs.push_back(std::move(r));
    result.seconds = Seconds(start);
    if (folder && !options.json_file.empty()) {
      io::AtomicWriteFile(
          (std::filesystem::path(options.out_dir) / options.json_file)
              .string(),
          result.ToJson());
      folder->Keep();
    }
    if (options.on_run) options.on_run(result.runs.back(), i + 1, total);
  }
  result.seconds = Seconds(start);
  return result;
}

std::string ExperimentResult::ToJson() const {
  Json runs_json = Json::array();
  for (const ExperimentRunResult& r : runs) runs_json.push_back(RunJson(r));
  const Json config = Json::parse(base.ToJson());
  const Json j = {{"task", task},
                  {"metric", metric},
                  {"train_lengths", {train_min_length, train_max_length}},
                  {"eval_lengths", lengths},
                  {"sequences_per_length", sequences_per_length},
                  {"train_config", config["train"]},
                  {"model_config", config["model"]},
                  {"runs", runs_json},
                  {"interrupted", interrupted},
                  {"wall_seconds", seconds}};
  return j.dump(2) + "\n";
}

ExperimentConfig SweepDefaults() {
  ExperimentConfig defaults;
  defaults.SetDefault("train", "steps", "400");
  defaults.SetDefault("train", "warmup_steps", "40");
  defaults.SetDefault("train", "lr", "2e-3");
  defaults.SetDefault("model", "position", "relative");
  return defaults;
}

ExperimentSpec SweepExperiment(const ExperimentConfig& base,
                               const SweepAxes& axes) {
  ExperimentSpec spec;
  spec.base = base;
  auto add = [&](int64_t k, const std::string& terms) {
    for (const ExperimentRun& r : spec.runs) {
      if (r.settings[0].value == std::to_string(k) &&
          r.settings[1].value == terms) {
        return;
      }
    }
    spec.runs.push_back(
        {.name = "k=" + std::to_string(k) + " " + terms,
         .settings = {{"model", "max_distance", std::to_string(k)},
                      {"model", "--terms", terms}}});
  };
  RELPOS_CHECK_ARG(!axes.ks.empty(), "ks must name at least one k");
  for (int64_t k : axes.ks) add(k, "both");
  for (const std::string& t : axes.terms) add(axes.terms_k, t);
  // A few lengths over the training range and the longer ones.
  ExperimentConfig resolved = base;
  resolved.Resolve();
  const int64_t lo = std::stoll(resolved.Get("train", "train_min_length")),
                hi = std::stoll(resolved.Get("train", "train_max_length"));
  spec.lengths = train::ParseLengths(
      train::FormatLengthRange(lo, hi) + ":" +
          std::to_string(std::max<int64_t>(1, (hi - lo) / 3)),
      "train lengths");
  const std::vector<int64_t> longer =
      !axes.longer_lengths.empty()
          ? axes.longer_lengths
          : train::ParseLengths(
                std::to_string(hi + 1) + "-" + std::to_string(3 * hi) + ":" +
                    std::to_string(std::max<int64_t>(1, hi / 2)),
                "longer lengths");
  spec.lengths.insert(spec.lengths.end(), longer.begin(), longer.end());
  std::sort(spec.lengths.begin(), spec.lengths.end());
  spec.lengths.erase(std::unique(spec.lengths.begin(), spec.lengths.end()),
                     spec.lengths.end());
  return spec;
}

std::string DemoRunName(const std::string& position) {
  const Scheme& scheme = FindScheme(position);
  if (scheme.sides.empty()) return "no positions";
  // Shaw's scheme as the demo's model has it (k = 16).
  if (scheme.id == SchemeId::kShaw) return "relative (k=16)";
  if (scheme.ActsOn(SchemeSide::kInput)) return "absolute (" + position + ")";
  return "relative (" + position + ")";
}

ExperimentSpec DemoExperiment(const DemoSettings& s) {
  // The demo's experiment, chosen by trying the candidates
  // (docs/training.md): local_difference's answers depend only on the tokens
  // 1 and 3 positions back, so a model that knows relative offsets can solve
  // it at any length, while one that learned what "position 17" means has
  // nothing to go on past the positions it saw. The model is the default one
  // (d_model 64, 4 heads, 2 layers, d_ff 256, k = 16) with a 256-row learned
  // table.
  ExperimentSpec spec;
  ExperimentConfig& c = spec.base;
  c.Set("train", "task", "local_difference");
  c.Set("train", "--train-lengths", "8-16");
  c.Set("train", "steps", std::to_string(s.steps));
  c.Set("train", "batch_size", "32");
  c.Set("train", "lr", "2e-3");
  c.Set("train", "warmup_steps",
        std::to_string(std::min<int64_t>(80, s.steps / 10)));
  c.Set("train", "seed", std::to_string(s.seed));
  c.Set("train", "threads", std::to_string(s.threads));
  c.Set("train", "checkpoint_every", "0");
  c.Set("model", "max_len", "256");
  c.Set("model", "arch", "encoder");
  for (const std::string& position : s.positions) {
    spec.runs.push_back({.name = DemoRunName(position),
                         .settings = {{"model", "position", position}},
                         .checkpoint = position});
  }
  spec.lengths = train::ParseLengths("4-64:4", "demo lengths");
  spec.sequences_per_length = s.sequences;
  spec.eval_threads = s.threads;
  return spec;
}

}  // namespace relpos
