// `relpos sweep`: Shaw et al.'s ablations on one task. Trains one
// relative-position model per clipping distance k (both terms), then one per
// term setting (key only, value only, neither) at a fixed k, and prints a
// table of accuracy inside and beyond the training lengths, with the share
// of table rows each run left untrained (relpos inspect's rule,
// docs/inspect.md): the reason a k beyond the training distances fails
// beyond them.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "cli/signals.h"
#include "relpos/lab/config.h"
#include "relpos/lab/experiment.h"
#include "relpos/lab/training.h"

namespace relpos::cli {
namespace {

struct SweepFlags {
  ExperimentFlags exp;
  std::string ks = "0,1,2,4,16,64";
  std::string terms = "both,key,value,neither";
  int64_t terms_k = SweepAxes{}.terms_k;
  std::string eval_lengths;  // default: see RunSweep
  int64_t sequences = 128;
  std::string out;  // optional: sweep.json goes here
  bool json = false;
};

// --ks: a comma list of integers in [0, 65536].
std::vector<int64_t> ParseKs(const std::string& spec) {
  std::vector<int64_t> ks;
  for (const std::string& item : SplitList(spec)) {
    RELPOS_CLI_CHECK(
        !item.empty() && item.size() <= 6 &&
            item.find_first_not_of("0123456789") == std::string::npos &&
            std::stoll(item) <= 65536,
        "--ks must be a comma list of integers in [0, 65536] (got '" << spec
                                                                     << "')");
    ks.push_back(std::stoll(item));
  }
  return ks;
}

// The runs' settings as the library names them, reported under the flags
// that gave them.
template <typename Fn>
decltype(auto) AsSweepFlags(Fn&& fn) {
  return AsFlag("--ks", "max_distance", [&]() -> decltype(auto) {
    return AsFlag("--terms-list", "--terms", std::forward<Fn>(fn));
  });
}

// One table row: the metrics with a fixed width; "-" where a mean or the
// share does not exist.
std::string TableRow(const ExperimentRunResult& r) {
  auto column = [](double v, int width) {
    char buf[32];
    if (std::isfinite(v) && v >= 0) {
      std::snprintf(buf, sizeof buf, "%*.4f", width, v);
    } else {
      std::snprintf(buf, sizeof buf, "%*s", width, "-");
    }
    return std::string(buf);
  };
  char head[64];
  std::snprintf(head, sizeof head, "%5s  %-7s  %8lld  ",
                r.config.Get("model", "max_distance").c_str(),
                r.settings.at(1).value.c_str(),
                static_cast<long long>(r.parameters));
  return head + column(r.train.final_loss, 10) + "  " +
         column(r.accuracy_train_lengths, 9) + "  " +
         column(r.accuracy_longer_lengths, 10) + "  " +
         column(r.sequence_accuracy_longer_lengths, 10) + "  " +
         column(r.untrained_row_share, 9) + "\n";
}

void RunSweep(SweepFlags& f, std::ostream& out) {
  const ExperimentConfig base = f.exp.Build(SweepDefaults());
  SweepAxes axes{.ks = ParseKs(f.ks),
                 .terms = SplitList(f.terms),
                 .terms_k = f.terms_k};
  if (!f.eval_lengths.empty()) {
    axes.longer_lengths = ParseLengths(f.eval_lengths, "--eval-lengths");
  }
  ExperimentSpec spec = SweepExperiment(base, axes);
  spec.sequences_per_length = f.sequences;
  ExperimentOptions options;
  options.out_dir = f.out;
  options.json_file = f.out.empty() ? "" : "sweep.json";
  options.progress.out = &std::cerr;
  options.progress.mode = f.exp.progress();
  AsFlag("--eval-lengths", "lengths", [&] {
    AsSweepFlags([&] { CheckExperiment(spec, options); });
  });

  const DataInfo data = DescribeData(base);
  const int64_t lo = std::stoll(base.Get("train", "train_min_length")),
                hi = std::stoll(base.Get("train", "train_max_length"));
  std::vector<int64_t> inside, longer;
  for (int64_t n : spec.lengths) (n <= hi ? inside : longer).push_back(n);
  std::cerr << "sweep: task " << base.Get("train", "task") << ", "
            << spec.runs.size() << " runs of " << base.Get("train", "steps")
            << " steps, train lengths " << FormatLengthRange(lo, hi)
            << ", longer lengths " << longer.front() << "-" << longer.back()
            << "\n";
  if (!f.out.empty()) CheckOutDir(f.out, /*refuse_checkpoint=*/false);
  ScopedStopSignals signals;
  const ExperimentResult result = AsSweepFlags([&] {
    options.stop_flag = signals.flag();
    return RunExperiment(spec, options);
  });
  if (result.interrupted) {
    std::cerr << "sweep: stopped by signal " << signals.signal_number()
              << "\n";
    signals.Reraise();
    return;
  }
  if (f.json) {
    out << result.ToJson();
    return;
  }
  out << "task " << base.Get("train", "task") << ": " << data.metric
      << ", trained on lengths " << FormatLengthRange(lo, hi)
      << "; acc@train = mean over lengths " << LengthList(inside)
      << ", acc@longer over " << LengthList(longer)
      << "; untrained = share of table rows with (almost) no "
      << "gradient (relpos inspect)\n"
      << "    k  terms     params  train_loss  acc@train  acc@longer  "
         "seq@longer  untrained\n";
  for (const ExperimentRunResult& r : result.runs) out << TableRow(r);
}

}  // namespace

void AddSweepVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<SweepFlags>();
  CLI::App* sub = app.add_subcommand(
      "sweep",
      "Shaw et al.'s ablations: clipping distance k and key/value terms");
  flags->exp.Add(sub, FlagGroups{.position = false, .config_file = true},
                 SweepDefaults());
  flags->exp.ShowDefault("--warmup-steps", "min(40, steps/10)");
  sub->add_option("--ks", flags->ks, "Clipping distances to try (both terms)");
  sub->add_option("--terms-list", flags->terms,
                  "Term settings to try at --terms-k: both,key,value,neither");
  sub->add_option("--terms-k", flags->terms_k, "k for the term ablation")
      ->check(CLI::Range(int64_t{0}, int64_t{65536}));
  sub->add_option("--eval-lengths", flags->eval_lengths,
                  "Longer lengths to test (default: max+1 .. 3*max)");
  sub->add_option("--sequences", flags->sequences,
                  "Evaluation sequences per length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--out", flags->out, "Folder for sweep.json (optional)");
  sub->add_flag("--json", flags->json,
                "Print one JSON object instead of the table");
  sub->callback([flags, &out] { RunSweep(*flags, out); });
}

}  // namespace relpos::cli
