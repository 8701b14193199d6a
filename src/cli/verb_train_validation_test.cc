// `relpos train --task translate --eval-every N [--eval-bleu-sentences K]
// [--patience P]` on a tiny generated TSV corpus: the validation curve in
// config.json and in the progress lines, its BLEU equal to relpos eval's on
// the same pairs, the same weights as without the curve (beam search and
// dropout included), early stopping and its resume, compare's cells with
// the curve, and the bad values refused before training.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "relpos/lab/model.h"
#include "relpos/lab/translation.h"
#include "support/gettext_files.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

class VerbTrainValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("relpos_verb_train_validation_test_" +
             std::to_string(::getpid()) + "_" +
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
  // A run of about a second (dropout on: a stray draw would show).
  std::vector<std::string> Tiny(const std::string& out, int steps = 60) const {
    return {"train", "--task", "translate", "--corpus", P("toy.tsv"),
            "--sentencepiece-size", "48", "--train-lengths", "1-4",
            "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff",
            "32", "--dropout", "0.1", "--batch-size", "8", "--steps",
            std::to_string(steps), "--lr", "1e-2", "--progress", "none",
            "--out", P(out)};
  }
  static std::vector<std::string> With(std::vector<std::string> args,
                                       const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  // Exit 2, one line on stderr naming `needle`, no output, no folder.
  void ExpectBad(const std::vector<std::string>& args,
                 const std::string& needle) {
    const CliResult r = RunRelpos(args);
    EXPECT_EQ(r.code, 2) << Joined(args) << r.err;
    EXPECT_EQ(r.out, "") << Joined(args);
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(root_ / "bad")) << Joined(args);
  }
  fs::path root_;
};

TEST_F(VerbTrainValidationTest, CurveInConfigJsonAndProgressLines) {
  std::vector<std::string> args =
      With(Tiny("ck"), {"--eval-every", "20", "--eval-bleu-sentences", "12"});
  *std::find(args.begin(), args.end(), "none") = "lines";
  ::testing::internal::CaptureStderr();
  const CliResult r = RunRelpos(args);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(r.code, 0) << r.err;
  // One progress line per point, each with the point.
  for (const char* step : {"at step 20", "at step 40", "at step 60"}) {
    EXPECT_NE(err.find(step), std::string::npos) << err;
  }
  EXPECT_NE(err.find("; held-out loss "), std::string::npos) << err;
  EXPECT_NE(err.find(" BLEU "), std::string::npos) << err;
  EXPECT_NE(r.out.find("validation: 3 points; last held-out loss "),
            std::string::npos)
      << r.out;

  const nlohmann::json j = nlohmann::json::parse(Read("ck/config.json"));
  const nlohmann::json& points = j["validation"]["points"];
  ASSERT_EQ(points.size(), 3u) << j.dump(2);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(points[i]["step"], 20 * static_cast<int>(i + 1));
    EXPECT_GT(points[i]["loss"].get<double>(), 0.0);
    EXPECT_EQ(points[i]["bleu_sentences"], 12);
  }
  EXPECT_EQ(j["train"]["eval_every"], 20);
  EXPECT_EQ(j["train"]["eval_bleu_sentences"], 12);
  EXPECT_EQ(j["validation"]["stopped_early"], false);
  // The last point's BLEU is relpos eval's on the same 12 pairs.
  Model model = Model::Load(P("ck"));
  TranslationEvalOptions eval;
  eval.max_sentences = 12;
  eval.progress.out = nullptr;
  EXPECT_EQ(points[2]["bleu"].get<double>(),
            EvaluateTranslation(model, eval).scores.front().bleu);
  const CliResult e = RunRelpos({"eval", P("ck"), "--max-sentences", "12",
                                 "--json", "--progress", "none"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(points[2]["bleu"].get<double>(),
            nlohmann::json::parse(e.out)["scores"][0]["bleu"].get<double>());

  // --config takes such a config.json (its validation is not a setting).
  const CliResult c = RunRelpos(
      {"train", "--config", P("ck/config.json"), "--steps", "8",
       "--eval-every", "0", "--progress", "none", "--out", P("again")});
  EXPECT_EQ(c.code, 0) << c.err;
}

// The curve (held-out loss and the beam search of its BLEU) draws nothing
// from the training's random streams and changes no weight: the checkpoint
// files of a run with it equal those of a run without it, byte for byte.
TEST_F(VerbTrainValidationTest, SameWeightsWithAndWithoutTheCurve) {
  ASSERT_EQ(RunRelpos(Tiny("plain", 25)).code, 0);
  const CliResult r = RunRelpos(With(
      Tiny("curved", 25), {"--eval-every", "4", "--eval-bleu-sentences", "8"}));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* file : {"model-00000025.safetensors",
                           "optimizer-00000025.safetensors",
                           "signal-00000025.json"}) {
    EXPECT_EQ(Read(std::string("plain/") + file),
              Read(std::string("curved/") + file))
        << file;
  }
  const nlohmann::json a = nlohmann::json::parse(Read("plain/config.json"));
  const nlohmann::json b = nlohmann::json::parse(Read("curved/config.json"));
  EXPECT_EQ(a["state"], b["state"]);
  EXPECT_EQ(b["validation"]["points"].size(), 7u);  // 4, 8, ..., 24, 25
}

