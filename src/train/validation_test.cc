// The validation curve of a translation run (TrainConfig::eval_every,
// patience; docs/training.md, "Validation curve and early stopping"): the
// held-out loss, the points and where they are taken, the same weights with
// the curve as without it, the patience rule's step, the checkpoint's
// "validation" (written, read strictly, absent without the curve), resume,
// and the settings' checks.
#include "train/validation.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "relpos/error.h"
#include "support/gettext_files.h"
#include "train/checkpoint.h"
#include "train/train_test_util.h"
#include "train/trainer.h"
#include "data/translate/translation_task.h"

namespace relpos::train {
namespace {

namespace fs = std::filesystem;

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("relpos_validation_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "toy.tsv", std::ios::binary)
        << relpos::testing::ToyCorpus(1, 300);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string P(const std::string& name) const {
    return (root_ / name).string();
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(root_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  // A tiny translation run (about a second): one-clause sources train, the
  // held-out split has every length. Dropout on, so that a stray draw from
  // the dropout stream would show.
  TrainConfig Train(int64_t steps, int64_t eval_every) const {
    TrainConfig t;
    t.data.task = "translate";
    t.data.corpus_path = P("toy.tsv");
    t.data.sentencepiece_size = 48;
    t.train_min_length = 1;
    t.train_max_length = 4;
    t.steps = steps;
    t.batch_size = 8;
    t.lr = 1e-2;
    t.warmup_steps = 2;
    t.checkpoint_every = 0;
    t.label_smoothing = kSeq2seqLabelSmoothing;
    t.seed = 3;
    t.eval_every = eval_every;
    return t;
  }
  static model::ModelConfig SmallModel() {
    model::ModelConfig m;
    m.arch = model::Arch::kSeq2seq;
    m.d_model = 16;
    m.heads = 2;
    m.layers = 1;
    m.d_ff = 32;
    m.dropout = 0.1;
    return m;
  }
  fs::path root_;
};

std::vector<int64_t> Steps(const std::vector<ValidationPoint>& curve) {
  std::vector<int64_t> steps;
  for (const ValidationPoint& p : curve) steps.push_back(p.step);
  return steps;
}

void ExpectSameCurve(const std::vector<ValidationPoint>& a,
                     const std::vector<ValidationPoint>& b) {
  ASSERT_EQ(Steps(a), Steps(b));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].loss, b[i].loss) << a[i].step;  // bit for bit
    EXPECT_EQ(a[i].pairs, b[i].pairs);
    EXPECT_EQ(a[i].bleu, b[i].bleu);
    EXPECT_EQ(a[i].bleu_sentences, b[i].bleu_sentences);
  }
}

TEST_F(ValidationTest, HeldOutLossIsThePlainLossOfEveryHeldOutPair) {
  Trainer t(SmallModel(), Train(10, 0));
  t.Run({});
  const auto* task =
      dynamic_cast<const translate::TranslationTask*>(t.data().pairs());
  ASSERT_NE(task, nullptr);
  // Small batches and one pair per batch: the same pairs, the same mean up
  // to the order of the sums.
  const HeldOutSet batched(t.data(), t.model_config(), 8, 20);
  const HeldOutSet single(t.data(), t.model_config(), 1, 1);
  EXPECT_EQ(batched.pairs(), static_cast<int64_t>(task->test().size()));
  EXPECT_EQ(batched.skipped(), 0);
  const double loss = batched.Loss(t.model());
  EXPECT_GT(loss, 0.0);
  EXPECT_NEAR(loss, single.Loss(t.model()), 1e-5 * loss);
  EXPECT_EQ(loss, batched.Loss(t.model()));  // no state changes
  // Learned positions too short for the longer pairs: those are skipped.
  model::ModelConfig learned = t.model_config();
  learned.position = model::PositionScheme::kLearned;
  std::vector<int64_t> sizes;  // the positions each pair needs
  for (const translate::TokenisedPair& p : task->test()) {
    sizes.push_back(std::max<int64_t>(
        static_cast<int64_t>(p.source_ids.size()),
        static_cast<int64_t>(p.target_ids.size()) + 1));
  }
  std::sort(sizes.begin(), sizes.end());
  learned.scheme.max_len = sizes[sizes.size() / 2];
  const HeldOutSet some(t.data(), learned, 8, 20);
  EXPECT_EQ(some.skipped(),
            std::count_if(sizes.begin(), sizes.end(), [&](int64_t n) {
              return n > learned.scheme.max_len;
            }));
  EXPECT_GT(some.skipped(), 0);
  EXPECT_EQ(some.pairs() + some.skipped(), batched.pairs());
  // Only a translation corpus has this held-out split.
  const auto other = MakeDataSource(DataConfig{.task = "s2s_copy"});
  EXPECT_THROW(HeldOutSet(*other, t.model_config(), 8, 20), InvalidArgument);
}

// The curve's points come every eval_every updates and after the last; a
// run with them trains the same weights, bit for bit, as one without (the
// BLEU hook runs too, and the losses per step agree).
TEST_F(ValidationTest, CurveLeavesTrainingUnchanged) {
  Trainer plain(SmallModel(), Train(23, 0));
  const RunResult a = plain.Run({.checkpoint_dir = P("plain")});
  Trainer curved(SmallModel(), Train(23, 5));
  int hook_calls = 0;
  RunOptions o{.checkpoint_dir = P("curved")};
  o.score_bleu = [&](ValidationPoint* p) {
    ++hook_calls;
    p->bleu = 1.5;
    p->bleu_sentences = 7;
  };
  const RunResult b = curved.Run(o);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << i;
  }
  EXPECT_EQ(Steps(curved.state().validation),
            (std::vector<int64_t>{5, 10, 15, 20, 23}));
  EXPECT_EQ(hook_calls, 5);
  EXPECT_EQ(curved.state().validation[0].bleu_sentences, 7);
  EXPECT_FALSE(b.stopped_early);
  EXPECT_EQ(plain.state().data_rng, curved.state().data_rng);
  EXPECT_EQ(plain.state().dropout_rng, curved.state().dropout_rng);
  testing::ExpectSameTensors(ReadCheckpoint(P("plain"), true),
                             ReadCheckpoint(P("curved"), true));
  EXPECT_EQ(Read("plain/model-00000023.safetensors"),
            Read("curved/model-00000023.safetensors"));
  // The last point is the held-out loss of the final model.
  const HeldOutSet held_out(curved.data(), curved.model_config(), 8,
                            curved.data().SequenceLength(4));
  EXPECT_EQ(curved.state().validation.back().loss,
            held_out.Loss(curved.model()));

