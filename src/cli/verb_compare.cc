// `relpos compare`: a grid of tasks x position schemes x seeds on equal
// terms (relpos/lab/compare.h does the work). Prints a table of the score inside
// the training lengths, at 2x and at 4x the longest one (mean and min..max
// over seeds), the parameter count and the training time; writes
// compare.json and compare.svg (one panel per task) into --out
// (docs/results.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "cli/signals.h"
#include "cli/svg_plot.h"
#include "relpos/lab/compare.h"
#include "relpos/lab/config.h"
#include "relpos/error.h"
#include "relpos/lab/files.h"
#include "relpos/lab/training.h"
#include "relpos/schemes.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

// The default grid (docs/results.md has its timing): sized so that it ends
// within 15 minutes on 2 cores with every scheme; --quick within 3.
constexpr const char* kDefaultTasks = "local_difference,bucket_sort";
constexpr const char* kDefaultSteps = "1000";
constexpr const char* kDefaultSeeds = "3";
constexpr const char* kQuickTasks = "local_difference";
constexpr const char* kQuickSteps = "300";
constexpr const char* kQuickSeeds = "2";

struct CompareFlags {
  ExperimentFlags exp;
  std::string tasks, positions, seeds;
  std::string eval_lengths;
  int64_t sequences = 128;
  std::string out = "relpos-compare";
  bool quick = false;
  bool json = false;
};

// "3" -> 0, 1, 2; "4-6" -> 4, 5, 6; "0,7,9" -> those. Each number is read
// by ParseSeed (the rule of every --seed), and the list is capped at
// kMaxCompareSeeds while it is read: "0-999,1000-1999,..." is refused
// before it is built.
std::vector<uint64_t> ParseSeeds(const std::string& spec) {
  auto number = [&](const std::string& text) -> uint64_t {
    try {
      return ParseSeed(text, "--seeds");
    } catch (const InvalidArgument&) {
      throw InvalidArgument("--seeds must be N (seeds 0..N-1), A-B or a comma "
                            "list of seeds in [0, 2^64 - 1] (got " +
                            Quoted(spec) + ")");
    }
  };
  const uint64_t cap = static_cast<uint64_t>(kMaxCompareSeeds);
  const std::vector<std::string> items = SplitList(spec);
  std::vector<uint64_t> seeds;
  if (items.size() == 1 && items[0].find('-') == std::string::npos) {
    const uint64_t n = number(items[0]);
    RELPOS_CLI_CHECK(n >= 1 && n <= cap, "--seeds N must be in [1, "
                                             << cap << "] (got " << n << ")");
    for (uint64_t s = 0; s < n; ++s) seeds.push_back(s);
    return seeds;
  }
  for (const std::string& item : items) {
    const size_t dash = item.find('-');
    const uint64_t lo = number(item.substr(0, dash));
    const uint64_t hi = dash == std::string::npos
                            ? lo
                            : number(item.substr(dash + 1));
    RELPOS_CLI_CHECK(lo <= hi, "--seeds range " << Quoted(item)
                                                << " must be A-B with A <= B");
    RELPOS_CLI_CHECK(hi - lo < cap - seeds.size(),
                     "--seeds names more than " << cap
                                                << " seeds (the most a compare "
                                                   "takes)");
    // Counted, so that hi = 2^64 - 1 cannot wrap the loop.
    for (uint64_t k = 0; k <= hi - lo; ++k) seeds.push_back(lo + k);
  }
  return seeds;
}

std::string Fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "0.912 [0.90,0.93]": the mean and the min..max over seeds.
std::string Spread(const SeedStats& s) {
  if (s.n == 0) return "-";
  if (s.n == 1) return Fixed(s.mean, 3);
  return Fixed(s.mean, 3) + " [" + Fixed(s.min, 3) + "," + Fixed(s.max, 3) +
         "]";
}

std::string Pad(const std::string& s, size_t width, bool left = false) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return left ? s + fill : fill + s;
}

