// The compare grid's bookkeeping (relpos/lab/compare.h) on tiny runs: lengths,
// seeds, aggregation over seeds, compare.json, reuse on a rerun and
// interruption.
#include "relpos/lab/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "relpos/error.h"
#include "relpos/lab/translation.h"
#include "relpos/schemes.h"
#include "support/gettext_files.h"
#include "support/subprocess.h"

namespace relpos {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_compare_test_" + std::to_string(::getpid())) /
                     name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// Two schemes x two seeds of a tiny model, a few steps each.
CompareSpec TinySpec() {
  CompareSpec spec;
  ExperimentConfig& c = spec.base;
  c.Set("train", "--train-lengths", "2-4");
  c.Set("train", "steps", "5");
  c.Set("train", "batch_size", "4");
  c.Set("train", "checkpoint_every", "0");
  c.Set("model", "d_model", "16");
  c.Set("model", "heads", "2");
  c.Set("model", "layers", "1");
  c.Set("model", "d_ff", "32");
  c.Set("model", "max_distance", "3");
  spec.tasks = {"reverse"};
  spec.positions = {"none", "relative"};
  spec.seeds = {0, 1};
  spec.sequences_per_length = 4;
  return spec;
}

TEST(CompareLengths, InsideTheTrainingRangeThenTwiceAndFourTimes) {
  EXPECT_THAT(CompareLengths(8, 16, {}), ElementsAre(8, 12, 16, 32, 64));
  EXPECT_THAT(CompareLengths(128, 128, {1024, 256}),
              ElementsAre(128, 256, 512, 1024));
  EXPECT_THAT(CompareLengths(1, 2, {3}), ElementsAre(1, 2, 3, 4, 8));
  EXPECT_THROW(CompareLengths(5, 4, {}), InvalidArgument);
}

LengthMetrics At(int64_t length, double accuracy, double bits) {
  LengthMetrics m;
  m.length = length;
  m.token_accuracy = accuracy;
  m.bits_per_token = bits;
  return m;
}

TEST(AggregateCells, MeanMinMaxOverSeedsInsideAndBeyond) {
  CompareTask t;
  t.task = "reverse";
  t.train_min_length = 2;
  t.train_max_length = 4;
  t.lengths = {2, 3, 4, 8, 16};
  CompareCell a{.task = "reverse", .position = "none", .seed = 0,
                .parameters = 7};
  a.by_length = {At(2, 1.0, 0), At(3, 0.8, 0), At(4, 0.6, 0), At(8, 0.5, 0),
                 At(16, 0.2, 0)};
  CompareCell b = a;
  b.seed = 1;
  b.by_length = {At(2, 0.4, 0), At(3, 0.4, 0), At(4, 0.4, 0), At(8, 0.3, 0),
                 At(16, 0.4, 0)};
  a.train_seconds = 1;
  b.train_seconds = 3;
  const std::vector<CompareRow> rows = AggregateCells({t}, {a, b});
  ASSERT_EQ(rows.size(), 1u);
  const CompareRow& r = rows[0];
  EXPECT_EQ(r.parameters, 7);
  EXPECT_DOUBLE_EQ(r.train_seconds, 2);
  // Inside = the mean over lengths 2..4 per seed: 0.8 and 0.4.
  EXPECT_EQ(r.inside.n, 2);
  EXPECT_DOUBLE_EQ(r.inside.mean, 0.6);
  EXPECT_DOUBLE_EQ(r.inside.min, 0.4);
  EXPECT_DOUBLE_EQ(r.inside.max, 0.8);
  EXPECT_DOUBLE_EQ(r.at_2x.mean, 0.4);
  EXPECT_DOUBLE_EQ(r.at_2x.min, 0.3);
  EXPECT_DOUBLE_EQ(r.at_4x.max, 0.4);
  ASSERT_EQ(r.by_length.size(), 5u);
  EXPECT_DOUBLE_EQ(r.by_length[0].mean, 0.7);

  // lm scores bits per byte, not accuracy.
  t.task = "lm";
  for (CompareCell* c : {&a, &b}) {
    c->task = "lm";
    for (LengthMetrics& m : c->by_length) m.bits_per_token = 2.0 + c->seed;
  }
  const std::vector<CompareRow> lm = AggregateCells({t}, {a, b});
  ASSERT_EQ(lm.size(), 1u);
  EXPECT_DOUBLE_EQ(lm[0].at_4x.mean, 2.5);
  EXPECT_DOUBLE_EQ(lm[0].at_4x.min, 2.0);
  EXPECT_DOUBLE_EQ(lm[0].at_4x.max, 3.0);
}

// Cells cost T[task] * P[scheme]; the grid runs task by task. The estimate
// must follow the cheap first cells' scheme costs and, once a cell of the
// second task is in, that task's factor: here exactly, since the data is
// exactly multiplicative. A mean over the first cells (the old estimate)
// would be off by the task factor and the scheme mix.
TEST(CompareTimeEstimate, FitsTaskAndSchemeFactors) {
  CompareSpec spec;
  spec.tasks = {"a", "b"};
  spec.positions = {"none", "shaw", "xl"};
  spec.seeds = {0, 1};
  const double task[] = {1.0, 3.0}, scheme[] = {2.0, 2.5, 5.0};
  auto cost = [&](int64_t i) { return task[i / 6] * scheme[i / 2 % 3]; };
  double total = 0;
  for (int64_t i = 0; i < 12; ++i) total += cost(i);

  CompareTimeEstimate e(spec);
  EXPECT_TRUE(std::isnan(e.SecondsLeft(0)));
  e.Add(0, cost(0));  // one cell: every other cell is assumed to cost it
  EXPECT_DOUBLE_EQ(e.SecondsLeft(1), 11 * cost(0));
  double done = cost(0);
  for (int64_t i = 1; i < 7; ++i) {
    e.Add(i, cost(i));
    done += cost(i);
  }
  // Every scheme seen on task a, one cell of task b: the rest is exact.
  EXPECT_NEAR(e.SecondsLeft(7), total - done, 1e-9 * total);
  // Before task b starts, its cells are estimated at task a's cost.
  CompareTimeEstimate first_task(spec);
  double a_sum = 0;
  for (int64_t i = 0; i < 6; ++i) {
    first_task.Add(i, cost(i));
    a_sum += cost(i);
  }
  EXPECT_NEAR(first_task.SecondsLeft(6), a_sum, 1e-9 * a_sum);
  EXPECT_THROW(e.Add(12, 1.0), InvalidArgument);
}

TEST(RunCompare, TrainsEveryCellWritesJsonAndReusesFinishedCells) {
  const std::string out = TempDir("grid");
  const CompareSpec spec = TinySpec();
  std::vector<int64_t> seen;
  CompareOptions options{.out_dir = out};
  options.on_cell = [&](const CompareCell&, int64_t done, int64_t total) {
    EXPECT_EQ(total, 4);
    seen.push_back(done);
  };
  const CompareResult r = RunCompare(spec, options);
  EXPECT_THAT(seen, ElementsAre(1, 2, 3, 4));
  EXPECT_FALSE(r.interrupted);
  ASSERT_EQ(r.cells.size(), 4u);
  ASSERT_EQ(r.tasks.size(), 1u);
  EXPECT_THAT(r.tasks[0].lengths, ElementsAre(2, 3, 4, 8, 16));
  // Grid order: scheme-major, then seed; seeds give different models.
  EXPECT_EQ(r.cells[0].position, "none");
  EXPECT_EQ(r.cells[1].seed, 1u);
  EXPECT_EQ(r.cells[2].position, "shaw");
  EXPECT_NE(r.cells[0].final_loss, r.cells[1].final_loss);
  EXPECT_GT(r.cells[2].parameters, r.cells[0].parameters);  // the tables
  for (const CompareCell& c : r.cells) {
    EXPECT_FALSE(c.reused);
    ASSERT_EQ(c.by_length.size(), 5u);
    EXPECT_EQ(c.by_length[4].sequences, 4);
  }
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[1].inside.n, 2);

