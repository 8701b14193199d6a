// relpos::RunCompare: the grid of tasks x schemes x seeds behind
// `relpos compare` (include/relpos/lab/compare.h).
#include "relpos/lab/compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "lab/api/compare_file.h"
#include "lab/api/experiment_run.h"
#include "base/check.h"
#include "base/io/file_io.h"
#include "base/io/path_text.h"
#include "lab/api/internal.h"
#include "model/transformer.h"
#include "relpos/lab/model.h"
#include "relpos/lab/translation.h"
#include "model/memory_plan.h"

namespace relpos {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kFileName = "compare.json";

bool IsLm(const std::string& task) { return task == "lm"; }

// The score of one length: bits per byte for lm, BLEU for translate, else
// accuracy.
double Score(const std::string& task, const LengthMetrics& m) {
  if (IsLm(task)) return m.bits_per_token;
  return IsTranslateTask(task) ? m.bleu : m.token_accuracy;
}

// translate's lengths: the upper ends of EvaluateTranslation's buckets
// inside the training lengths, at 2x and at 4x.
std::vector<int64_t> TranslateLengths(int64_t train_max) {
  return {train_max, 2 * train_max, 4 * train_max};
}

SeedStats Stats(const std::vector<double>& xs) {
  SeedStats s;
  if (xs.empty()) {
    s.mean = s.min = s.max = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  s.n = static_cast<int64_t>(xs.size());
  s.min = *std::min_element(xs.begin(), xs.end());
  s.max = *std::max_element(xs.begin(), xs.end());
  double sum = 0;
  for (double x : xs) sum += x;
  s.mean = sum / static_cast<double>(xs.size());
  return s;
}

// NaN (no seed finished) is written as null.
Json Number(double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); }

Json StatsJson(const SeedStats& s) {
  return {{"mean", Number(s.mean)},
          {"min", Number(s.min)},
          {"max", Number(s.max)},
          {"seeds", s.n}};
}

// What makes a finished cell reusable: its resolved configuration, the
// lengths and the number of evaluation sequences.
struct CellKey {
  Json config;
  std::vector<int64_t> lengths;
  int64_t sequences = 0;
  bool operator==(const CellKey& o) const {
    return config == o.config && lengths == o.lengths &&
           sequences == o.sequences;
  }
};

CellKey KeyOf(const CompareCell& c) {
  CellKey k;
  k.config = c.config_json.empty() ? Json() : Json::parse(c.config_json);
  for (const LengthMetrics& m : c.by_length) k.lengths.push_back(m.length);
  k.sequences = c.sequences_per_length;
  return k;
}

// The cells of a previous compare.json in `dir` that pass the checks of
// ParseCompareCells (the others are trained again); a missing file, or one
// that is not a compare.json of this version, means nothing to reuse and is
// said in *note. A compare.json that is not a regular file (a FIFO, a
// device, a link) is an error: it would never be replaced.
std::vector<CompareCell> ReadPrevious(const std::string& dir,
                                      std::string* note) {
  if (dir.empty()) return {};
  const std::string path = (std::filesystem::path(dir) / kFileName).string();
  io::CheckReplaceable(path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  try {
    int64_t rejected = 0;
    std::string problem;
    std::vector<CompareCell> cells = ParseCompareCells(
        io::ReadFileBounded(path, kMaxCompareJsonBytes), path, &rejected,
        &problem);
    if (rejected > 0) {
      *note = std::to_string(rejected) + " cell(s) of " + io::PathText(path) +
              " failed validation and are trained again (first: " + problem +
              ")";
    }
    return cells;
  } catch (const Error& e) {
    *note = io::PathText(path) + " is not reused: " + MessageBody(e);
    return {};
  }
}

template <typename T>
void CheckList(const std::vector<T>& list, const char* name) {
  RELPOS_CHECK_ARG(!list.empty(), name << " must name at least one value");
  std::set<T> seen;
  for (const T& x : list) {
    RELPOS_CHECK_ARG(seen.insert(x).second,
                     name << " names " << x << " twice");
  }
}

// One planned cell.
struct Planned {
  size_t task;  // index into CompareResult::tasks
  std::string position;
  uint64_t seed;
  ExperimentConfig config;
  CellKey key;
};

struct Grid {
  std::vector<CompareTask> tasks;
  std::vector<Planned> cells;
};

// The grid's size, checked before anything of it is built: the caps of
// compare.h.
void CheckGridSize(const CompareSpec& spec) {
  RELPOS_CHECK_ARG(static_cast<int64_t>(spec.seeds.size()) <= kMaxCompareSeeds,
                   "seeds must name at most " << kMaxCompareSeeds
                                              << " seeds (got "
                                              << spec.seeds.size() << ")");
  const double cells = static_cast<double>(spec.tasks.size()) *
                       static_cast<double>(spec.positions.size()) *
                       static_cast<double>(spec.seeds.size());
  RELPOS_CHECK_ARG(cells <= static_cast<double>(kMaxCompareCells),
                   "the grid of " << spec.tasks.size() << " tasks x "
                                  << spec.positions.size() << " schemes x "
                                  << spec.seeds.size() << " seeds = "
                                  << static_cast<int64_t>(cells)
                                  << " cells exceeds the " << kMaxCompareCells
                                  << " a compare may plan");
}

// Plans every cell (nothing is trained before the whole grid is valid),
// checking that each fits in memory. Returns false if the stop flag was
// raised meanwhile (planning a large grid takes a while).
bool PlanGrid(const CompareSpec& spec, const CompareOptions& options,
              Grid* g) {
  CheckGridSize(spec);
  CheckList(spec.tasks, "tasks");
  CheckList(spec.positions, "positions");
  CheckList(spec.seeds, "seeds");
  // An alias is the scheme it names ("relative" is "shaw"): listed with it,
  // it would train the same cells twice.
  std::set<std::string> canonical;
  for (const std::string& position : spec.positions) {
    ExperimentConfig probe;
    probe.Set("model", "position", position, "positions");
    const std::string name = probe.Get("model", "position");
    RELPOS_CHECK_ARG(canonical.insert(name).second,
                     "positions names " << name << " twice ('" << position
                                        << "' is '" << name << "')");
  }
  RELPOS_CHECK_ARG(spec.sequences_per_length >= 1,
                   "sequences per length must be >= 1 (got "
                       << spec.sequences_per_length << ")");
  auto stopped = [&] {
    return options.stop_flag != nullptr && *options.stop_flag != 0;
  };
  for (const std::string& task : spec.tasks) {
    // The task's lengths come from its first cell's resolved config.
    const ExperimentConfig first =
        CompareCellConfig(spec, task, spec.positions.front(),
                          spec.seeds.front());
    CompareTask t;
    t.task = task;
    t.lower_is_better = IsLm(task);
    t.metric = IsLm(task) ? "bits per byte (held-out)"
               : IsTranslateTask(task)
                   ? "BLEU of beam-4 translations of held-out pairs, by "
                     "source words"
                   : "per-token accuracy on the output positions";
    t.data = DescribeData(first).source;
    t.train_min_length = std::stoll(first.Get("train", "train_min_length"));
    t.train_max_length = std::stoll(first.Get("train", "train_max_length"));
    t.lengths = IsTranslateTask(task)
                    ? TranslateLengths(t.train_max_length)
                    : CompareLengths(t.train_min_length, t.train_max_length,
                                     spec.extra_lengths);
    g->tasks.push_back(t);
    for (const std::string& position : spec.positions) {
      for (uint64_t seed : spec.seeds) {
        if (stopped()) return false;
        Planned p{.task = g->tasks.size() - 1,
                  .position = position,
                  .seed = seed,
                  .config = CompareCellConfig(spec, task, position, seed),
                  .key = {}};
        // translate's buckets take whatever sources the split has; its
        // search checks its own memory (Model::Translate).
        if (!IsTranslateTask(task)) CheckEvalLengths(p.config, t.lengths);
        CheckRunFits(p.config,
                     IsTranslateTask(task) ? t.train_max_length : t.lengths.back(),
                     spec.sequences_per_length,
                     "the cell " + task + " " +
                         p.config.Get("model", "position"));
        p.key.config = Json::parse(p.config.ToJson());
        p.key.lengths = t.lengths;
        p.key.sequences = spec.sequences_per_length;
        g->cells.push_back(std::move(p));
      }
    }
  }
  return true;
}

// A previous cell is reused for a planned one only if it is that cell: the
// same key (configuration, lengths, sequence count), and the labels,
// parameter count and sequence lengths the planned configuration gives.
bool Reusable(const CompareCell& c, const Planned& p) {
  if (!(KeyOf(c) == p.key) || c.seed != p.seed ||
      c.task != p.config.Get("train", "task") ||
      c.position != p.config.Get("model", "position") ||
      c.by_length.size() != p.key.lengths.size()) {
    return false;
  }
  int64_t parameters = 0;
  for (const model::ParameterShape& s :
       model::ParameterShapes(Internals(p.config).model)) {
    parameters += s.numel();
  }
  if (c.parameters != parameters) return false;
  for (const LengthMetrics& m : c.by_length) {
    const int64_t want = c.task == "translate"
                             ? m.length
                             : SequenceLength(p.config, m.length);
    if (m.sequence_length != want) return false;
  }
  return true;
}

}  // namespace

std::vector<int64_t> CompareLengths(int64_t train_min, int64_t train_max,
                                    const std::vector<int64_t>& extra) {
  RELPOS_CHECK_ARG(train_min >= 1 && train_min <= train_max,
                   "train lengths " << train_min << "-" << train_max
                                    << " must satisfy 1 <= min <= max");
  std::vector<int64_t> lengths = {train_min, train_max,
                                  train_min + (train_max - train_min) / 2,
                                  2 * train_max, 4 * train_max};
  lengths.insert(lengths.end(), extra.begin(), extra.end());
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  return lengths;
}

ExperimentConfig CompareCellConfig(const CompareSpec& spec,
                                   const std::string& task,
                                   const std::string& position,
                                   uint64_t seed) {
  ExperimentConfig c = spec.base;
  c.Set("train", "task", task, "tasks");
  c.Set("model", "position", position, "positions");
  c.Set("train", "seed", std::to_string(seed), "seeds");
  // The corpus belongs to lm and translate; the other tasks refuse one.
  if (!IsLm(task) && !IsTranslateTask(task)) c.Set("train", "corpus_path", "");
  c.Resolve();
  // A learned table long enough for the longest evaluation (its rows past
  // the training lengths stay untrained: that is what is measured).
  if (!c.Given("model", "max_len")) {
    const std::vector<int64_t> lengths = CompareLengths(
        std::stoll(c.Get("train", "train_min_length")),
        std::stoll(c.Get("train", "train_max_length")), spec.extra_lengths);
    const int64_t longest = SequenceLength(c, lengths.back());
    if (longest > std::stoll(c.Get("model", "max_len"))) {
      c.SetDefault("model", "max_len", std::to_string(longest));
      c.Resolve();
    }
  }
  return c;
}

std::vector<CompareRow> AggregateCells(const std::vector<CompareTask>& tasks,
                                       const std::vector<CompareCell>& cells) {
  std::vector<CompareRow> rows;
  for (const CompareTask& t : tasks) {
    // Schemes in the order their first cell appears.
    std::vector<std::string> positions;
    for (const CompareCell& c : cells) {
      if (c.task == t.task &&
          std::find(positions.begin(), positions.end(), c.position) ==
              positions.end()) {
        positions.push_back(c.position);
      }
    }
    for (const std::string& position : positions) {
      CompareRow row;
      row.task = t.task;
      row.position = position;
      row.lengths = t.lengths;
      std::vector<double> inside, at_2x, at_4x, seconds;
      std::vector<std::vector<double>> per_length(t.lengths.size());
      for (const CompareCell& c : cells) {
        if (c.task != t.task || c.position != position) continue;
        row.parameters = c.parameters;
        seconds.push_back(c.train_seconds);
        double in_sum = 0;
        int in_n = 0;
        for (const LengthMetrics& m : c.by_length) {
          if (IsTranslateTask(t.task) && m.sequences == 0) continue;  // no pair
          const double s = Score(t.task, m);
          if (m.length >= t.train_min_length && m.length <= t.train_max_length) {
            in_sum += s;
            ++in_n;
          }
          if (m.length == 2 * t.train_max_length) at_2x.push_back(s);
          if (m.length == 4 * t.train_max_length) at_4x.push_back(s);
          const auto at =
              std::find(t.lengths.begin(), t.lengths.end(), m.length);
          if (at != t.lengths.end()) {
            per_length[static_cast<size_t>(at - t.lengths.begin())].push_back(
                s);
          }
        }
        if (in_n > 0) inside.push_back(in_sum / in_n);
      }
      row.inside = Stats(inside);
      row.at_2x = Stats(at_2x);
      row.at_4x = Stats(at_4x);
      row.train_seconds = Stats(seconds).mean;
      for (const auto& xs : per_length) row.by_length.push_back(Stats(xs));
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::string CompareResult::ToJson() const {
  Json j;
  j["format_version"] = kCompareFormatVersion;
  j["spread"] = "min and max over seeds";
  j["cells_planned"] = cells_planned;
  j["cells_finished"] = static_cast<int64_t>(cells.size());
  j["interrupted"] = interrupted;
  j["seconds"] = seconds;
  Json ts = Json::array();
  for (const CompareTask& t : tasks) {
    ts.push_back({{"task", t.task},
                  {"metric", t.metric},
                  {"lower_is_better", t.lower_is_better},
                  {"data", t.data},
                  {"train_lengths", {t.train_min_length, t.train_max_length}},
                  {"eval_lengths", t.lengths}});
  }
  j["tasks"] = ts;
  Json rs = Json::array();
  for (const CompareRow& r : rows) {
    Json by_length = Json::object();
    for (size_t i = 0; i < r.lengths.size(); ++i) {
      by_length[std::to_string(r.lengths[i])] = StatsJson(r.by_length[i]);
    }
    rs.push_back({{"task", r.task},
                  {"position", r.position},
                  {"parameters", r.parameters},
                  {"train_seconds_mean", r.train_seconds},
                  {"inside", StatsJson(r.inside)},
                  {"at_2x", StatsJson(r.at_2x)},
                  {"at_4x", StatsJson(r.at_4x)},
                  {"by_length", by_length}});
  }
  j["rows"] = rs;
  // Cells carry their configuration (what a rerun compares to reuse them).
  Json cs = Json::array();
  for (const CompareCell& c : cells) cs.push_back(CellJson(c));
  j["cells"] = cs;
  return j.dump(2) + "\n";
}

CompareTimeEstimate::CompareTimeEstimate(const CompareSpec& spec)
    : tasks_(spec.tasks.size()),
      positions_(spec.positions.size()),
      seeds_(spec.seeds.size()) {}

void CompareTimeEstimate::Add(int64_t index, double seconds) {
  const size_t i = static_cast<size_t>(index);
  RELPOS_CHECK_ARG(index >= 0 && i < tasks_ * positions_ * seeds_,
                   "grid index " << index << " is outside the grid");
  seen_.push_back({.task = i / (positions_ * seeds_),
                   .position = i / seeds_ % positions_,
                   .seconds = seconds});
}

double CompareTimeEstimate::SecondsLeft(int64_t next) const {
  if (seen_.empty()) return std::numeric_limits<double>::quiet_NaN();
  // Alternating least-squares-like fit of cost = T[task] * P[position]:
  // each factor the mean of its cells' seconds over the other factor. Exact
  // data (every cell its T * P) is fitted exactly after a few rounds.
  std::vector<double> t(tasks_, 1.0), p(positions_, 1.0);
  std::vector<bool> t_seen(tasks_, false), p_seen(positions_, false);
  for (const Observation& o : seen_) t_seen[o.task] = p_seen[o.position] = true;
  auto refit = [&](std::vector<double>& factor, const std::vector<double>& other,
                   bool by_task) {
    std::vector<double> sum(factor.size(), 0.0), count(factor.size(), 0.0);
    for (const Observation& o : seen_) {
      const size_t mine = by_task ? o.task : o.position;
      sum[mine] += o.seconds / other[by_task ? o.position : o.task];
      count[mine] += 1;
    }
    for (size_t k = 0; k < factor.size(); ++k) {
      if (count[k] > 0) factor[k] = sum[k] / count[k];
    }
  };
  for (int round = 0; round < 20; ++round) {
    refit(t, p, /*by_task=*/true);
    refit(p, t, /*by_task=*/false);
  }
  auto fill_unseen = [](std::vector<double>& factor,
                        const std::vector<bool>& seen) {
    double sum = 0, n = 0;
    for (size_t k = 0; k < factor.size(); ++k) {
      if (seen[k]) sum += factor[k], n += 1;
    }
    for (size_t k = 0; k < factor.size(); ++k) {
      if (!seen[k]) factor[k] = sum / n;
    }
  };
  fill_unseen(t, t_seen);
  fill_unseen(p, p_seen);
  double left = 0;
  const size_t total = tasks_ * positions_ * seeds_;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(next, 0)); i < total;
       ++i) {
    left += t[i / (positions_ * seeds_)] * p[i / seeds_ % positions_];
  }
  return left;
}

CompareResult RunCompare(const CompareSpec& spec,
                         const CompareOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  CompareResult result;
  Grid grid;
  if (!PlanGrid(spec, options, &grid)) {  // stopped while planning
    result.interrupted = true;
    return result;
  }
  result.tasks = grid.tasks;
  result.cells_planned = static_cast<int64_t>(grid.cells.size());
  // Only a valid grid touches the output folder.
  std::optional<OutFolder> folder;
  if (!options.out_dir.empty()) {
    folder.emplace(options.out_dir, [](const std::string& target) {
      return target == kFileName || target == "compare.svg";
    });
  }
  const std::vector<CompareCell> previous =
      ReadPrevious(options.out_dir, &result.previous_note);
  if (options.on_start) options.on_start(result);
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  // compare.json is rewritten after every finished cell (a run stopped
  // before its first leaves an existing one as it was).
  auto save = [&] {
    result.rows = AggregateCells(result.tasks, result.cells);
    result.seconds = elapsed();
    if (options.out_dir.empty() || result.cells.empty()) return;
    io::AtomicWriteFile(
        (std::filesystem::path(options.out_dir) / kFileName).string(),
        result.ToJson());
    folder->Keep();
  };
  auto stopped = [&] {
    return options.stop_flag != nullptr && *options.stop_flag != 0;
  };

  const int64_t total = result.cells_planned;
  for (size_t i = 0; i < grid.cells.size(); ++i) {
    if (stopped()) {
      result.interrupted = true;
      break;
    }
    const Planned& p = grid.cells[i];
    const CompareTask& t = result.tasks[p.task];
    CompareCell cell;
    bool reused = false;
    for (const CompareCell& s : previous) {
      if (Reusable(s, p)) {
        cell = s;
        reused = true;
        break;
      }
    }
    if (!reused) {
      TrainOptions to;
      to.progress = options.progress;
      to.progress.label = "[" + std::to_string(i + 1) + "/" +
                          std::to_string(total) + "] " + t.task + " " +
                          p.position + " seed " + std::to_string(p.seed);
      to.stop_flag = options.stop_flag;
      ExperimentRunResult run;
      if (!TrainAndEvaluate(
              p.config, to,
              {.lengths = t.lengths,
               .sequences_per_length = spec.sequences_per_length},
              &run)) {  // stopped mid-training: drop the cell
        result.interrupted = true;
        break;
      }
      cell.by_length = std::move(run.by_length);
      cell.eval_seconds = run.eval_seconds;
      cell.task = t.task;
      cell.position = p.config.Get("model", "position");
      cell.seed = p.seed;
      cell.parameters = run.parameters;
      cell.train_seconds = run.train.seconds;
      cell.final_loss = run.train.final_loss;
      cell.config_json = p.key.config.dump();
      cell.sequences_per_length = spec.sequences_per_length;
    }
    result.cells.push_back(std::move(cell));
    save();
    if (options.on_cell) {
      options.on_cell(result.cells.back(), static_cast<int64_t>(i + 1), total);
    }
  }
  save();
  return result;
}

}  // namespace relpos
