// A grid of tasks x position schemes x seeds, trained and evaluated on equal
// terms (the engine of `relpos compare`, docs/results.md). Every cell trains
// one model of the base configuration with its task, scheme and seed, then
// evaluates it inside the training lengths, at 2x and at 4x the longest
// training length (and at any extra lengths); the cells of a (task, scheme)
// pair are then aggregated over the seeds.
//
//   relpos::CompareSpec spec;
//   spec.tasks = {"local_difference"};
//   spec.positions = {"sinusoidal", "relative"};
//   spec.seeds = {0, 1};
//   relpos::CompareResult r = relpos::RunCompare(spec, {.out_dir = "cmp"});
//
// The score of a length is the per-token accuracy for the synthetic tasks,
// the held-out bits per byte for `lm` (lower is better), and for
// `translate` the BLEU of beam-4 translations of the held-out pairs per
// source-length bucket: the training lengths lo-hi, hi+1 to 2 hi and
// 2 hi + 1 to 4 hi words, reported at lengths hi, 2 hi and 4 hi
// (EvaluateTranslation, docs/translation.md).
#ifndef RELPOS_LAB_COMPARE_H_
#define RELPOS_LAB_COMPARE_H_

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "relpos/lab/config.h"
#include "relpos/lab/training.h"

namespace relpos {

// The largest grid a compare plans (checked before anything is planned):
// at most kMaxCompareSeeds seeds and kMaxCompareCells cells (tasks x
// schemes x seeds). A grid that size trains for days on a workstation.
inline constexpr int64_t kMaxCompareSeeds = 1000;
inline constexpr int64_t kMaxCompareCells = 10000;

struct CompareSpec {
  // Shared settings (model size, steps, train lengths, corpus, ...). The
  // task, position scheme and seed of each cell replace its values; the
  // corpus settings reach only the `lm` cells.
  ExperimentConfig base;
  std::vector<std::string> tasks;      // TaskNames(), "lm" included
  std::vector<std::string> positions;  // values of the model's `position`
  std::vector<uint64_t> seeds;
  // Evaluated besides the defaults (up to 3 lengths spread over the training
  // range, 2x and 4x the longest training length). Not for translate, whose
  // lengths are its three buckets.
  std::vector<int64_t> extra_lengths;
  // Held-out sequences per length; for translate, the held-out pairs
  // translated in all (spread over the split as EvaluateTranslation's
  // max_sentences takes them).
  int64_t sequences_per_length = 128;
};

// One trained model.
struct CompareCell {
  std::string task, position;  // position as the config spells it
  uint64_t seed = 0;
  int64_t parameters = 0;
  double train_seconds = 0, eval_seconds = 0;
  double final_loss = 0;
  std::vector<LengthMetrics> by_length;
  bool reused = false;  // taken from a previous run's compare.json
  // What a rerun compares to reuse the cell: the resolved configuration
  // (ExperimentConfig::ToJson) and the evaluation sequence count.
  std::string config_json;
  int64_t sequences_per_length = 0;
};

// One (task, scheme) pair over its seeds: the mean and the min / max of the
// score (accuracy, or bits per byte for lm).
struct SeedStats {
  double mean = 0, min = 0, max = 0;
  int64_t n = 0;
};
struct CompareRow {
  std::string task, position;
  int64_t parameters = 0;
  double train_seconds = 0;  // mean over seeds
  SeedStats inside;          // mean score over the lengths <= longest trained
  SeedStats at_2x, at_4x;    // score at 2x and 4x the longest trained
  // Per evaluated length, over seeds (the plot's lines).
  std::vector<int64_t> lengths;
  std::vector<SeedStats> by_length;
};

struct CompareTask {
  std::string task;
  std::string metric;  // "per-token accuracy", "bits per byte" or "BLEU"
  bool lower_is_better = false;
  std::string data;    // DataInfo::source (the corpus summary for lm)
  int64_t train_min_length = 0, train_max_length = 0;
  std::vector<int64_t> lengths;  // every evaluated length, sorted
};

struct CompareResult {
  std::vector<CompareTask> tasks;
  std::vector<CompareCell> cells;  // finished cells, in grid order
  std::vector<CompareRow> rows;    // aggregated, in grid order
  int64_t cells_planned = 0;  // 0 if stopped while planning
  bool interrupted = false;
  // What of a previous compare.json was not reused and why (cells that
  // failed validation, a file of another version), or "".
  std::string previous_note;
  double seconds = 0;  // wall time of this call
  // {"tasks": [...], "rows": [...], "cells": [...], ...}: compare.json.
  std::string ToJson() const;
};

struct CompareOptions {
  // compare.json is rewritten here (atomically) after every finished cell;
  // empty: nowhere. The folder is created once the grid is known to be
  // valid (and removed again if nothing was written into it), and locked
  // for the run: a second writer gets IoError. A previous compare.json in
  // the folder is read first and its cells whose configuration, lengths and
  // sequence count match are reused instead of trained again, if they pass
  // validation (finite values in range, labels and parameter count of their
  // configuration); the others are trained again.
  std::string out_dir;
  // Progress of each cell's training (its label is set per cell).
  ProgressOptions progress;
  // Polled while planning, during training and between cells: nonzero stops
  // the grid; the cell being trained is dropped, the finished ones are kept.
  const volatile std::sig_atomic_t* stop_flag = nullptr;
  // Called once the grid is planned and valid and out_dir is ready (created
  // if missing, locked, the previous compare.json read), before the first
  // cell: with the tasks, cells_planned and previous_note filled in.
  std::function<void(const CompareResult& planned)> on_start;
  // Called after every finished (or reused) cell with its index in the grid
  // (grid order: task by task as spec.tasks lists them, within a task scheme
  // by scheme, within a scheme seed by seed; `done` is the cell's index + 1).
  std::function<void(const CompareCell&, int64_t done, int64_t total)>
      on_cell;
};

// Estimates how long the rest of a grid will take from the wall time of the
// cells trained so far. Cells differ by task (sequence lengths, data) and by
// scheme (xl's attention does about twice the work of none's), and a grid
// runs task by task, so a plain mean of the first cells misjudges the rest.
// The model: a cell of task t and scheme p costs T_t * P_p, both factors
// fitted to the finished cells; a task or scheme not seen yet gets the mean
// factor of those seen.
class CompareTimeEstimate {
 public:
  explicit CompareTimeEstimate(const CompareSpec& spec);
  // The cell at grid index `index` (0-based) was trained and took `seconds`
  // of wall time (training, evaluation and saving).
  void Add(int64_t index, double seconds);
  // Estimated seconds for the cells at indices [next, total); NaN before
  // any cell was added.
  double SecondsLeft(int64_t next) const;