  const nlohmann::json j = ReadJson(out + "/compare.json");
  EXPECT_EQ(j["cells"].size(), 4u);
  EXPECT_EQ(j["cells_planned"], 4);
  EXPECT_EQ(j["rows"][0]["position"], "none");
  EXPECT_EQ(j["spread"], "min and max over seeds");
  EXPECT_EQ(j["cells"][3]["config"]["train"]["seed"], 1);

  // A rerun into the same folder reuses every cell, identically.
  const CompareResult again = RunCompare(spec, {.out_dir = out});
  ASSERT_EQ(again.cells.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(again.cells[i].reused);
    EXPECT_EQ(again.cells[i].final_loss, r.cells[i].final_loss);
    EXPECT_EQ(again.cells[i].by_length[3].token_accuracy,
              r.cells[i].by_length[3].token_accuracy);
  }
  // A changed setting is a different experiment: nothing is reused.
  CompareSpec longer = spec;
  longer.base.Set("train", "steps", "6");
  longer.seeds = {1};
  const CompareResult changed = RunCompare(longer, {.out_dir = out});
  ASSERT_EQ(changed.cells.size(), 2u);
  EXPECT_FALSE(changed.cells[0].reused);
  fs::remove_all(out);
}

TEST(RunCompare, AStopKeepsTheFinishedCellsAndARerunContinues) {
  const std::string out = TempDir("stop");
  const CompareSpec spec = TinySpec();
  volatile std::sig_atomic_t stop = 0;
  CompareOptions options{.out_dir = out, .stop_flag = &stop};
  options.on_cell = [&](const CompareCell&, int64_t done, int64_t) {
    if (done == 1) stop = SIGINT;  // as the signal handler would
  };
  const CompareResult r = RunCompare(spec, options);
  EXPECT_TRUE(r.interrupted);
  ASSERT_EQ(r.cells.size(), 1u);
  EXPECT_EQ(r.cells_planned, 4);
  const nlohmann::json j = ReadJson(out + "/compare.json");
  EXPECT_EQ(j["cells"].size(), 1u);
  EXPECT_TRUE(j["interrupted"].get<bool>());
  // The rerun reuses the finished cell and trains the other three.
  const CompareResult rest = RunCompare(spec, {.out_dir = out});
  ASSERT_EQ(rest.cells.size(), 4u);
  EXPECT_TRUE(rest.cells[0].reused);
  EXPECT_EQ(rest.cells[0].final_loss, r.cells[0].final_loss);
  EXPECT_FALSE(rest.cells[1].reused);
  EXPECT_FALSE(rest.interrupted);
  fs::remove_all(out);
}

