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
#include "core/check.h"
#include "train/checkpoint.h"
#include "train/signals.h"
#include "train/evaluation.h"
#include "train/lengths.h"
#include "train/trainer.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

struct TrainFlags {
  ExperimentFlags exp;
  std::string out, resume;
};


// Removes a folder this run created if the run failed before its first
// checkpoint, so a failed command leaves nothing behind.
class CreatedDirGuard {
 public:
  explicit CreatedDirGuard(std::string dir) : dir_(std::move(dir)) {}
  ~CreatedDirGuard() {
    if (dir_.empty() || train::HasCheckpoint(dir_)) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Release() { dir_.clear(); }

 private:
  std::string dir_;
};

void RunTrain(TrainFlags& f, std::ostream& out) {
  std::unique_ptr<train::Trainer> trainer;
  std::string dir;
  std::unique_ptr<CreatedDirGuard> guard;
  if (!f.resume.empty()) {
    RELPOS_CHECK_ARG(f.out.empty() || fs::path(f.out) == fs::path(f.resume),
                     "--out and --resume name different folders (a resumed run "
                     "continues in its own folder)");
    bool steps_given = false;
    for (const std::string& name : f.exp.GivenNames()) {
      if (name == "--steps") {
        steps_given = true;
        continue;
      }
      RELPOS_CHECK_ARG(name == "--progress",
                       "--resume takes the configuration from the checkpoint; "
                       "drop "
                           << name << " (only --steps may change)");
    }
    trainer =
        std::make_unique<train::Trainer>(train::Trainer::Resume(f.resume));
    if (steps_given) {
      trainer->set_total_steps(std::stoll(f.exp.GivenText("--steps")));
    }
    dir = f.resume;
  } else {
    RELPOS_CHECK_ARG(!f.out.empty(), "--out DIR is required (or --resume DIR)");
    model::ModelConfig m;
    train::TrainConfig t;
    f.exp.Build(model::ModelConfig{}, train::TrainConfig{}, &m, &t);
    CheckOutDir(f.out, /*refuse_checkpoint=*/true);
    dir = f.out;
    std::error_code ec;
    if (!fs::exists(dir, ec)) {
      if (!fs::create_directory(dir, ec)) {
        RELPOS_THROW(IoError, "--out '" << dir
                                        << "': cannot create the folder ("
                                        << ec.message() << ")");
      }
      guard = std::make_unique<CreatedDirGuard>(dir);
    }
    trainer = std::make_unique<train::Trainer>(m, t);
  }

  const train::TrainConfig& tc = trainer->config();
  const model::ModelConfig& mc = trainer->model_config();
  std::cerr << "train: task " << tc.data.task << ", "
            << model::ToString(mc.arch) << ", position " << PositionLabel(mc)
            << ", " << trainer->model().NumParameters()
            << " parameters, lengths "
            << train::FormatLengthRange(tc.train_min_length,
                                        tc.train_max_length)
            << ", steps " << trainer->state().step << " -> " << tc.steps
            << ", threads " << tc.threads << "\n";

  train::ScopedStopSignals signals;
  train::RunOptions opts;
  opts.checkpoint_dir = dir;
  opts.progress_out = &std::cerr;
  opts.progress_mode = f.exp.progress_mode();
  opts.stop_flag = signals.flag();
  const train::RunResult r = trainer->Run(opts);
  if (guard) guard->Release();

  if (r.interrupted) {
    std::cerr << "train: stopped by signal " << signals.signal_number()
              << " at step " << r.final_step << "; checkpoint saved in " << dir
              << " (continue with: relpos train --resume " << dir << ")\n";
    signals.Reraise();
    return;
  }
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.4f", r.final_loss);
  out << "trained " << r.steps.size() << " steps (to step " << r.final_step
      << ") in " << train::FormatDuration(r.seconds) << ", final loss " << loss
      << "; checkpoint: " << dir << "\n";
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
