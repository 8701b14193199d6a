// Batches of examples from a DataSource, padded to their longest sequence
// (pair data: sources and decoder sequences each to their own longest).
#ifndef RELPOS_SRC_TRAIN_BATCHING_H_
#define RELPOS_SRC_TRAIN_BATCHING_H_

#include <cstdint>
#include <vector>

#include "base/rng.h"
#include "model/transformer.h"
#include "train/data_source.h"

namespace relpos::train {

// A batch of `batch_size` examples whose sizes are drawn uniformly from
// [min_length, max_length], padded to the longest (pad token 0, target -1).
model::Batch MakeTrainBatch(const DataSource& data, int64_t batch_size,
                            int64_t min_length, int64_t max_length, Rng& rng);
// `examples` padded into one batch (pad token 0, target -1); with_source
// for pair data (the sources padded apart).
model::Batch PackExamples(const std::vector<tasks::Example>& examples,
                          bool with_source);
// `count` examples of exactly size `length` (evaluation).
model::Batch MakeFixedBatch(const DataSource& data, int64_t count,
                            int64_t length, bool held_out, Rng& rng);

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_BATCHING_H_