TEST(RunCompare, LmCellsScoreBitsPerByteAndTheCorpusStaysWithLm) {
  CompareSpec spec = TinySpec();
  spec.base.Set("train", "corpus_bytes", "4000");
  spec.base.Set("train", "corpus_seed", "3");
  spec.tasks = {"reverse", "lm"};
  spec.positions = {"sinusoidal"};
  spec.seeds = {0};
  const CompareResult r = RunCompare(spec);
  ASSERT_EQ(r.tasks.size(), 2u);
  EXPECT_FALSE(r.tasks[0].lower_is_better);
  EXPECT_TRUE(r.tasks[1].lower_is_better);
  EXPECT_THAT(r.tasks[1].data, HasSubstr("generated text"));
  ASSERT_EQ(r.rows.size(), 2u);
  // Bits per byte of a barely trained byte model: near log2(256) = 8.
  EXPECT_GT(r.rows[1].at_4x.mean, 4.0);
  EXPECT_LT(r.rows[1].at_4x.mean, 9.0);
  EXPECT_LE(r.rows[0].at_4x.mean, 1.0);  // an accuracy

  // A file corpus given for the grid is not handed to the synthetic task.
  const std::string dir = TempDir("corpus");
  std::ofstream(dir + "/a.txt") << std::string(3000, 'x');
  spec.base.Set("train", "corpus_path", dir + "/a.txt");
  const ExperimentConfig task_cell =
      CompareCellConfig(spec, "reverse", "none", 0);
  EXPECT_EQ(task_cell.Get("train", "corpus_path"), "");
  EXPECT_EQ(CompareCellConfig(spec, "lm", "none", 0).Get("train",
                                                         "corpus_path"),
            dir + "/a.txt");
  fs::remove_all(dir);
}

