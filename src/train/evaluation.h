// Evaluation of a model by sequence length: accuracy (per token and per
// sequence) and loss at each length, on a fixed stream of examples.
#ifndef RELPOS_SRC_TRAIN_EVALUATION_H_
#define RELPOS_SRC_TRAIN_EVALUATION_H_

#include <cstdint>
#include <vector>

#include "model/transformer.h"
#include "relpos/lab/training.h"
#include "train/data_source.h"
#include "train/progress.h"

namespace relpos::train {

// Evaluation examples come from Rng(seed) mixed with the length, a stream
// apart from every training stream, so all models evaluated with the same
// EvalConfig see the same examples. The seed and the result per length are
// the public API's (relpos/lab/training.h).
using relpos::kDefaultEvalSeed;
using LengthResult = relpos::LengthMetrics;

struct EvalConfig {
  std::vector<int64_t> lengths;
  int64_t sequences_per_length = 128;
  int64_t batch_size = 64;
  uint64_t seed = kDefaultEvalSeed;
};

// Checks that the model can run sequences of these lengths (InvalidArgument
// naming the setting 'lengths' otherwise: beyond the learned table, beyond
// the data's range).
void CheckEvalLengths(const model::ModelConfig& model, const DataSource& data,
                      const std::vector<int64_t>& lengths);

// Evaluates `model` at every length; `progress` (optional) advances by one
// unit per batch.
std::vector<LengthResult> EvaluateByLength(model::Transformer& model,
                                           const DataSource& data,
                                           const EvalConfig& config,
                                           Progress* progress = nullptr);

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_EVALUATION_H_