void PrintTable(const CompareResult& r, std::ostream& out) {
  for (const CompareTask& t : r.tasks) {
    out << "\ntask " << t.task << " (" << t.metric
        << (t.lower_is_better ? ", lower is better" : "")
        << "), trained on lengths "
        << FormatLengthRange(t.train_min_length, t.train_max_length)
        << "; data: " << t.data << "\n";
    const int64_t hi = t.train_max_length;
    // translate scores source-length buckets; the other tasks lengths.
    const bool buckets = t.task == "translate";
    out << Pad("position", 12, true) << Pad("params", 9)
        << Pad("inside " + FormatLengthRange(t.train_min_length, hi), 26)
        << Pad((buckets ? FormatLengthRange(hi + 1, 2 * hi)
                        : "at " + std::to_string(2 * hi)) +
                   " (2x)",
               26)
        << Pad((buckets ? FormatLengthRange(2 * hi + 1, 4 * hi)
                        : "at " + std::to_string(4 * hi)) +
                   " (4x)",
               26)
        << Pad("train s", 9) << "\n";
    for (const CompareRow& row : r.rows) {
      if (row.task != t.task) continue;
      out << Pad(row.position, 12, true)
          << Pad(std::to_string(row.parameters), 9)
          << Pad(Spread(row.inside), 26) << Pad(Spread(row.at_2x), 26)
          << Pad(Spread(row.at_4x), 26) << Pad(Fixed(row.train_seconds, 1), 9)
          << "\n";
    }
  }
  // Every evaluated length (the plot's points), means over seeds.
  for (const CompareTask& t : r.tasks) {
    out << "\n" << t.task << ", " << t.metric << " by length (mean over seeds):\n"
        << Pad("position", 12, true);
    for (int64_t n : t.lengths) out << Pad(std::to_string(n), 8);
    out << "\n";
    for (const CompareRow& row : r.rows) {
      if (row.task != t.task) continue;
      out << Pad(row.position, 12, true);
      for (const SeedStats& s : row.by_length) out << Pad(Fixed(s.mean, 3), 8);
      out << "\n";
    }
  }
  int64_t reused = 0;
  for (const CompareCell& c : r.cells) reused += c.reused;
  out << "\nmean over seeds [min,max]; " << r.cells.size() << " of "
      << r.cells_planned << " cells";
  if (reused > 0) out << " (" << reused << " reused from compare.json)";
  out
      << (r.interrupted ? " (interrupted)" : "") << ", "
      << FormatDuration(r.seconds) << "\n";
}

// One panel per task, stacked: each is RenderSvg's plot nested in one SVG.
std::string ComparePlot(const CompareResult& r) {
  std::vector<std::string> panels;
  const PlotOptions size;
  for (const CompareTask& t : r.tasks) {
    std::vector<PlotSeries> series;
    double lo = 0, hi = 1;
    bool any = false;
    for (const CompareRow& row : r.rows) {
      if (row.task != t.task) continue;
      PlotSeries s{row.position, {}};
      for (size_t i = 0; i < row.lengths.size(); ++i) {
        const double y = row.by_length[i].mean;
        if (!std::isfinite(y)) continue;
        s.points.emplace_back(static_cast<double>(row.lengths[i]), y);
        if (t.lower_is_better) {
          lo = any ? std::min(lo, y) : y;
          hi = any ? std::max(hi, y) : y;
          any = true;
        }
      }
      if (!s.points.empty()) series.push_back(std::move(s));
    }
    if (series.empty()) continue;
    PlotOptions po;
    po.title = t.task + ": " + t.metric + " by length (mean over seeds)";
    po.y_label = t.lower_is_better ? "bits per byte" : "per-token accuracy";
    if (t.task == "translate") {  // BLEU, 0-100: up to the next multiple of 5
      double top = 0;
      for (const PlotSeries& s : series) {
        for (const auto& [x, y] : s.points) top = std::max(top, y);
      }
      po.y_label = "BLEU";
      po.y_min = 0;
      po.y_max = std::min(100.0, std::max(5.0, std::ceil(top / 5) * 5));
    } else if (t.lower_is_better) {
      po.y_min = std::max(0.0, std::floor(lo * 2) / 2);
      po.y_max = std::max(po.y_min + 0.5, std::ceil(hi * 2) / 2);
    }
    po.train_max_x = static_cast<double>(t.train_max_length);
    panels.push_back(RenderSvg(series, po));
  }
  if (panels.empty()) return "";
  return StackSvg(panels, size.width, size.height);
}