// translate cells score BLEU per source-length bucket, exactly as
// EvaluateTranslation gives it for the same model: the toy corpus has
// sources of 4, 9 and 14 words, so trained on 1-4 the buckets are 1-4
// (inside), 5-8 (empty: left out of the rows) and 9-16 (4x).
TEST(RunCompare, TranslateCellsScoreBleuPerSourceLengthBucket) {
  const std::string dir = TempDir("translate");
  std::ofstream(dir + "/toy.tsv") << testing::ToyCorpus(1, 300);
  CompareSpec spec;
  ExperimentConfig& c = spec.base;
  c.Set("train", "task", "translate");
  c.Set("train", "corpus_path", dir + "/toy.tsv");
  c.Set("train", "sentencepiece_size", "48");
  c.Set("train", "--train-lengths", "1-4");
  c.Set("train", "steps", "40");
  c.Set("train", "batch_size", "16");
  c.Set("train", "lr", "3e-3");
  c.Set("train", "checkpoint_every", "0");
  c.Set("model", "d_model", "16");
  c.Set("model", "heads", "2");
  c.Set("model", "layers", "1");
  c.Set("model", "d_ff", "32");
  spec.tasks = {"translate"};
  spec.positions = {"shaw"};
  spec.seeds = {0};
  spec.sequences_per_length = 40;
  const std::string out = dir + "/cmp";
  const CompareResult r = RunCompare(spec, {.out_dir = out});
  ASSERT_EQ(r.tasks.size(), 1u);
  EXPECT_THAT(r.tasks[0].lengths, ElementsAre(4, 8, 16));
  EXPECT_THAT(r.tasks[0].metric, HasSubstr("BLEU"));
  EXPECT_FALSE(r.tasks[0].lower_is_better);
  ASSERT_EQ(r.cells.size(), 1u);
  const std::vector<LengthMetrics>& m = r.cells[0].by_length;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_GT(m[0].sequences, 0);
  EXPECT_EQ(m[1].sequences, 0);
  EXPECT_GT(m[2].sequences, 0);
  EXPECT_LE(m[0].sequences + m[2].sequences, 40);

  // The same cell trained and evaluated by hand.
  Training training(CompareCellConfig(spec, "translate", "shaw", 0));
  training.Run({.progress = {}});
  TranslationEvalOptions eval;
  eval.max_sentences = 40;
  eval.progress.out = nullptr;
  const TranslationEvalResult want = EvaluateTranslation(training.model(), eval);
  int checked = 0;
  for (const TranslationScores& b : want.scores) {
    if (b.label == "1-4 (inside)") {
      EXPECT_EQ(m[0].bleu, b.bleu);
      EXPECT_EQ(m[0].chrf, b.chrf);
      EXPECT_EQ(m[0].sequences, b.sentences);
      ++checked;
    }
    if (b.max_words == 16) {
      EXPECT_EQ(m[2].bleu, b.bleu);
      EXPECT_EQ(m[2].sequences, b.sentences);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].inside.mean, m[0].bleu);
  EXPECT_EQ(r.rows[0].at_2x.n, 0);  // no source of 5-8 words
  EXPECT_EQ(r.rows[0].at_4x.mean, m[2].bleu);

  // compare.json keeps the scores: a rerun reuses the cell as it was.
  nlohmann::json j = ReadJson(out + "/compare.json");
  EXPECT_EQ(j["cells"][0]["by_length"][2]["bleu"].get<double>(), m[2].bleu);
  const CompareResult again = RunCompare(spec, {.out_dir = out});
  ASSERT_EQ(again.cells.size(), 1u);
  EXPECT_TRUE(again.cells[0].reused);
  EXPECT_EQ(again.cells[0].by_length[2].bleu, m[2].bleu);
  // A translate cell without BLEU (a file from before compare scored
  // translation) is trained again.
  for (auto& x : j["cells"][0]["by_length"]) {
    x.erase("bleu");
    x.erase("chrf");
  }
  std::ofstream(out + "/compare.json") << j.dump();
  const CompareResult old = RunCompare(spec, {.out_dir = out});
  ASSERT_EQ(old.cells.size(), 1u);
  EXPECT_FALSE(old.cells[0].reused);
  EXPECT_EQ(old.cells[0].by_length[2].bleu, m[2].bleu);
  fs::remove_all(dir);
}