// --patience P: a run stops at the step where the held-out loss has not
// improved for P evaluations (the curve of the same run without patience
// says where), says so, and its resume trains nothing.
TEST_F(VerbTrainValidationTest, PatienceStopsEarlyAndSaysWhere) {
  ASSERT_EQ(RunRelpos(With(Tiny("full", 120), {"--eval-every", "4",
                                               "--eval-bleu-sentences", "0"}))
                .code,
            0);
  const nlohmann::json full =
      nlohmann::json::parse(Read("full/config.json"))["validation"]["points"];
  ASSERT_EQ(full.size(), 30u);
  EXPECT_FALSE(full[0].contains("bleu"));
  // Where patience 1 stops: the first point not below the best before it.
  int64_t at = -1;
  double best = full[0]["loss"].get<double>();
  for (size_t i = 1; i + 1 < full.size() && at < 0; ++i) {
    const double loss = full[i]["loss"].get<double>();
    if (loss >= best) at = full[i]["step"].get<int64_t>();
    best = std::min(best, loss);
  }
  ASSERT_GT(at, 0) << "the held-out loss fell at every point";
  const CliResult r =
      RunRelpos(With(Tiny("early", 120), {"--eval-every", "4",
                                          "--eval-bleu-sentences", "0",
                                          "--patience", "1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("stopped early at step " + std::to_string(at) +
                       " of 120: the held-out loss did not improve in 1 "
                       "evaluations (every 4 updates)"),
            std::string::npos)
      << r.out;
  const nlohmann::json j = nlohmann::json::parse(Read("early/config.json"));
  EXPECT_EQ(j["state"]["step"], at);
  EXPECT_EQ(j["validation"]["stopped_early"], true);
  EXPECT_EQ(j["validation"]["stopped_at_step"], at);
  EXPECT_EQ(j["train"]["patience"], 1);
  const CliResult resumed = RunRelpos(
      {"train", "--resume", P("early"), "--progress", "none"});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("stopped early at step " + std::to_string(at) +
                             " (patience 1); nothing to resume"),
            std::string::npos)
      << resumed.out;
  EXPECT_EQ(nlohmann::json::parse(Read("early/config.json")), j);
}

// compare passes the curve's settings to every cell; a cell stopped early
// is a finished cell.
TEST_F(VerbTrainValidationTest, CompareCellsTakeTheCurveSettings) {
  const CliResult r = RunRelpos(
      {"compare", "--tasks", "translate", "--corpus", P("toy.tsv"),
       "--sentencepiece-size", "48", "--train-lengths", "1-4", "--positions",
       "shaw", "--seeds", "1", "--d-model", "16", "--heads", "2", "--layers",
       "1", "--d-ff", "32", "--batch-size", "8", "--steps", "40", "--lr",
       "1e-2", "--eval-every", "2", "--eval-bleu-sentences", "0",
       "--patience", "1", "--sequences", "8", "--progress", "none", "--json",
       "--out", P("grid")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["cells"].size(), 1u) << r.out;
  EXPECT_EQ(j["cells_finished"], 1);
}

TEST_F(VerbTrainValidationTest, BadValuesAreRefusedBeforeTraining) {
  ExpectBad(With(Tiny("bad"), {"--eval-every", "-1"}), "--eval-every");
  ExpectBad(With(Tiny("bad"), {"--eval-every", "x"}), "--eval-every");
  ExpectBad(With(Tiny("bad"), {"--eval-every", "5", "--patience", "-2"}),
            "--patience");
  ExpectBad(With(Tiny("bad"), {"--eval-every", "5", "--eval-bleu-sentences",
                               "-1"}),
            "--eval-bleu-sentences");
  ExpectBad(With(Tiny("bad"), {"--patience", "3"}),
            "'patience' (--patience) needs eval_every > 0");
  ExpectBad(With(Tiny("bad", 100000), {"--eval-every", "1"}),
            "at most 2048");
  ExpectBad({"train", "--task", "reverse", "--train-lengths", "2-4",
             "--eval-every", "5", "--progress", "none", "--out", P("bad")},
            "'eval_every' (--eval-every) is for task translate");
  // --resume takes them from the checkpoint.
  ASSERT_EQ(RunRelpos(Tiny("ck", 4)).code, 0);
  const CliResult r = RunRelpos(
      {"train", "--resume", P("ck"), "--eval-every", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("drop --eval-every"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace relpos::cli
