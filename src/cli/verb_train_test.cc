// The train / eval / demo / sweep verbs, driven in-process through RunCli
// (plus one test of the real binary for SIGTERM).
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_test_util.h"
#include "train/checkpoint.h"

extern char** environ;

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

// Every file and folder under `root`, for "nothing was written" checks.
std::set<std::string> Listing(const fs::path& root) {
  std::set<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    names.insert(e.path().string());
  }
  return names;
}

class VerbTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("relpos_verb_train_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string P(const std::string& name) const {
    return (root_ / name).string();
  }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(root_ / name) << text;
  }
  fs::path root_;
};

// Flags of a model that trains in well under a second.
std::vector<std::string> Tiny() {
  return {"--task",       "reverse", "--train-lengths", "1-4",
          "--d-model",    "16",      "--heads",         "2",
          "--layers",     "1",       "--d-ff",          "32",
          "--batch-size", "4",       "--progress",      "none"};
}

std::vector<std::string> Cat(std::vector<std::string> a,
                             const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(VerbTrainTest, TrainEvalAndResume) {
  const std::string dir = P("run");
  CliResult r = RunRelpos(Cat({"train", "--out", dir, "--steps", "6",
                            "--checkpoint-every", "4", "--max-distance", "3"},
                           Tiny()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("checkpoint: " + dir), std::string::npos) << r.out;
  EXPECT_EQ(train::ReadCheckpoint(dir, true).state.step, 6);

  // eval --json: per-length maps keyed by the length as a string.
  r = RunRelpos({"eval", dir, "--lengths", "2,4-8:4", "--json", "--sequences",
                 "8", "--progress", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"accuracy_by_length", "sequence_accuracy_by_length",
                          "loss_by_length"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j[key].size(), 3u);
    for (const char* len : {"2", "4", "8"}) {
      ASSERT_TRUE(j[key].contains(len)) << key << " " << len;
      EXPECT_GE(j[key][len].get<double>(), 0.0);
    }
  }
  for (const char* len : {"2", "4", "8"}) {
    EXPECT_LE(j["accuracy_by_length"][len].get<double>(), 1.0);
  }
  EXPECT_EQ(j["position"], "shaw");  // written "shaw" (was "relative")
  EXPECT_EQ(j["step"], 6);

  // Plain table.
  r = RunRelpos({"eval", dir, "--lengths", "3", "--sequences", "4",
                 "--progress", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("length  tokens  accuracy"), std::string::npos) << r.out;

  // Resume to a longer run.
  r = RunRelpos(
      {"train", "--resume", dir, "--steps", "9", "--progress", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(train::ReadCheckpoint(dir, true).state.step, 9);
}

// A source-target task trains a seq2seq model end to end (the arch and
// label smoothing resolved from the task, the decoder's depth of its own),
// evaluates by source length, and resumes; an encoder on it exits 2.
TEST_F(VerbTrainTest, Seq2seqTaskTrainsEvaluatesAndResumes) {
  const std::string dir = P("s2s");
  std::vector<std::string> flags = Tiny();
  flags[1] = "s2s_reverse";
  CliResult r = RunRelpos(Cat({"train", "--out", dir, "--steps", "5",
                               "--decoder-layers", "2", "--position", "t5"},
                              flags));
  ASSERT_EQ(r.code, 0) << r.err;
  const train::Checkpoint ck = train::ReadCheckpoint(dir, false);
  EXPECT_EQ(ck.model_config.arch, model::Arch::kSeq2seq);
  EXPECT_EQ(ck.model_config.decoder_layers, 2);
  EXPECT_EQ(ck.train_config.label_smoothing, 0.1);
  r = RunRelpos({"eval", dir, "--lengths", "2,6", "--json", "--sequences", "4",
                 "--progress", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["accuracy_by_length"].size(), 2u);
  r = RunRelpos({"train", "--resume", dir, "--steps", "7", "--progress",
                 "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(train::ReadCheckpoint(dir, false).state.step, 7);
  r = RunRelpos(Cat({"train", "--out", P("enc"), "--steps", "1", "--arch",
                     "encoder"},
                    flags));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("needs arch seq2seq"), std::string::npos) << r.err;
}

TEST_F(VerbTrainTest, ConfigFileThenFlags) {
  Write("cfg.json",
        R"({"model": {"d_model": 16, "heads": 2, "layers": 1, "d_ff": 32,
                                  "position": "learned", "max_len": 64},
                        "train": {"task": "reverse", "train_min_length": 1,
                                  "train_max_length": 3, "steps": 2, "batch_size": 2}})");
  const std::string dir = P("cfgrun");
  // --steps on the command line wins over the file's 2.
  CliResult r = RunRelpos({"train", "--config", P("cfg.json"), "--steps", "3",
                        "--out", dir, "--progress", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  const train::Checkpoint ck = train::ReadCheckpoint(dir, false);
  EXPECT_EQ(ck.state.step, 3);
  EXPECT_EQ(ck.train_config.train_max_length, 3);
  EXPECT_EQ(ck.model_config.position, model::PositionScheme::kLearned);
  EXPECT_EQ(ck.model_config.d_model, 16);
}

// Every bad invocation: exit code 2, exactly one line on stderr, nothing on
// stdout, and no file or folder created.
TEST_F(VerbTrainTest, BadUsageExitsTwoWithOneLineAndWritesNothing) {
  // A finished run to resume/evaluate, and damaged copies of it.
  const std::string good = P("good");
  ASSERT_EQ(
      RunRelpos(Cat({"train", "--out", good, "--steps", "2"}, Tiny())).code, 0);
  const std::string corrupt = P("corrupt");
  fs::copy(good, corrupt);
  Write("corrupt/config.json", "{\"format\": ");
  const std::string learned = P("learned");
  ASSERT_EQ(RunRelpos(Cat({"train", "--out", learned, "--steps", "1",
                           "--position", "learned", "--max-len", "16"},
                          Tiny()))
                .code,
            0);
  Write("afile", "x");
  Write("bad.json", "{\"model\": {\"d_model\": ");
  Write("unknown.json", "{\"train\": {\"stepz\": 3}}");
  Write("badsection.json", "{\"optimizer\": {}}");
  const std::string out = P("out");

  const std::vector<std::vector<std::string>> cases = {
      // train
      Cat({"train", "--out", out, "--task", "nosuch"}, {}),
      {"train", "--out", out, "--train-lengths", "16-8"},
      {"train", "--out", out, "--train-lengths", "0-8"},
      {"train", "--out", out, "--train-lengths", "x"},
      {"train", "--out", out, "--heads", "0"},
      {"train", "--out", out, "--d-model", "30", "--heads", "4"},
      {"train", "--out", out, "--max-distance", "-1"},
      {"train", "--out", out, "--max-distance", "100000000"},
      {"train", "--out", out, "--position", "absolute"},
      {"train", "--out", out, "--terms", "keys"},
      {"train", "--out", out, "--steps", "0"},
      {"train", "--out", out, "--lr", "0"},
      {"train", "--out", out, "--steps", "10", "--warmup-steps", "20"},
      {"train", "--out", out, "--dropout", "1"},
      {"train", "--out", out, "--position", "learned", "--max-len", "8",
       "--train-lengths", "8-16"},
      {"train", "--out", out, "--threads", "0"},
      {"train", "--out", out, "--config", P("missing.json")},
      {"train", "--out", out, "--config", P("bad.json")},
      {"train", "--out", out, "--config", P("unknown.json")},
      {"train", "--out", out, "--config", P("badsection.json")},
      {"train", "--out", out, "--task", "reverse", "--corpus", P("afile")},
      {"train", "--task", "reverse"},               // no --out
      {"train", "--out", P("afile/sub")},           // under a file
      {"train", "--out", P("missing/deeper/run")},  // no parent
      {"train", "--out", P("afile")},               // a file
      {"train", "--out", good},                     // holds a checkpoint
      {"train", "--resume", P("nothing")},
      {"train", "--resume", corrupt},
      {"train", "--resume", good, "--d-model", "32"},
      {"train", "--resume", good, "--out", out},
      {"train", "--resume", good, "--steps", "1"},  // below its step
      {"train", "--out", out, "--bogus"},
      // eval
      {"eval", P("nothing"), "--lengths", "4"},
      {"eval", corrupt, "--lengths", "4"},
      {"eval", good, "--lengths", "8-4"},
      {"eval", good, "--lengths", "0"},
      {"eval", good},
      {"eval", learned, "--lengths", "9"},  // 18 > max_len 16
      {"eval", good, "--lengths", "4", "--sequences", "0"},
      // demo
      {"demo", "--out", P("afile/sub")},
      {"demo", "--out", P("afile")},
      {"demo", "--steps", "0", "--out", out},
      {"demo", "--positions", "sinusoidal,bogus", "--out", out},
      {"demo", "--positions", "relative,relative", "--out", out},
      // sweep
      {"sweep", "--ks", "-1"},
      {"sweep", "--ks", "1,,2"},
      {"sweep", "--ks", "100000"},
      {"sweep", "--terms-list", "both,keys"},
      {"sweep", "--heads", "0"},
      {"sweep", "--task", "nosuch"},
      {"sweep", "--train-lengths", "9-3"},
      {"sweep", "--out", P("afile/sub")},
  };
  for (const auto& args : cases) {
    const std::set<std::string> before = Listing(root_);
    const CliResult r = RunRelpos(args);
    const std::string what = Joined(args);
    EXPECT_EQ(r.code, 2) << what << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << what << r.out;
    ASSERT_FALSE(r.err.empty()) << what;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << what << r.err;
    EXPECT_EQ(Listing(root_), before) << what << " left files behind";
  }
}

TEST_F(VerbTrainTest, HelpOnEveryVerb) {
  for (const std::string verb : {"train", "eval", "demo", "sweep"}) {
    const CliResult r = RunRelpos({verb, "--help"});
    EXPECT_EQ(r.code, 0) << verb;
    EXPECT_NE(r.out.find("--"), std::string::npos) << verb;
  }
}

// A short demo (3 steps per model, 8 evaluation sequences) writes results.json
// with the promised fields and an SVG plot.
TEST_F(VerbTrainTest, DemoWritesResultsAndPlot) {
  const std::string out = P("demo");
  const CliResult r = RunRelpos({"demo", "--out", out, "--steps", "3",
                              "--sequences", "8", "--progress", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("longest training length"), std::string::npos) << r.out;
  std::ifstream in(fs::path(out) / "results.json");
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& m : j["runs"]) {
    EXPECT_TRUE(m["name"].is_string());
    EXPECT_TRUE(m["position"] == "sinusoidal" || m["position"] == "shaw");
    // Lengths up to 4x the longest training length (16).
    EXPECT_TRUE(m["accuracy_by_length"].contains("64"));
    EXPECT_TRUE(m["sequence_accuracy_by_length"].contains("4"));
    EXPECT_EQ(m["accuracy_by_length"].size(), 16u);
  }
  EXPECT_TRUE(fs::exists(fs::path(out) / "accuracy.svg"));
  EXPECT_TRUE(train::HasCheckpoint((fs::path(out) / "relative").string()));
}

TEST_F(VerbTrainTest, SweepPrintsOneRowPerRun) {
  const CliResult r = RunRelpos({"sweep",
                              "--task",
                              "reverse",
                              "--train-lengths",
                              "1-3",
                              "--d-model",
                              "16",
                              "--heads",
                              "2",
                              "--layers",
                              "1",
                              "--d-ff",
                              "16",
                              "--steps",
                              "2",
                              "--batch-size",
                              "2",
                              "--ks",
                              "0,2",
                              "--terms-list",
                              "both,key,neither",
                              "--terms-k",
                              "2",
                              "--sequences",
                              "4",
                              "--progress",
                              "none",
                              "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // k in {0, 2} with both terms, then key and neither at k = 2.
  ASSERT_EQ(j["runs"].size(), 4u);
  EXPECT_EQ(j["runs"][0]["max_distance"], 0);
  EXPECT_EQ(j["runs"][0]["name"], "k=0 both");
  EXPECT_EQ(j["runs"][2]["settings"]["--terms"], "key");
  EXPECT_EQ(j["runs"][2]["max_distance"], 2);
  EXPECT_EQ(j["runs"][3]["settings"]["--terms"], "neither");
}

// Starts the real binary (args[0]) with `args`; returns its pid, or -1.
pid_t Spawn(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0)
    return -1;
  return pid;
}

// The real binary: SIGTERM mid-run writes a checkpoint, and the process ends
// by the signal (exit status 128 + 15 in a shell).
TEST_F(VerbTrainTest, SigtermSavesACheckpoint) {
  const std::string bin = std::string(RELPOS_BINARY_DIR) + "/bin/relpos";
  ASSERT_TRUE(fs::exists(bin)) << bin;
  const std::string dir = P("sig");
  std::vector<std::string> args = Cat({bin, "train", "--out", dir, "--steps",
                                       "1000000", "--checkpoint-every", "1"},
                                      Tiny());
  const pid_t pid = Spawn(args);
  ASSERT_GT(pid, 0);
  // Wait for the first checkpoint, then interrupt.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!train::HasCheckpoint(dir) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(train::HasCheckpoint(dir));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  const train::Checkpoint ck = train::ReadCheckpoint(dir, true);
  EXPECT_GE(ck.state.step, 1);
  EXPECT_LT(ck.state.step, 1000000);
}

// kill -9 at arbitrary moments (issue: "kill -9 at any moment leaves the last
// checkpoint intact"): a run that checkpoints every step is killed, resumed
// and killed again, at delays spread over a checkpoint's write. After every
// kill the folder must hold a complete, valid checkpoint whose step never
// goes backwards, and the run must still resume.
TEST_F(VerbTrainTest, SigkillAtAnyMomentKeepsTheCheckpoint) {
  const std::string bin = std::string(RELPOS_BINARY_DIR) + "/bin/relpos";
  ASSERT_TRUE(fs::exists(bin)) << bin;
  const std::string dir = P("kill9");
  int64_t last_step = 0;
  for (int round = 0; round < 8; ++round) {
    std::vector<std::string> args =
        round == 0 ? Cat({bin, "train", "--out", dir, "--steps", "1000000",
                          "--checkpoint-every", "1"},
                         Tiny())
                   : std::vector<std::string>{bin, "train", "--resume", dir,
                                              "--progress", "none"};
    const pid_t pid = Spawn(args);
    ASSERT_GT(pid, 0);
    // Wait until this run has committed a checkpoint past the last one (so
    // it is writing checkpoints continuously), then kill it after a delay
    // that differs per round (0-21 ms: several checkpoint writes).
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (train::HasCheckpoint(dir)) {
        try {
          if (train::ReadCheckpoint(dir, false).state.step > last_step) break;
        } catch (const std::exception&) {
          // Being replaced right now; look again.
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * round));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    // The folder holds a complete checkpoint (model and optimizer state
    // validated), at least as new as the last one seen.
    const train::Checkpoint ck = train::ReadCheckpoint(dir, true);
    EXPECT_GT(ck.state.step, last_step) << "round " << round;
    last_step = ck.state.step;
  }
  // And the run still continues from it, in-process this time.
  const CliResult r = RunRelpos({"train", "--resume", dir, "--steps",
                                 std::to_string(last_step + 2), "--progress",
                                 "none"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(train::ReadCheckpoint(dir, true).state.step, last_step + 2);
  // The kills left temporary files of interrupted saves; the resumed run's
  // saves removed them (docs/training.md).
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos)
        << e.path();
  }
}

}  // namespace
}  // namespace relpos::cli