TEST(RunCompare, LearnedTableCoversTheLongestEvaluation) {
  CompareSpec spec = TinySpec();
  spec.base.Set("train", "--train-lengths", "300");
  const ExperimentConfig c = CompareCellConfig(spec, "lm", "learned", 0);
  EXPECT_EQ(c.Get("model", "max_len"), "1200");  // 4 x 300
  spec.base.Set("model", "max_len", "700");       // given: kept, then refused
  EXPECT_EQ(CompareCellConfig(spec, "lm", "learned", 0).Get("model",
                                                            "max_len"),
            "700");
  spec.tasks = {"lm"};
  spec.positions = {"learned"};
  EXPECT_THROW(RunCompare(spec), InvalidArgument);
}

TEST(RunCompare, BadGridsAreRefusedBeforeAnyTraining) {
  CompareSpec spec = TinySpec();
  spec.positions = {"relative", "relative"};
  try {
    RunCompare(spec);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("positions names relative twice"));
  }
  spec = TinySpec();
  spec.positions = {"none", "nosuch"};
  try {
    RunCompare(spec);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("positions"));
    EXPECT_THAT(e.what(), HasSubstr("nosuch"));
  }
  spec = TinySpec();
  spec.tasks = {"nosuch"};
  EXPECT_THROW(RunCompare(spec), InvalidArgument);
  spec = TinySpec();
  spec.seeds = {};
  EXPECT_THROW(RunCompare(spec), InvalidArgument);
}

// A reused cell is shown as if trained in this run, so a compare.json cell
// edited out of range (accuracy -5, a loss of 1e308 whose bits no longer
// match, a label that is not its configuration's) is trained again, and the
// result says so; the untouched cells are still reused.
TEST(RunCompare, ReusedCellsAreValidatedAndBadOnesTrainedAgain) {
  const std::string out = TempDir("edited");
  const CompareSpec spec = TinySpec();
  const CompareResult first = RunCompare(spec, {.out_dir = out});
  nlohmann::json j = ReadJson(out + "/compare.json");
  j["cells"][0]["by_length"][1]["token_accuracy"] = -5;
  j["cells"][1]["by_length"][0]["loss"] = 1e308;
  j["cells"][2]["position"] = "none";  // its config says shaw
  std::ofstream(out + "/compare.json") << j.dump();
  const CompareResult again = RunCompare(spec, {.out_dir = out});
  ASSERT_EQ(again.cells.size(), 4u);
  EXPECT_FALSE(again.cells[0].reused);
  EXPECT_FALSE(again.cells[1].reused);
  EXPECT_FALSE(again.cells[2].reused);
  EXPECT_TRUE(again.cells[3].reused);
  EXPECT_THAT(again.previous_note, HasSubstr("3 cell(s)"));
  EXPECT_THAT(again.previous_note, HasSubstr("token_accuracy"));
  for (const CompareCell& c : again.cells) {
    for (const LengthMetrics& m : c.by_length) {
      EXPECT_GE(m.token_accuracy, 0);
      EXPECT_LE(m.loss, 100);
    }
  }
  // Retrained deterministically: the same numbers as the first run.
  EXPECT_EQ(again.cells[0].final_loss, first.cells[0].final_loss);
  // A cell whose parameter count is not its configuration's is not reused
  // either (the check against the planned cell).
  j = ReadJson(out + "/compare.json");
  j["cells"][3]["parameters"] = 7;
  std::ofstream(out + "/compare.json") << j.dump();
  EXPECT_FALSE(RunCompare(spec, {.out_dir = out}).cells[3].reused);
  fs::remove_all(out);
}

