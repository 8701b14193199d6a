#include "train/validation.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"
#include "model/positions.h"
#include "data/tasks/pair_source.h"
#include "train/batching.h"
#include "data/translate/translation_task.h"

namespace relpos::train {

HeldOutSet::HeldOutSet(const DataSource& data, const model::ModelConfig& model,
                       int64_t batch_size, int64_t tokens_per_pair) {
  const auto* task =
      dynamic_cast<const translate::TranslationTask*>(data.pairs());
  RELPOS_CHECK_ARG(task != nullptr,
                   "a held-out evaluation needs task translate (got task '"
                       << data.name() << "')");
  RELPOS_CHECK_ARG(batch_size >= 1 && tokens_per_pair >= 1,
                   "held-out batch size and tokens per pair must be >= 1");
  const tasks::PairTokens special = task->tokens();
  std::vector<tasks::Example> examples;
  for (const translate::TokenisedPair& p : task->test()) {
    const int64_t source = static_cast<int64_t>(p.source_ids.size());
    const int64_t decoder = static_cast<int64_t>(p.target_ids.size()) + 1;
    if (model::HasLearnedInputTable(model) &&
        (source > model.scheme.max_len || decoder > model.scheme.max_len)) {
      ++skipped_;
      continue;
    }
    examples.push_back(tasks::TeacherForced(
        {.source = p.source_ids, .target = p.target_ids}, special));
  }
  RELPOS_CHECK_ARG(!examples.empty(),
                   "no held-out pair fits the model (" << skipped_
                                                       << " are longer than "
                                                          "its max_len)");
  pairs_ = static_cast<int64_t>(examples.size());
  // Similar lengths together (less padding); stable, so the order, and
  // with it the loss's sums, is the split's for equal lengths.
  auto size = [&](size_t i) {
    return static_cast<int64_t>(
        std::max(examples[i].source.size(), examples[i].tokens.size()));
  };
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return size(a) < size(b); });
  const int64_t budget = batch_size * tokens_per_pair;
  std::vector<tasks::Example> batch;
  int64_t longest = 0;
  for (size_t i : order) {
    const int64_t n = size(i);
    const int64_t count = static_cast<int64_t>(batch.size());
    if (!batch.empty() &&
        (count == batch_size || (count + 1) * std::max(longest, n) > budget)) {
      batches_.push_back(PackExamples(batch, /*with_source=*/true));
      batch.clear();
      longest = 0;
    }
    batch.push_back(std::move(examples[i]));
    longest = std::max(longest, n);
  }
  batches_.push_back(PackExamples(batch, /*with_source=*/true));
}

double HeldOutSet::Loss(model::Transformer& model) const {
  model::Metrics metrics;
  for (const model::Batch& b : batches_) model.Evaluate(b, &metrics, nullptr);
  return metrics.loss_sum /
         static_cast<double>(std::max<int64_t>(metrics.tokens, 1));
}

}  // namespace relpos::train
