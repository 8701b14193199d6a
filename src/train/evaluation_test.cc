// ScoreCached, the held-out metrics of the cached decoder (`relpos eval
// --compute-type int8` for task lm), against the forward pass.
#include "train/evaluation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "base/rng.h"
#include "model/model_test_util.h"
#include "model/quantized_linears.h"

namespace relpos::train {
namespace {

using model::Arch;
using model::Metrics;
using model::testing::AllSchemes;
using model::testing::TinyConfig;

// Three sequences of 8 tokens, each target the next token (an lm batch),
// with one position left unscored.
model::Batch LmBatch(int64_t vocab) {
  model::Batch b;
  b.batch = 3;
  b.length = 8;
  Rng rng(3);
  for (int64_t i = 0; i < b.batch * (b.length + 1); ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng.Below(vocab)));
  }
  std::vector<int32_t> stream = b.tokens;
  b.tokens.clear();
  for (int64_t s = 0; s < b.batch; ++s) {
    for (int64_t i = 0; i < b.length; ++i) {
      b.tokens.push_back(stream[s * (b.length + 1) + i]);
      b.targets.push_back(stream[s * (b.length + 1) + i + 1]);
    }
  }
  b.targets[5] = -1;
  b.lengths.assign(b.batch, b.length);
  return b;
}

TEST(ScoreCached, Float32GivesTheForwardPassMetrics) {
  for (const auto position : AllSchemes()) {
    const model::Transformer m(TinyConfig(Arch::kDecoder, position));
    model::Transformer forward(m.config());
    const model::Batch batch = LmBatch(m.config().vocab_size);
    Metrics want, got;
    forward.Evaluate(batch, &want, nullptr);
    ScoreCached(m, nullptr, batch, &got);
    SCOPED_TRACE(model::ToString(position));
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-4 * (1 + want.loss_sum));
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.tokens, 23);
    EXPECT_EQ(got.correct_tokens, want.correct_tokens);
    EXPECT_EQ(got.sequences, want.sequences);
    EXPECT_EQ(got.correct_sequences, want.correct_sequences);
  }
}

// Int8 (and int8_a8's 8-bit activations) against float32.
TEST(ScoreCached, Int8StaysCloseToFloat32) {
  for (const auto type : {model::ComputeType::kInt8,
                          model::ComputeType::kInt8A8}) {
    for (const auto position : AllSchemes()) {
      SCOPED_TRACE(model::ToString(position));
      SCOPED_TRACE(static_cast<int>(type));
      model::Transformer m(TinyConfig(Arch::kDecoder, position));
      const model::QuantizedLinears quantized(m, type);
      const model::Batch batch = LmBatch(m.config().vocab_size);
      Metrics f32, i8;
      ScoreCached(m, nullptr, batch, &f32);
      ScoreCached(m, &quantized, batch, &i8);
      EXPECT_EQ(i8.tokens, f32.tokens);
      EXPECT_NE(i8.loss_sum, f32.loss_sum);  // the int8 products did run
      EXPECT_NEAR(i8.loss_sum / i8.tokens, f32.loss_sum / f32.tokens, 0.02);
    }
  }
}

TEST(ScoreCached, RefusesEncodersAndSeq2seq) {
  for (const Arch arch : {Arch::kEncoder, Arch::kSeq2seq}) {
    model::ModelConfig c = TinyConfig(arch, model::PositionScheme::kShaw);
    if (arch == Arch::kSeq2seq) c.decoder_layers = 1;
    const model::Transformer m(c);
    Metrics metrics;
    EXPECT_THROW(ScoreCached(m, nullptr, LmBatch(c.vocab_size), &metrics),
                 InvalidArgument);
  }
}

}  // namespace
}  // namespace relpos::train