// compare.json is bounded before it is parsed: 20 MB of '[' (which
// nlohmann::json alone turns into 1.5 GB) is refused at once, in a child
// whose address space is limited to 1 GiB; the grid then trains as if there
// were no file.
TEST(RunCompare, AHostileCompareJsonCostsNoMemory) {
  const std::string out = TempDir("brackets");
  std::ofstream(out + "/compare.json") << std::string(20 << 20, '[');
  const relpos::testing::ChildResult r = relpos::testing::RunInChild([&] {
    const rlimit lim{uint64_t{1} << 30, uint64_t{1} << 30};
    ::setrlimit(RLIMIT_AS, &lim);
    CompareSpec spec = TinySpec();
    spec.positions = {"none"};
    spec.seeds = {0};
    const CompareResult c = RunCompare(spec, {.out_dir = out});
    return c.cells.size() == 1 && !c.cells[0].reused &&
                   c.previous_note.find("deeper than 64") != std::string::npos
               ? 0
               : 1;
  });
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  fs::remove_all(out);
}

// The grid's size is capped before anything is planned, and a stop flag
// raised while planning ends the call before any cell or any folder.
TEST(RunCompare, TheGridIsCappedAndPlanningHonoursTheStopFlag) {
  CompareSpec spec = TinySpec();
  spec.seeds.clear();
  for (uint64_t s = 0; s <= kMaxCompareSeeds; ++s) spec.seeds.push_back(s);
  try {
    RunCompare(spec);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("at most 1000 seeds"));
  }
  spec.seeds.resize(1000);
  // Every name the registry accepts (11 with the alias): 1000 seeds each.
  spec.positions.clear();
  for (const Scheme& s : Schemes()) {
    spec.positions.push_back(s.name);
    for (const std::string& alias : s.aliases) spec.positions.push_back(alias);
  }
  ASSERT_GT(spec.positions.size(), 10u);
  try {
    RunCompare(spec);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(),
                HasSubstr(std::to_string(1000 * spec.positions.size()) +
                          " cells exceeds the 10000"));
  }
  spec = TinySpec();
  const std::string out =
      (fs::path(TempDir("planning")) / "not-created").string();
  volatile std::sig_atomic_t stop = SIGTERM;
  const CompareResult r =
      RunCompare(spec, {.out_dir = out, .stop_flag = &stop});
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.cells_planned, 0);
  EXPECT_FALSE(fs::exists(out));
}

// A refused grid leaves no folder behind; a valid one creates it.
TEST(RunCompare, OnlyAValidGridCreatesTheOutputFolder) {
  const std::string out = (fs::path(TempDir("fresh")) / "out").string();
  CompareSpec spec = TinySpec();
  spec.positions = {"none", "nosuch"};
  EXPECT_THROW(RunCompare(spec, {.out_dir = out}), InvalidArgument);
  EXPECT_FALSE(fs::exists(out));
  spec.positions = {"none"};
  spec.seeds = {0};
  int64_t started = 0;
  CompareOptions options{.out_dir = out};
  options.on_start = [&](const CompareResult& planned) {
    started = planned.cells_planned;
    EXPECT_TRUE(fs::is_directory(out));
  };
  RunCompare(spec, options);
  EXPECT_EQ(started, 1);
  EXPECT_TRUE(fs::exists(out + "/compare.json"));
}

// `relpos compare` runs every scheme of the registry by default: each name
// (and alias) is a value of the model's `position` setting, written back
// as its scheme's name.
TEST(Positions, EveryRegistrySchemeIsAPositionSetting) {
  for (const Scheme& s : Schemes()) {
    ExperimentConfig c;
    c.Set("model", "position", s.name);
    EXPECT_EQ(c.Get("model", "position"), s.name);
    for (const std::string& alias : s.aliases) {
      c.Set("model", "position", alias);
      EXPECT_EQ(c.Get("model", "position"), s.name) << alias;
    }
  }
}

}  // namespace
}  // namespace relpos
