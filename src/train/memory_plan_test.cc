// The allocation planner (memory_plan.h): its counts follow the model's own
// tensors, grow with what a run allocates, and every entry point refuses
// what does not fit before allocating it.
#include "model/memory_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "model/transformer.h"
#include "relpos/error.h"
#include "support/subprocess.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace relpos::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using model::AvailableMemory;
using model::CheckMemory;
using model::FormatBytes;
using model::MemoryBudget;
using model::MemoryLimit;
using model::MemoryPlan;
using model::PlanCheckpointLoad;
using model::PlanGeneration;
using model::PlanInference;
using model::PlanModel;
using model::PlanTraining;
using model::PlanTranslation;

model::ModelConfig Small(model::PositionScheme p) {
  model::ModelConfig c;
  c.vocab_size = 10;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 32;
  c.position = p;
  c.scheme.max_distance = 4;
  return c;
}

// Sets RELPOS_MEMORY_LIMIT for one scope.
class ScopedLimit {
 public:
  explicit ScopedLimit(const char* value) { ::setenv(kName, value, 1); }
  ~ScopedLimit() { ::unsetenv(kName); }

 private:
  static constexpr const char* kName = "RELPOS_MEMORY_LIMIT";
};

// ParameterShapes lists exactly the tensors a model holds, for every
// scheme, without building one.
TEST(MemoryPlan, ParameterShapesAreTheModelsTensors) {
  for (const auto p :
       {model::PositionScheme::kNone, model::PositionScheme::kLearned,
        model::PositionScheme::kShaw, model::PositionScheme::kShawAsym,
        model::PositionScheme::kShawLog, model::PositionScheme::kT5,
        model::PositionScheme::kAlibi, model::PositionScheme::kRope,
        model::PositionScheme::kXl}) {
    const model::ModelConfig c = Small(p);
    const model::Transformer t(c);
    const std::vector<model::ParameterShape> shapes =
        model::ParameterShapes(c);
    ASSERT_EQ(shapes.size(), t.parameters().size()) << model::ToString(p);
    int64_t n = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(shapes[i].name, t.parameters()[i].name);
      EXPECT_EQ(shapes[i].shape, t.parameters()[i].shape);
      n += shapes[i].numel();
    }
    EXPECT_EQ(n, t.NumParameters());
    // Values and gradients, plus the largest tensor's initial values.
    EXPECT_GE(PlanModel(c).total(), 8.0 * static_cast<double>(n));
    EXPECT_LE(PlanModel(c).total(), 12.0 * static_cast<double>(n));
  }
}

// A seq2seq model: its encoder's and decoder's tensors (and the tied
// embedding) are what ParameterShapes lists, and the plans count the
// decoder's blocks and their cross-attention.
TEST(MemoryPlan, Seq2seqModelsCountBothStacks) {
  for (const auto p : {model::PositionScheme::kShaw, model::PositionScheme::kT5,
                       model::PositionScheme::kRope}) {
    model::ModelConfig c = Small(p);
    c.arch = model::Arch::kSeq2seq;
    c.decoder_layers = 3;
    const model::Transformer t(c);
    const std::vector<model::ParameterShape> shapes =
        model::ParameterShapes(c);
    ASSERT_EQ(shapes.size(), t.parameters().size()) << model::ToString(p);
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(shapes[i].name, t.parameters()[i].name);
      EXPECT_EQ(shapes[i].shape, t.parameters()[i].shape);
    }
    EXPECT_GE(PlanModel(c).total(),
              8.0 * static_cast<double>(t.NumParameters()));
    model::ModelConfig deeper = c;
    deeper.decoder_layers = 6;
    // The activations of one batch grow with the decoder's blocks.
    auto activations = [](const MemoryPlan& plan) {
      for (const auto& [name, bytes] : plan.parts) {
        if (name.rfind("activations", 0) == 0) return bytes;
      }
      return 0.0;
    };
    EXPECT_GT(activations(PlanTraining(deeper, 4, 16, 1)),
              activations(PlanTraining(c, 4, 16, 1)));
    model::ModelConfig decoder = Small(p);
    decoder.layers = 3;
    decoder.arch = model::Arch::kDecoder;
    // 2 encoder + 3 decoder blocks with cross-attention keep more than a
    // 3-block decoder.
    EXPECT_GT(activations(PlanTraining(c, 4, 16, 1)),
              activations(PlanTraining(decoder, 4, 16, 1)));
    EXPECT_GT(activations(PlanInference(c, 4, 16, 1)),
              activations(PlanInference(decoder, 4, 16, 1)));
    // Beam search: the caches grow with the beam, the sentences and the
    // decoding steps.
    const double beam4 = PlanTranslation(c, 2, 8, 4, 16, 1).total();
    EXPECT_GT(PlanTranslation(c, 2, 8, 8, 16, 1).total(), beam4);
    EXPECT_GT(PlanTranslation(c, 4, 8, 4, 16, 1).total(), beam4);
    EXPECT_GT(PlanTranslation(c, 2, 8, 4, 32, 1).total(), beam4);
    EXPECT_GT(PlanTranslation(deeper, 2, 8, 4, 16, 1).total(), beam4);
    if (p != model::PositionScheme::kRope) {
      // The kernel's per-thread table buffers see both sides' tables.
      auto tables = [](const MemoryPlan& plan) {
        for (const auto& [name, bytes] : plan.parts) {
          if (name == "kernel per-thread buffers") return bytes;
        }
        return 0.0;
      };
      EXPECT_GT(tables(PlanTraining(c, 4, 16, 1)),
                tables(PlanTraining(Small(model::PositionScheme::kNone), 4, 16,
                                    1)));
    }
  }
}

