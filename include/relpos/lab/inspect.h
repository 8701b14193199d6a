// Which distances a model actually learned (docs/inspect.md): for every
// learned relative table (Shaw's AK / AV per layer, and the bucketed tables
// of other schemes), per row (a distance or a bucket of distances), the
// training signal the row received, its norm and how far it moved from its
// initial value; and a verdict naming the rows that were effectively
// untrained and the smallest clipping distance that holds most of the
// signal.
//
//   relpos::Inspection in = relpos::Inspect("out");   // a checkpoint folder
//   for (const auto& t : in.tables) std::cout << relpos::Verdict(t) << "\n";
#ifndef RELPOS_LAB_INSPECT_H_
#define RELPOS_LAB_INSPECT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "relpos/lab/model.h"

namespace relpos {

struct InspectOptions {
  // A row is untrained when its cumulative signal is below this fraction of
  // the median signal of the rows that received any (rows with none are
  // always untrained): with 1e-3, a row whose summed squared gradient is a
  // thousandth of the typical row's (a gradient about 3% as large) counts
  // as untrained.
  double untrained_fraction = 1e-3;
  // The verdict reports the smallest k such that the rows of distances
  // |r| <= k hold this share of the table's signal.
  double share = 0.99;
};

// One table, one entry per row in every per-row vector.
struct TableInspection {
  std::string parameter;  // "blocks.0.attn.rel_k" (docs/model.md)
  int64_t layer = 0;
  std::string role;  // "key" (AK), "value" (AV), "bias" (a scalar table)
  int64_t heads = 1;  // 1: shared by the heads
  int64_t rows = 0, width = 0;
  std::string bucket_map;  // e.g. "clip(r, -16, 16) + 16"

  // The distances r (key minus query) each row stands for: every r in
  // [distance_min, distance_max], and also every r < distance_min when
  // open_below (a far row: r <= -k under Shaw's clip), every r >
  // distance_max when open_above. distance_min > distance_max: no distance
  // uses the row (T5's last bucket for an odd count). `distance` is the
  // row's r of smallest |r| (the negative one on a tie), the x of the plots.
  std::vector<int64_t> distance, distance_min, distance_max;
  std::vector<uint8_t> open_below, open_above;

  std::vector<double> row_norm;  // ||W[row]|| over heads and columns
  std::vector<double> movement;  // ||W[row] - W_init[row]||

  // Training signal (empty when the checkpoint has none): pairs that used
  // the row, and the sum over updates of the squared norm of the row's
  // gradient (of the batch's mean loss, before clipping), over heads.
  std::vector<int64_t> pair_count;
  std::vector<double> signal;
  std::vector<double> signal_per_head;  // [heads, rows]; empty if shared

  // The verdict (with signal only). untrained[row] by the rule of
  // InspectOptions; threshold = untrained_fraction * the median signal of
  // rows with any (0 when no row has any).
  std::vector<uint8_t> untrained;
  int64_t untrained_rows = 0;
  double threshold = 0;
  // Smallest k with the rows of |r| <= k holding `share` of the signal;
  // -1 when the table received no signal at all.
  int64_t share_k = -1;
  double share = 0;  // the share asked for
};

struct Inspection {
  std::string source;  // the checkpoint folder, or "(in memory)"
  ExperimentConfig config;
  int64_t step = 0;
  // Longest training sequence in tokens: distances up to this minus one
  // occur in training.
  int64_t train_max_tokens = 0;
  // False for checkpoints written before relpos recorded the statistics
  // (and models not trained by relpos::Training); `no_signal` then says so
  // in a sentence, and the tables carry norms and movement only.
  bool has_signal = false;
  std::string no_signal;
  // The updates the statistics cover: first_step .. first_step + steps - 1
  // (a run resumed from a checkpoint without statistics starts counting at
  // its step).
  int64_t first_step = 0, steps = 0;
  std::vector<TableInspection> tables;  // none for schemes without tables
};

// Reads the checkpoint folder `dir` (IoError / FormatError for a missing or
// damaged one, naming the file) and re-creates the initial model from the
// config's seed for the movement. InvalidArgument naming the option for an
// untrained_fraction outside [0, 1] or a share outside (0, 1].
Inspection Inspect(const std::string& dir, const InspectOptions& options = {});
// The same for a model in memory; its statistics are there when it is a
// relpos::Training's model (Training::model()).
Inspection Inspect(const Model& model, const InspectOptions& options = {});

// The one-line verdict: "blocks.0.attn.rel_k: 33 of 129 rows untrained
// (r <= -32, r >= 32); 99% of the signal within |r| <= 12".
std::string Verdict(const TableInspection& table);
// "-3", "<= -16", ">= 16" or "4..7": the distances of a row.
std::string DistanceLabel(const TableInspection& table, int64_t row);

}  // namespace relpos

#endif  // RELPOS_LAB_INSPECT_H_
