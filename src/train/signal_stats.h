// Training-signal accounting for the learned relative tables (docs/inspect.md):
// for every row of every table, how many (query, key) pairs used it and how
// much gradient it received, summed over the updates of a run. Shaw et al.'s
// tables have a known weakness these numbers make visible: rows of distances
// that the training sequences rarely or never contain get little or no
// gradient, and keep (close to) their initial values.
//
// Per update and table row b:
//   pair_count[b] += #{(batch item, query i, key j) visible under the mask
//                      with bucket(j - i) = b}
//   signal[b]     += sum over heads h and columns c of g[h, b, c]^2
// where g is the table's gradient of the batch's mean loss, as Backward left
// it (before clipping). The count is combinatorial (a sequence of n tokens
// has n - |r| pairs at distance r, causal attention only r <= 0), so it costs
// O(length) per sequence plus one bucket evaluation per distance, never
// per pair. Everything is summed sequentially in a fixed order (int64 counts,
// double signals), so the statistics do not depend on the thread count
// beyond what the gradients themselves do.
#ifndef RELPOS_SRC_TRAIN_SIGNAL_STATS_H_
#define RELPOS_SRC_TRAIN_SIGNAL_STATS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "relpos/position_schemes.h"

namespace relpos::train {

// Which row of a table a signed distance r = j - i (key minus query,
// docs/math.md section 1) uses.
struct BucketMap {
  int64_t rows = 0;
  // Every r >= reach uses the row of reach, every r <= -reach the row of
  // -reach (reach >= 1), so the rows are known from the distances in
  // [-reach, reach].
  int64_t reach = 1;
  std::function<int64_t(int64_t)> bucket;  // r -> row in [0, rows)
  std::string description;                 // e.g. "clip(r, -16, 16) + 16"
};

// Shaw's clip (symmetric when left == right): clip(r, -left, right) + left.
BucketMap ClipBucketMap(int64_t left, int64_t right);
// T5's logarithmic buckets (relpos::T5Bucket), for the bucketed tables.
BucketMap T5BucketMap(const T5Buckets& buckets);

// The distances each row of `map` stands for, from a scan of [-reach,
// reach]: every r in [min[b], max[b]], plus every r < min[b] if
// open_below[b] (the row of -reach) and every r > max[b] if open_above[b].
// distance[b] is the row's r of smallest |r| (the negative one on a tie).
// A row no distance uses has min = 1, max = 0, distance = 0.
struct RowDistances {
  std::vector<int64_t> distance, min, max;
  std::vector<uint8_t> open_below, open_above;
};
RowDistances DescribeRows(const BucketMap& map);

// One learned table whose rows are indexed by distance. Its parameter holds
// heads * rows * width floats, row-major [heads, rows, width] (shared
// tables: heads = 1, shape [rows, width]; scalar tables such as T5's
// [H, nb]: width = 1).
struct RelativeTable {
  std::string parameter;  // "blocks.0.attn.rel_k" (docs/model.md)
  int64_t layer = 0;      // within its stack
  std::string role;  // "key" (AK), "value" (AV), "bias" (a scalar table)
  int64_t heads = 1, width = 0;
  BucketMap map;
  // Its attention: causal (a decoder's) or not; over the batch's sources (a
  // seq2seq encoder's) or its sequences.
  bool causal = false, source = false;
};

// The relative tables of a model with this config, in parameter order (none
// for schemes without distance-indexed tables); a seq2seq model's encoder
// tables ("encoder.blocks.L...", their own bidirectional map) come before
// its decoder's ("decoder.blocks.L...", causal).
std::vector<RelativeTable> RelativeTables(const model::ModelConfig& config);

// Pairs per row of `map` in a batch of sequences of these valid lengths,
// added to (*counts)[row] (resized to map.rows if empty). Causal: a query
// sees the keys at or before it (r <= 0); otherwise every valid key.
void AddPairCounts(const std::vector<int64_t>& lengths, bool causal,
                   const BucketMap& map, std::vector<int64_t>* counts);

// The accumulators of one table.
struct TableSignal {
  std::string parameter;
  int64_t heads = 1, rows = 0;
  std::vector<int64_t> pair_count;      // [rows]
  std::vector<double> signal;           // [rows]: summed over heads
  std::vector<double> signal_per_head;  // [heads, rows]; empty if heads == 1
  bool operator==(const TableSignal&) const = default;
};

struct SignalStats {
  // The updates counted are first_step .. first_step + steps - 1: a run
  // resumed from a checkpoint without statistics counts from its step on.
  int64_t first_step = 0, steps = 0;
  std::vector<TableSignal> tables;  // as RelativeTables(config)
  bool operator==(const SignalStats&) const = default;
};

// Zero statistics for the tables of `config`, starting at `first_step`.
SignalStats MakeSignalStats(const model::ModelConfig& config,
                            int64_t first_step);

// Adds one update: the pair counts of `batch` and the squared gradient
// norms that model's last Backward left in each table's grad. `tables` is
// RelativeTables(model.config()), matching stats->tables.
void AccumulateSignal(const model::Batch& batch,
                      const model::Transformer& model,
                      const std::vector<RelativeTable>& tables,
                      SignalStats* stats);

// The statistics as the checkpoint's signal file: JSON (counts as integers,
// signals as shortest round-trip decimals, so reading gives the same bits):
//   {"format": "relpos-signal", "version": 1, "step": N,
//    "first_step": S, "steps": N - S,
//    "tables": [{"parameter": ..., "heads": H, "rows": R,
//                "pair_count": [...], "signal": [...],
//                "signal_per_head": [[...], ...]}, ...]}
std::string EncodeSignalStats(const SignalStats& stats, int64_t step);
// Parses and validates untrusted text against the tables `layout` holds
// (MakeSignalStats of the model config: names, heads, rows) and the
// checkpoint's step: FormatError "<source>: <problem>". The text is bounded
// by MaxSignalFileBytes(layout) before it is parsed.
SignalStats DecodeSignalStats(const std::string& text,
                              const std::string& source,
                              const SignalStats& layout, int64_t step);
// The same, against MakeSignalStats(config, 0).
SignalStats DecodeSignalStats(const std::string& text,
                              const std::string& source,
                              const model::ModelConfig& config, int64_t step);
// The largest signal file a layout's statistics can take (what the reader
// accepts): twice what EncodeSignalStats writes at most.
int64_t MaxSignalFileBytes(const SignalStats& layout);

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_SIGNAL_STATS_H_
