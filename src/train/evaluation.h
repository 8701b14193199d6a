// Evaluation of a model by sequence length: accuracy (per token and per
// sequence) and loss at each length, on a fixed stream of examples.
#ifndef RELPOS_SRC_TRAIN_EVALUATION_H_
#define RELPOS_SRC_TRAIN_EVALUATION_H_

#include <cstdint>
#include <vector>

#include "model/quantized_linears.h"
#include "model/transformer.h"
#include "relpos/train/results.h"
#include "train/data_source.h"
#include "train/progress.h"

namespace relpos::train {

// Evaluation examples come from Rng(seed) mixed with the length, a stream
// apart from every training stream, so all models evaluated with the same
// EvalConfig see the same examples. The seed and the result per length are
// the public API's (relpos/train/results.h).
using relpos::kDefaultEvalSeed;
using LengthResult = relpos::LengthMetrics;

struct EvalConfig {
  std::vector<int64_t> lengths;
  int64_t sequences_per_length = 128;
  int64_t batch_size = 64;
  uint64_t seed = kDefaultEvalSeed;
  // kInt8 or kInt8A8 (decoder models only): the metrics of the cached
  // decoder with int8 weights (ScoreCached), what `relpos generate
  // --compute-type int8` (or int8_a8) runs, instead of the float32 forward
  // pass.
  model::ComputeType compute_type = model::ComputeType::kFloat32;
};

// Adds to *metrics what model.Evaluate(batch) adds, computed by the cached
// decoder (model::DecoderSession: the first token of every sequence, then
// one step per position) with `quantized`'s int8 weights (nullptr: float32;
// the same metrics as Evaluate up to the order of the sums). Decoder models
// only (InvalidArgument otherwise); every sequence is batch.length tokens
// long, and positions without a target are not scored.
void ScoreCached(const model::Transformer& model,
                 const model::QuantizedLinears* quantized,
                 const model::Batch& batch, model::Metrics* metrics);

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