TEST(MemoryPlan, GrowsWithWhatARunAllocates) {
  const model::ModelConfig c = Small(model::PositionScheme::kShaw);
  const double small = PlanTraining(c, 4, 16, 1).total();
  EXPECT_GT(PlanTraining(c, 8, 16, 1).total(), small);
  EXPECT_GT(PlanTraining(c, 4, 32, 1).total(), small);
  EXPECT_GT(PlanTraining(c, 4, 16, 4).total(), small);
  EXPECT_GT(PlanTraining(c, 4, 16, 4).reserved,
            PlanTraining(c, 4, 16, 1).reserved);
  EXPECT_GT(PlanInference(c, 4, 64, 1).total(), PlanInference(c, 4, 8, 1).total());
  EXPECT_GT(PlanGeneration(c, 1, 4096, true, 1).total(),
            PlanGeneration(c, 1, 64, true, 1).total());
  EXPECT_GT(PlanGeneration(c, 16, 64, true, 1).total(),
            PlanGeneration(c, 1, 64, true, 1).total());
  // The config: 7 layers of 2^20-distance tables, ~470M floats.
  model::ModelConfig big = Small(model::PositionScheme::kShaw);
  big.scheme.max_distance = 1 << 20;
  big.layers = 7;
  big.d_model = 64;
  big.heads = 4;
  EXPECT_GT(PlanModel(big).total(), 3.7e9);
  EXPECT_EQ(FormatBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(FormatBytes(512), "512 bytes");
}

TEST(MemoryPlan, RefusalsNameTheLimitAndTheLargestParts) {
  const model::ModelConfig c = Small(model::PositionScheme::kShaw);
  EXPECT_NO_THROW(CheckMemory(PlanTraining(c, 4, 16, 1)));
  {
    const ScopedLimit limit("64K");
    try {
      CheckMemory(PlanTraining(c, 64, 1024, 1));
      FAIL();
    } catch (const ResourceError& e) {
      EXPECT_THAT(e.what(), HasSubstr("training needs about"));
      EXPECT_THAT(e.what(), HasSubstr("activations of one batch (64 x 1024"));
      EXPECT_THAT(e.what(), HasSubstr("RELPOS_MEMORY_LIMIT=64K"));
      EXPECT_THAT(e.what(), HasSubstr("reduce batch_size"));
    }
  }
  {
    const ScopedLimit limit("a lot");
    EXPECT_THROW(AvailableMemory(), InvalidArgument);
  }
  {
    const ScopedLimit limit("1T");
    EXPECT_EQ(AvailableMemory().total.bytes, 1099511627776.0);
  }
}

// Under RLIMIT_AS (set in a child), the budget is the address space left,
// and reading a checkpoint whose config.json asks for 7.5 GB is refused in
// milliseconds, before any tensor is read or any model built.
// For an encoder and a seq2seq model (whose decoder the config makes deep).
TEST(MemoryPlan, ACheckpointThatCannotFitIsRefusedBeforeBuilding) {
  for (const bool seq2seq : {false, true}) {
    const fs::path dir =
        fs::temp_directory_path() /
        ("relpos_memory_plan_test_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    TrainConfig tc;
    tc.data.task = seq2seq ? "s2s_copy" : "reverse";
    tc.train_min_length = 1;
    tc.train_max_length = 4;
    tc.steps = 2;
    tc.warmup_steps = 1;
    tc.batch_size = 2;
    model::ModelConfig mc = Small(model::PositionScheme::kShaw);
    if (seq2seq) mc.arch = model::Arch::kSeq2seq;
    Trainer t(mc, tc);
    t.Run({.checkpoint_dir = dir.string()});
    nlohmann::json j;
    {
      std::ifstream in(dir / "config.json");
      std::stringstream ss;
      ss << in.rdbuf();
      j = nlohmann::json::parse(ss.str());
    }
    j["model"]["max_distance"] = 1 << 20;
    j["model"][seq2seq ? "decoder_layers" : "layers"] = 7;
    j["model"]["d_model"] = 64;
    std::ofstream(dir / "config.json") << j.dump();
    const relpos::testing::ChildResult r = relpos::testing::RunInChild([&] {
      const rlimit lim{uint64_t{2} << 30, uint64_t{2} << 30};
      ::setrlimit(RLIMIT_AS, &lim);
      const MemoryBudget b = AvailableMemory();
      if (b.address_space.bytes <= 0 || b.address_space.bytes > 2.2e9) {
        return 2;
      }
      try {
        ReadCheckpoint(dir.string(), false);
      } catch (const ResourceError& e) {
        return std::string(e.what()).find("RLIMIT_AS") != std::string::npos
                   ? 0
                   : 3;
      }
      return 1;
    });
    EXPECT_FALSE(r.timed_out) << seq2seq;
    EXPECT_EQ(r.exit_code, 0) << seq2seq;
    EXPECT_LT(r.seconds, 5.0) << seq2seq;
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace relpos::train