  // The checkpoint's JSON: the points, the best one, no early stop; a
  // checkpoint of a run without the curve has no "validation" and no
  // new train keys, as before the curve existed.
  const nlohmann::json j = nlohmann::json::parse(Read("curved/config.json"));
  const nlohmann::json& v = j["validation"];
  ASSERT_EQ(v["points"].size(), 5u);
  EXPECT_EQ(v["points"][4]["step"], 23);
  EXPECT_EQ(v["points"][4]["loss"].get<double>(),
            curved.state().validation.back().loss);
  EXPECT_EQ(v["points"][0]["bleu"], 1.5);
  EXPECT_EQ(v["points"][0]["bleu_sentences"], 7);
  EXPECT_EQ(v["stopped_early"], false);
  EXPECT_FALSE(v.contains("stopped_at_step"));
  EXPECT_TRUE(v.contains("best_step"));
  EXPECT_EQ(j["train"]["eval_every"], 5);
  const nlohmann::json old = nlohmann::json::parse(Read("plain/config.json"));
  EXPECT_FALSE(old.contains("validation"));
  for (const char* key : {"eval_every", "eval_bleu_sentences", "patience"}) {
    EXPECT_FALSE(old["train"].contains(key)) << key;
  }
  // Read back exactly.
  ExpectSameCurve(ReadCheckpointConfig(P("curved")).state.validation,
                  curved.state().validation);
  EXPECT_EQ(ReadCheckpointConfig(P("curved")).state.stopped_early_step, -1);
}

// Patience P stops the run at the first point that is the P-th in a row
// without a lower held-out loss; the curve up to there is the one of the
// run without patience, and the checkpoint says where it stopped.
TEST_F(ValidationTest, PatienceStopsAtTheRightStep) {
  Trainer full(SmallModel(), Train(120, 4));
  full.Run({});
  const std::vector<ValidationPoint>& curve = full.state().validation;
  ASSERT_EQ(curve.size(), 30u);
  // Where each patience would stop: the first point P evaluations after the
  // best so far (the last point does not count: the run ends there anyway).
  auto stop_index = [&](int64_t patience) -> int64_t {
    size_t best = 0;
    for (size_t i = 1; i + 1 < curve.size(); ++i) {
      if (curve[i].loss < curve[best].loss) best = i;
      if (static_cast<int64_t>(i - best) >= patience) {
        return static_cast<int64_t>(i);
      }
    }
    return -1;
  };
  int64_t patience = 0, stop = -1;
  for (int64_t p = 3; p >= 1 && stop < 0; --p) {
    stop = stop_index(p);
    patience = p;
  }
  ASSERT_GE(stop, 0) << "the held-out loss fell at every point; a test "
                        "of patience needs a curve that does not";
  TrainConfig tc = Train(120, 4);
  tc.patience = patience;
  Trainer early(SmallModel(), tc);
  const RunResult r = early.Run({.checkpoint_dir = P("early")});
  const int64_t at = curve[static_cast<size_t>(stop)].step;
  EXPECT_TRUE(r.stopped_early) << "patience " << patience;
  EXPECT_FALSE(r.completed);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.final_step, at);
  EXPECT_EQ(early.state().stopped_early_step, at);
  ExpectSameCurve(early.state().validation,
                  std::vector<ValidationPoint>(
                      curve.begin(), curve.begin() + stop + 1));
  const nlohmann::json j = nlohmann::json::parse(Read("early/config.json"));
  EXPECT_EQ(j["state"]["step"], at);
  EXPECT_EQ(j["validation"]["stopped_early"], true);
  EXPECT_EQ(j["validation"]["stopped_at_step"], at);
  // Resuming a run that stopped early trains nothing.
  Trainer again = Trainer::Resume(P("early"));
  EXPECT_EQ(again.state().stopped_early_step, at);
  const RunResult r2 = again.Run({.checkpoint_dir = P("early")});
  EXPECT_TRUE(r2.stopped_early);
  EXPECT_TRUE(r2.steps.empty());
  EXPECT_EQ(r2.final_step, at);
}

