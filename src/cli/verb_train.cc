// `relpos train`: trains a model on a task and writes checkpoints
// (docs/training.md); `relpos train --resume DIR` continues a saved run.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "cli/signals.h"
#include "relpos/lab/config.h"
#include "relpos/lab/files.h"
#include "relpos/error.h"
#include "relpos/lab/model.h"
#include "relpos/lab/training.h"
#include "relpos/lab/translation.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

struct TrainFlags {
  ExperimentFlags exp;
  std::string out, resume;
};

// The validation curve's summary: the last and the best point, and why
// the run stopped early (the whole curve is in config.json).
void PrintValidation(const TrainSummary& r, const ExperimentConfig& c,
                     std::ostream& out) {
  if (r.validation.empty()) return;
  auto point = [](const ValidationPoint& p) {
    char text[96];
    std::snprintf(text, sizeof text, "%.4f", p.loss);
    std::string s = std::string("held-out loss ") + text;
    if (p.bleu_sentences > 0) {
      std::snprintf(text, sizeof text, ", BLEU %.2f (%lld pairs)", p.bleu,
                    static_cast<long long>(p.bleu_sentences));
      s += text;
    }
    return s + " at step " + std::to_string(p.step);
  };
  const ValidationPoint* best = &r.validation.front();
  for (const ValidationPoint& p : r.validation) {
    if (p.loss < best->loss) best = &p;
  }
  out << "validation: " << r.validation.size() << " points; last "
      << point(r.validation.back()) << "; best " << point(*best) << "\n";
  if (r.stopped_early) {
    out << "stopped early at step " << r.final_step << " of "
        << c.Get("train", "steps") << ": the held-out loss did not improve in "
        << c.Get("train", "patience") << " evaluations (every "
        << c.Get("train", "eval_every") << " updates)\n";
  }
}

void RunTrain(TrainFlags& f, std::ostream& out) {
  std::unique_ptr<Training> training;
  std::string dir;
  // One writer per folder, from before the checkpoint is read (resume) or
  // the folder is created (a new run) to the end of the run.
  std::unique_ptr<FolderLock> resume_lock;
  std::unique_ptr<OutputFolder> folder;
  if (!f.resume.empty()) {
    RELPOS_CLI_CHECK(
        f.out.empty() || fs::path(f.out) == fs::path(f.resume),
        "--out and --resume name different folders (a resumed run "
        "continues in its own folder)");
    for (const std::string& name : f.exp.GivenNames()) {
      RELPOS_CLI_CHECK(name == "--steps" || name == "--progress",
                       "--resume takes the configuration from the "
                       "checkpoint; drop "
                           << name << " (only --steps may change)");
    }
    std::error_code ec;
    if (fs::is_directory(f.resume, ec)) {
      resume_lock = std::make_unique<FolderLock>(f.resume);
    }
    training = std::make_unique<Training>(Training::Resume(f.resume));
    if (const std::string steps = f.exp.GivenText("--steps"); !steps.empty()) {
      AsFlag("--steps", "steps",
             [&] { training->SetTotalSteps(std::stoll(steps)); });
    }
    dir = f.resume;
  } else {
    RELPOS_CLI_CHECK(!f.out.empty(), "--out DIR is required (or --resume DIR)");
    const ExperimentConfig config = f.exp.Build(ExperimentConfig{});
    dir = f.out;
    folder = std::make_unique<OutputFolder>(dir, /*refuse_checkpoint=*/true);
    training = std::make_unique<Training>(config);
  }

  const ExperimentConfig& c = training->config();
  std::cerr << "train: task " << c.Get("train", "task") << ", "
            << c.Get("model", "arch") << ", position " << PositionLabel(c)
            << ", " << training->model().NumParameters()
            << " parameters, lengths " << c.Get("train", "--train-lengths")
            << ", steps " << training->step() << " -> "
            << c.Get("train", "steps") << ", threads "
            << c.Get("train", "threads") << "\n";
  // A translation corpus: what was read, the split and the vocabulary.
  if (c.Get("train", "task") == kTranslateTaskName) {
    std::cerr << DescribeData(c).source << "\n";
  }

  ScopedStopSignals signals;
  TrainOptions options;
  options.checkpoint_dir = dir;
  options.progress = {.out = &std::cerr, .mode = f.exp.progress(),
                      .label = "train"};
  options.stop_flag = signals.flag();
  const TrainSummary r = training->Run(options);
  if (folder) folder->Keep();

  if (r.interrupted) {
    std::cerr << "train: stopped by signal " << signals.signal_number()
              << " at step " << r.final_step << "; checkpoint saved in "
              << PathText(dir) << " (continue with: relpos train --resume "
              << PathText(dir) << ")\n";
    signals.Reraise();
    return;
  }
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.4f", r.final_loss);
  if (r.stopped_early && r.steps_run == 0) {
    out << "the run in " << PathText(dir) << " stopped early at step "
        << r.final_step << " (patience " << c.Get("train", "patience")
        << "); nothing to resume\n";
  } else {
    out << "trained " << r.steps_run << " steps (to step " << r.final_step
        << ") in " << FormatDuration(r.seconds) << ", final loss " << loss
        << "; checkpoint: " << PathText(dir) << "\n";
  }
  PrintValidation(r, c, out);
}

}  // namespace

void AddTrainVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* sub = app.add_subcommand(
      "train", "Train a transformer on a task and write checkpoints to --out");
  flags->exp.Add(sub);
  sub->add_option("--out", flags->out, "Checkpoint folder (must not hold one)");
  sub->add_option("--resume", flags->resume,
                  "Continue the run saved in this folder (bit-identical "
                  "to an uninterrupted run with the same thread count)");
  sub->callback([flags, &out] { RunTrain(*flags, out); });
}

}  // namespace relpos::cli
