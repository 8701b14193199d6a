// Test-only helpers shared by the training tests (trainer_test.cc,
// checkpoint_test.cc, seq2seq_train_test.cc).
#ifndef RELPOS_SRC_TRAIN_TRAIN_TEST_UTIL_H_
#define RELPOS_SRC_TRAIN_TRAIN_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "train/evaluation.h"
#include "train/trainer.h"

namespace relpos::train::testing {

// Two checkpoints hold the same parameters and optimiser moments, bit for
// bit.
inline void ExpectSameTensors(const Checkpoint& x, const Checkpoint& y) {
  ASSERT_EQ(x.parameters.size(), y.parameters.size());
  for (size_t i = 0; i < x.parameters.size(); ++i) {
    EXPECT_EQ(x.parameters[i].data, y.parameters[i].data)
        << x.parameters[i].name;
  }
  ASSERT_EQ(x.optimizer.size(), y.optimizer.size());
  for (size_t i = 0; i < x.optimizer.size(); ++i) {
    EXPECT_EQ(x.optimizer[i].data, y.optimizer[i].data) << x.optimizer[i].name;
  }
}

// The model saved in `dir` by `trained` comes back under the same names
// with the same values, and evaluates exactly like it at `lengths`.
inline void ExpectLoadsAndEvaluatesIdentically(
    Trainer& trained, const std::string& dir,
    const std::vector<int64_t>& lengths) {
  TrainConfig loaded_tc;
  TrainState st;
  model::Transformer loaded = LoadModel(dir, &loaded_tc, &st);
  EXPECT_EQ(loaded.config().position, trained.model_config().position);
  EXPECT_EQ(loaded.config().arch, trained.model_config().arch);
  const auto& want = trained.model().parameters();
  ASSERT_EQ(loaded.parameters().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(loaded.parameters()[i].name, want[i].name);
    EXPECT_EQ(loaded.parameters()[i].value, want[i].value) << want[i].name;
  }
  auto data = MakeDataSource(loaded_tc.data);
  EvalConfig ec{.lengths = lengths, .sequences_per_length = 8, .batch_size = 8};
  const auto a = EvaluateByLength(trained.model(), *data, ec);
  const auto b = EvaluateByLength(loaded, *data, ec);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].loss, b[i].loss);
    EXPECT_EQ(a[i].token_accuracy, b[i].token_accuracy);
  }
}

}  // namespace relpos::train::testing

#endif  // RELPOS_SRC_TRAIN_TRAIN_TEST_UTIL_H_