 private:
  struct Observation {
    size_t task, position;
    double seconds;
  };
  size_t tasks_, positions_, seeds_;
  std::vector<Observation> seen_;
};

// The configuration of one cell (resolved): `spec.base` with the task,
// position and seed. InvalidArgument naming the setting for a bad value.
ExperimentConfig CompareCellConfig(const CompareSpec& spec,
                                   const std::string& task,
                                   const std::string& position, uint64_t seed);

// The lengths a task's cells are evaluated at: up to 3 in
// [train_min, train_max] (both ends included), 2x and 4x train_max, and the
// extra lengths; sorted, unique.
std::vector<int64_t> CompareLengths(int64_t train_min, int64_t train_max,
                                    const std::vector<int64_t>& extra);

// Checks the whole grid first (its size against the caps, every cell's
// config, every length, that every cell fits in memory; nothing is trained
// and out_dir is not touched before the grid is known to be valid), then
// trains and evaluates cell after cell. InvalidArgument for an empty or
// repeated list or a grid over the caps, ResourceError for a cell that does
// not fit.
CompareResult RunCompare(const CompareSpec& spec,
                         const CompareOptions& options = {});

// Aggregates cells into rows (exposed for tests and for reports).
std::vector<CompareRow> AggregateCells(const std::vector<CompareTask>& tasks,
                                       const std::vector<CompareCell>& cells);

}  // namespace relpos

#endif  // RELPOS_LAB_COMPARE_H_
