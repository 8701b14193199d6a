#include "train/batching.h"

#include <algorithm>
#include <vector>

namespace relpos::train {

namespace {

// The sources of pair examples, padded (pad token 0) to the longest, at
// least 1 (a model::Batch's source_length).
void PackSources(const std::vector<tasks::Example>& examples,
                 model::Batch* b) {
  b->source_length = 1;
  for (const auto& e : examples) {
    b->source_length =
        std::max<int64_t>(b->source_length, static_cast<int64_t>(e.source.size()));
  }
  b->source_tokens.assign(static_cast<size_t>(b->batch * b->source_length), 0);
  b->source_lengths.resize(static_cast<size_t>(b->batch));
  for (int64_t i = 0; i < b->batch; ++i) {
    const auto& src = examples[static_cast<size_t>(i)].source;
    std::copy(src.begin(), src.end(),
              b->source_tokens.begin() + i * b->source_length);
    b->source_lengths[static_cast<size_t>(i)] =
        static_cast<int64_t>(src.size());
  }
}

}  // namespace

model::Batch PackExamples(const std::vector<tasks::Example>& examples,
                          bool with_source) {
  model::Batch b;
  b.batch = static_cast<int64_t>(examples.size());
  for (const auto& e : examples) {
    b.length =
        std::max<int64_t>(b.length, static_cast<int64_t>(e.tokens.size()));
  }
  b.tokens.assign(static_cast<size_t>(b.batch * b.length), 0);
  b.targets.assign(static_cast<size_t>(b.batch * b.length), -1);
  b.lengths.resize(static_cast<size_t>(b.batch));
  for (int64_t i = 0; i < b.batch; ++i) {
    const auto& e = examples[static_cast<size_t>(i)];
    std::copy(e.tokens.begin(), e.tokens.end(),
              b.tokens.begin() + i * b.length);
    std::copy(e.targets.begin(), e.targets.end(),
              b.targets.begin() + i * b.length);
    b.lengths[static_cast<size_t>(i)] = static_cast<int64_t>(e.tokens.size());
  }
  if (with_source) PackSources(examples, &b);
  return b;
}

model::Batch MakeTrainBatch(const DataSource& data, int64_t batch_size,
                            int64_t min_length, int64_t max_length, Rng& rng) {
  std::vector<tasks::Example> examples;
  examples.reserve(static_cast<size_t>(batch_size));
  for (int64_t i = 0; i < batch_size; ++i) {
    examples.push_back(data.SampleTrain(min_length, max_length, rng));
  }
  return PackExamples(examples, data.pairs() != nullptr);
}

model::Batch MakeFixedBatch(const DataSource& data, int64_t count,
                            int64_t length, bool held_out, Rng& rng) {
  std::vector<tasks::Example> examples;
  examples.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    examples.push_back(data.Sample(length, held_out, rng));
  }
  return PackExamples(examples, data.pairs() != nullptr);
}

}  // namespace relpos::train
