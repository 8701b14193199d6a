#include "train/evaluation.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "model/positions.h"
#include "train/batching.h"
#include "base/rng.h"

namespace relpos::train {

void CheckEvalLengths(const model::ModelConfig& m, const DataSource& data,
                      const std::vector<int64_t>& lengths) {
  RELPOS_CHECK_ARG(!lengths.empty(), "lengths must name at least one length");
  for (int64_t n : lengths) {
    RELPOS_CHECK_ARG(n >= data.min_length() && n <= data.max_length(),
                     "lengths: " << n << " is outside [" << data.min_length()
                                   << ", " << data.max_length()
                                   << "] for task '" << data.name() << "'");
    const int64_t tokens = data.SequenceLength(n);
    RELPOS_CHECK_ARG(
        !model::HasLearnedInputTable(m) || tokens <= m.scheme.max_len,
        "lengths: length " << n << " needs " << tokens
                             << " positions but the learned table "
                                "has max_len "
                             << m.scheme.max_len << " rows");
  }
}

std::vector<LengthResult> EvaluateByLength(model::Transformer& model,
                                           const DataSource& data,
                                           const EvalConfig& config,
                                           Progress* progress) {
  RELPOS_CHECK_ARG(config.sequences_per_length >= 1,
                   "sequences per length must be >= 1 (got "
                       << config.sequences_per_length << ")");
  RELPOS_CHECK_ARG(config.batch_size >= 1, "eval batch size must be >= 1 (got "
                                               << config.batch_size << ")");
  CheckEvalLengths(model.config(), data, config.lengths);
  std::vector<LengthResult> results;
  int64_t done = 0, tokens_seen = 0;
  for (int64_t length : config.lengths) {
    // One stream per length: the examples at a length do not depend on which
    // other lengths are evaluated.
    Rng rng(base::DeriveSeed(config.seed, static_cast<uint64_t>(length)));
    model::Metrics metrics;
    for (int64_t start = 0; start < config.sequences_per_length;
         start += config.batch_size) {
      const int64_t count =
          std::min(config.batch_size, config.sequences_per_length - start);
      const model::Batch batch =
          MakeFixedBatch(data, count, length, /*held_out=*/true, rng);
      model.Evaluate(batch, &metrics, nullptr);
      tokens_seen += batch.batch * batch.length;
      if (progress) progress->Update(++done, -1.0, tokens_seen);
    }
    LengthResult r;
    r.length = length;
    r.sequence_length = data.SequenceLength(length);
    r.tokens = metrics.tokens;
    r.sequences = metrics.sequences;
    const double tok =
        static_cast<double>(std::max<int64_t>(metrics.tokens, 1));
    r.token_accuracy = static_cast<double>(metrics.correct_tokens) / tok;
    r.sequence_accuracy =
        static_cast<double>(metrics.correct_sequences) /
        static_cast<double>(std::max<int64_t>(metrics.sequences, 1));
    r.loss = metrics.loss_sum / tok;
    r.bits_per_token = r.loss / std::log(2.0);
    results.push_back(r);
  }
  return results;
}

}  // namespace relpos::train