// The grid's training defaults (the task is set per grid).
ExperimentConfig CompareDefaults(bool quick) {
  ExperimentConfig defaults;
  defaults.SetDefault("train", "steps", quick ? kQuickSteps : kDefaultSteps);
  defaults.SetDefault("train", "lr", "2e-3");
  defaults.SetDefault("train", "checkpoint_every", "0");
  return defaults;
}

// Errors about the grid's lists name the flags that gave them ("positions
// must be one of ..." -> "--positions must be one of ...").
template <typename Fn>
decltype(auto) RunWithFlagNames(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const InvalidArgument& e) {
    std::string message = MessageBody(e);
    for (const auto& [name, flag] :
         {std::pair<std::string, std::string>{"tasks", "--tasks"},
          {"positions", "--positions"},
          {"seeds", "--seeds"},
          {"lengths", "--eval-lengths"}}) {
      if (message.rfind(name, 0) == 0) {
        throw InvalidArgument(flag + message.substr(name.size()));
      }
    }
    throw;
  }
}

// The grid the flags ask for (the defaults of --quick or of a full run).
CompareSpec MakeCompareSpec(const CompareFlags& f) {
  using FlagPair = std::pair<const char*, const char*>;
  for (const auto& [flag, instead] :
       {FlagPair{"--task", "--tasks"}, FlagPair{"--position", "--positions"},
        FlagPair{"--seed", "--seeds"}}) {
    RELPOS_CLI_CHECK(f.exp.GivenText(flag).empty(),
                     "compare takes " << instead << " LIST, not " << flag);
  }
  ExperimentConfig defaults = CompareDefaults(f.quick);
  CompareSpec spec;
  spec.tasks = SplitList(f.tasks.empty() ? (f.quick ? kQuickTasks
                                                    : kDefaultTasks)
                                         : f.tasks);
  // The base config is resolved as one of the grid's tasks: lm if listed
  // (so that the corpus flags are accepted), else the first.
  const bool has_lm =
      std::find(spec.tasks.begin(), spec.tasks.end(), "lm") != spec.tasks.end();
  RELPOS_CLI_CHECK(!spec.tasks.empty() && !spec.tasks.front().empty(),
                   "--tasks must name at least one task");
  defaults.SetDefault("train", "task", has_lm ? "lm" : spec.tasks.front());
  spec.base = RunWithFlagNames([&] { return f.exp.Build(defaults); });
  if (f.positions.empty()) {
    for (const Scheme& s : Schemes()) spec.positions.push_back(s.name);
  } else {
    spec.positions = SplitList(f.positions);
  }
  spec.seeds = ParseSeeds(f.seeds.empty()
                              ? (f.quick ? kQuickSeeds : kDefaultSeeds)
                              : f.seeds);
  if (!f.eval_lengths.empty()) {
    spec.extra_lengths = ParseLengths(f.eval_lengths, "--eval-lengths");
  }
  spec.sequences_per_length = f.sequences;
  return spec;
}

// One line per finished cell, with the grid's time so far and an estimate
// of what is left: each trained cell's wall time (from the end of the
// previous cell: building the model, training, evaluating, saving), fitted
// per task and scheme (CompareTimeEstimate).
std::function<void(const CompareCell&, int64_t, int64_t)> CellReporter(
    const CompareSpec& spec) {
  const auto start = std::chrono::steady_clock::now();
  auto estimate = std::make_shared<CompareTimeEstimate>(spec);
  auto last_end = std::make_shared<double>(0);
  return [start, estimate, last_end](const CompareCell& c, int64_t done,
                                     int64_t total) {
    const double elapsed = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    if (!c.reused) estimate->Add(done - 1, elapsed - *last_end);
    *last_end = elapsed;
    const double left = estimate->SecondsLeft(done);
    std::cerr << "compare: [" << done << "/" << total << "] " << c.task << " "
              << c.position << " seed " << c.seed
              << (c.reused ? ": reused from compare.json"
                           : ": trained in " + FormatDuration(c.train_seconds))
              << " (elapsed " << FormatDuration(elapsed);
    if (std::isfinite(left) && done < total) {
      std::cerr << ", about " << FormatDuration(left) << " left";
    }
    std::cerr << ")\n";
  };
}

