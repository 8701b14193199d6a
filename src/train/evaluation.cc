#include "train/evaluation.h"

#include <algorithm>
#include <cmath>

#include <optional>

#include "base/check.h"
#include "base/rng.h"
#include "model/arch.h"
#include "model/decoder_session.h"
#include "model/nn/cross_entropy.h"
#include "model/positions.h"
#include "train/batching.h"

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

namespace {

// ScoreCached's models: decoders (InvalidArgument otherwise).
void CheckCachedDecoder(const model::ModelConfig& c) {
  const model::ArchInfo& arch = model::Describe(c.arch);
  RELPOS_CHECK_ARG(arch.causal && !arch.source,
                   "compute_type int8: held-out metrics in int8 come from the "
                   "cached decoder, which needs a decoder model (arch = "
                   "decoder); this model's arch is "
                       << model::ToString(c.arch));
}

}  // namespace

void ScoreCached(const model::Transformer& model,
                 const model::QuantizedLinears* quantized,
                 const model::Batch& batch, model::Metrics* metrics) {
  const model::ModelConfig& c = model.config();
  CheckCachedDecoder(c);
  const int64_t B = batch.batch, L = batch.length, V = c.vocab_size;
  if (B == 0 || L == 0) return;
  model::DecoderSession session(model, B, L, quantized);
  std::vector<float> logits;
  std::vector<int32_t> targets(B), predictions(B);
  std::vector<char> scored(B, 0), wrong(B, 0);
  for (int64_t i = 0; i < L; ++i) {
    if (i == 0) {
      std::vector<std::vector<int32_t>> first(B);
      for (int64_t b = 0; b < B; ++b) first[b] = {batch.tokens[b * L]};
      session.Append(first, &logits);
    } else {
      std::vector<int32_t> step(B);
      for (int64_t b = 0; b < B; ++b) step[b] = batch.tokens[b * L + i];
      session.Step(step, &logits);
    }
    for (int64_t b = 0; b < B; ++b) {
      targets[b] = batch.targets.empty() ? -1 : batch.targets[b * L + i];
    }
    const nn::CrossEntropyResult r = nn::CrossEntropyForward<float>(
        logits.data(), targets.data(), predictions.data(), {B, V});
    metrics->loss_sum += r.loss_sum;
    metrics->tokens += r.count;
    metrics->correct_tokens += r.correct;
    for (int64_t b = 0; b < B; ++b) {
      if (targets[b] < 0) continue;
      scored[b] = 1;
      if (predictions[b] != targets[b]) wrong[b] = 1;
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    metrics->sequences += scored[b];
    metrics->correct_sequences += scored[b] && !wrong[b];
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
  std::optional<model::QuantizedLinears> quantized;
  if (config.compute_type != model::ComputeType::kFloat32) {
    CheckCachedDecoder(model.config());
    quantized.emplace(model, config.compute_type);
  }
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
      if (quantized) {
        ScoreCached(model, &*quantized, batch, &metrics);
      } else {
        model.Evaluate(batch, &metrics, nullptr);
      }
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