// An interrupted run resumes with its curve and continues it: the same
// points and weights as the uninterrupted run.
TEST_F(ValidationTest, ResumeContinuesTheCurve) {
  Trainer whole(SmallModel(), Train(30, 6));
  whole.Run({.checkpoint_dir = P("whole")});
  {
    Trainer part(SmallModel(), Train(30, 6));
    const RunResult r =
        part.Run({.checkpoint_dir = P("part"), .stop_at_step = 14});
    ASSERT_TRUE(r.interrupted);
    EXPECT_EQ(Steps(part.state().validation), (std::vector<int64_t>{6, 12}));
  }
  Trainer resumed = Trainer::Resume(P("part"));
  EXPECT_EQ(Steps(resumed.state().validation), (std::vector<int64_t>{6, 12}));
  resumed.Run({.checkpoint_dir = P("part")});
  ExpectSameCurve(resumed.state().validation, whole.state().validation);
  testing::ExpectSameTensors(ReadCheckpoint(P("part"), true),
                             ReadCheckpoint(P("whole"), true));
  EXPECT_EQ(Read("part/config.json"), Read("whole/config.json"));
}

// A damaged "validation" is a FormatError naming what is wrong.
TEST_F(ValidationTest, CheckpointValidationIsReadStrictly) {
  Trainer t(SmallModel(), Train(10, 5));
  t.Run({.checkpoint_dir = P("ck")});
  const nlohmann::json good = nlohmann::json::parse(Read("ck/config.json"));
  auto expect_bad = [&](const std::function<void(nlohmann::json&)>& edit,
                        const std::string& needle) {
    nlohmann::json j = good;
    edit(j);
    std::ofstream(root_ / "ck" / "config.json") << j.dump(2);
    try {
      ReadCheckpointConfig(P("ck"));
      ADD_FAILURE() << "accepted " << j["validation"].dump();
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << e.what();
    }
  };
  using J = nlohmann::json;
  expect_bad([](J& j) { j["validation"]["extra"] = 1; }, "unknown member");
  expect_bad([](J& j) { j["validation"] = 3; }, "must be an object");
  expect_bad([](J& j) { j["validation"]["points"][1]["step"] = 5; },
             "points[1]");
  expect_bad([](J& j) { j["validation"]["points"][1]["step"] = 11; },
             "points[1]");
  expect_bad([](J& j) { j["validation"]["points"][0]["loss"] = -1; },
             "points[0]");
  expect_bad([](J& j) { j["validation"]["points"][0]["bleu"] = 1.0; },
             "points[0]");
  expect_bad([](J& j) { j["validation"]["best_step"] = 7; }, "best_step");
  expect_bad([](J& j) { j["validation"]["stopped_early"] = true; },
             "stopped_at_step");
  expect_bad([](J& j) { j["validation"]["stopped_at_step"] = 10; },
             "stopped_at_step");
  // Without "validation" it loads, with an empty curve (older checkpoints).
  nlohmann::json j = good;
  j.erase("validation");
  std::ofstream(root_ / "ck" / "config.json") << j.dump(2);
  const Checkpoint ck = ReadCheckpointConfig(P("ck"));
  EXPECT_TRUE(ck.state.validation.empty());
  EXPECT_EQ(ck.state.stopped_early_step, -1);
}

TEST_F(ValidationTest, SettingsAreChecked) {
  auto expect_bad = [](const TrainConfig& c, const std::string& needle) {
    try {
      Validate(c);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << e.what();
    }
  };
  TrainConfig c = Train(100, 10);
  Validate(c);
  c.eval_every = -1;
  expect_bad(c, "eval_every");
  c = Train(100, 0);
  c.patience = 2;
  expect_bad(c, "needs eval_every > 0");
  c = Train(100, 10);
  c.patience = -1;
  expect_bad(c, "patience");
  c.patience = 0;
  c.eval_bleu_sentences = -5;
  expect_bad(c, "eval_bleu_sentences");
  c = Train(100, 10);
  c.data.task = "reverse";
  expect_bad(c, "is for task translate");
  c = Train(100000, 10);
  expect_bad(c, "at most 2048");
}

}  // namespace
}  // namespace relpos::train