void RunCompareVerb(CompareFlags& f, std::ostream& out) {
  const CompareSpec spec = MakeCompareSpec(f);
  // Nothing is created before the grid is known to be valid: RunCompare
  // creates --out once it is (and says so through on_start).
  CheckOutDir(f.out, /*refuse_checkpoint=*/false);
  const std::string svg_path = (fs::path(f.out) / "compare.svg").string();
  CheckWritableFile(svg_path);

  ScopedStopSignals signals;
  CompareOptions options;
  options.out_dir = f.out;
  // Held from the start of the grid until compare.svg is written (nested in
  // RunCompare's own lock of the folder).
  auto lock = std::make_shared<std::unique_ptr<FolderLock>>();
  options.on_start = [&f, &spec, lock](const CompareResult& planned) {
    *lock = std::make_unique<FolderLock>(f.out);
    std::cerr << "compare: " << spec.tasks.size() << " task(s) x "
              << spec.positions.size() << " scheme(s) x " << spec.seeds.size()
              << " seed(s) = " << planned.cells_planned << " models of "
              << spec.base.Get("train", "steps") << " steps; results in "
              << PathText(f.out) << "\n";
    if (!planned.previous_note.empty()) {
      std::cerr << "compare: " << planned.previous_note << "\n";
    }
  };
  options.progress = {.out = &std::cerr, .mode = f.exp.progress()};
  options.stop_flag = signals.flag();
  options.on_cell = CellReporter(spec);
  const CompareResult r = RunWithFlagNames([&] {
    return RunCompare(spec, options);
  });
  if (r.interrupted && r.cells_planned == 0) {  // stopped while planning
    std::cerr << "compare: stopped by signal " << signals.signal_number()
              << " while planning the grid; nothing was written\n";
    signals.Reraise();
    return;
  }
  const std::string svg = ComparePlot(r);
  if (!svg.empty()) WriteFileAtomically(svg_path, svg);
  if (f.json) {
    out << r.ToJson();
  } else {
    PrintTable(r, out);
  }
  if (r.interrupted) {
    std::cerr << "compare: stopped by signal " << signals.signal_number()
              << "; " << r.cells.size()
              << " finished cells kept in compare.json (rerun with the same "
                 "--out to continue)\n";
    signals.Reraise();
  }
}

}  // namespace

void AddCompareVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<CompareFlags>();
  CLI::App* sub = app.add_subcommand(
      "compare",
      "Grid of tasks x position schemes x seeds: score inside, at 2x and at "
      "4x the training lengths, parameters, time");
  flags->exp.Add(sub, FlagGroups{.position = true, .config_file = true},
                 CompareDefaults(false));
  flags->exp.ShowDefault("--steps", std::string(kDefaultSteps) +
                                        "; --quick: " + kQuickSteps);
  // The grid gives these per cell (--tasks, --positions, --seeds): hidden
  // from the help, refused if given.
  for (const char* name : {"--task", "--position", "--seed"}) {
    sub->get_option(name)->group("");
  }
  sub->add_option("--tasks", flags->tasks,
                  std::string("Comma list of tasks (default: ") +
                      kDefaultTasks + "; --quick: " + kQuickTasks + ")");
  sub->add_option("--positions", flags->positions,
                  "Comma list of position schemes (default: every scheme)");
  sub->add_option("--seeds", flags->seeds,
                  std::string("N (seeds 0..N-1), A-B or a comma list "
                              "(default: ") +
                      kDefaultSeeds + "; --quick: " + kQuickSeeds + ")");
  sub->add_option("--eval-lengths", flags->eval_lengths,
                  "Lengths to evaluate besides the defaults (3 inside the "
                  "training range, 2x and 4x the longest; not for "
                  "translate, scored by source-length bucket)");
  sub->add_option("--sequences", flags->sequences,
                  "Evaluation sequences per length (translate: held-out "
                  "pairs translated in all, beam 4, BLEU per bucket)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--out", flags->out,
                  "Folder for compare.json and compare.svg; a rerun with the "
                  "same folder reuses its finished cells");
  sub->add_flag("--quick", flags->quick,
                std::string("Small grid (") + kQuickSteps + " steps, " +
                    kQuickSeeds + " seeds, " + kQuickTasks + ")");
  sub->add_flag("--json", flags->json,
                "Print compare.json instead of the table");
  sub->callback([flags, &out] { RunCompareVerb(*flags, out); });
}

}  // namespace relpos::cli
