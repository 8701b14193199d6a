// The relpos binary against hostile input (docs/robustness.md): FIFOs where
// files belong, write errors on stdout, paths that are not UTF-8, configs
// that ask for more memory than the process may use (setrlimit in the
// child), grids too large to plan, device nodes and links as outputs, two
// writers of one folder, leftovers of killed saves. Every run has a deadline
// (tests/support/subprocess.h), so a regression that blocks fails here
// instead of hanging the suite.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_test_util.h"
#include "base/io/path_text.h"
#include "relpos/version.h"
#include "support/subprocess.h"
#include "train/checkpoint.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;
using ::relpos::testing::ChildResult;
using ::relpos::testing::ProgramOptions;
using ::relpos::testing::RelposBinary;
using ::relpos::testing::RunProgram;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = uint64_t{1} << 30;

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("relpos_hostile_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string P(const std::string& name) const {
    return (root_ / name).string();
  }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(root_ / name, std::ios::binary) << text;
  }
  void Fifo(const std::string& path) const {
    fs::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  }
  // A checkpoint of a tiny model (reverse, or a byte LM on generated text).
  std::string Checkpoint(const std::string& name, bool lm = false) const {
    const std::string dir = P(name);
    std::vector<std::string> args = {
        "train",    "--out",     dir,         "--steps", "3",
        "--d-model", "16",       "--heads",   "2",       "--layers",
        "1",        "--d-ff",    "32",        "--batch-size", "2",
        "--progress", "none"};
    const std::vector<std::string> data =
        lm ? std::vector<std::string>{"--task", "lm", "--train-lengths", "8",
                                      "--corpus-bytes", "4000"}
           : std::vector<std::string>{"--task", "reverse", "--train-lengths",
                                      "1-4"};
    args.insert(args.end(), data.begin(), data.end());
    const CliResult r = RunRelpos(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return dir;
  }
  // The file of `dir` whose name starts with `prefix` (model-, signal-...).
  static std::string FileOf(const std::string& dir, const std::string& prefix) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().rfind(prefix, 0) == 0) {
        return e.path().string();
      }
    }
    return "";
  }
  std::string Copy(const std::string& from, const std::string& name) const {
    fs::copy(from, P(name), fs::copy_options::recursive);
    return P(name);
  }

  fs::path root_;
};

// relpos with `args`, within `timeout`.
ChildResult Relpos(std::vector<std::string> args, ProgramOptions o = {}) {
  args.insert(args.begin(), RelposBinary());
  if (o.timeout == ProgramOptions{}.timeout) o.timeout = std::chrono::seconds(30);
  return RunProgram(args, o);
}

// The contract for bad input: no hang, exit 2, one line on stderr that is
// printable UTF-8 and holds `needle`.
void ExpectRefused(const ChildResult& r, const std::string& needle,
                   const std::string& what) {
  EXPECT_FALSE(r.timed_out) << what << ": blocked until killed";
  EXPECT_EQ(r.exit_code, 2) << what << ": " << r.err;
  ASSERT_FALSE(r.err.empty()) << what;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << what << ": " << r.err;
  EXPECT_TRUE(io::IsPrintableUtf8(r.err.substr(0, r.err.size() - 1)))
      << what << ": " << r.err;
  EXPECT_THAT(r.err, HasSubstr(needle)) << what;
}

TEST_F(HostileInput, FifosAreRefusedNeverWaitedOn) {
  const std::string ck = Checkpoint("ck"), lm = Checkpoint("lm", true);
  const std::string fifo = P("fifo");
  Fifo(fifo);
  struct Case {
    std::string what;
    std::vector<std::string> args;
  };
  std::vector<Case> cases = {
      {"--corpus", {"train", "--task", "lm", "--corpus", fifo, "--out",
                    P("o1"), "--progress", "none"}},
      {"--config", {"train", "--config", fifo, "--out", P("o2")}},
      {"compare.json", {"compare", "--tasks", "reverse", "--positions", "none",
                        "--seeds", "1", "--steps", "1", "--out", P("cmp")}},
      {"--svg", {"inspect", ck, "--svg", fifo}},
  };
  fs::create_directories(P("cmp"));
  Fifo(P("cmp/compare.json"));
  // A FIFO in place of each file of a checkpoint, for every verb reading it.
  for (const char* file : {"config.json", "model-", "optimizer-", "signal-"}) {
    const std::string dir = Copy(std::string(file) == "signal-" ? ck : lm,
                                 std::string("f-") + file);
    const std::string target = std::string(file) == "config.json"
                                   ? dir + "/config.json"
                                   : FileOf(dir, file);
    Fifo(target);
    const std::string name = std::string("FIFO ") + file;
    if (std::string(file) != "optimizer-") {
      cases.push_back({name + " inspect", {"inspect", dir}});
    }
    if (std::string(file) == "config.json" || std::string(file) == "model-") {
      cases.push_back({name + " eval", {"eval", dir, "--lengths", "3"}});
      cases.push_back({name + " generate", {"generate", dir, "--prompt", "a"}});
    }
    cases.push_back({name + " resume", {"train", "--resume", dir}});
  }
  for (const Case& c : cases) {
    const ChildResult r = Relpos(c.args, {.timeout = std::chrono::seconds(20)});
    ExpectRefused(r, "FIFO", c.what);
  }
  EXPECT_FALSE(fs::exists(P("o1")));
  EXPECT_FALSE(fs::exists(P("o2")));
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
}

// What a verb prints must reach stdout: a full device, a closed stdout and
// a pipe with no reader are write errors, exit 2 with one line. With
// SIGPIPE at its default, a closed pipe ends the process by SIGPIPE (the
// Unix filter convention).
TEST_F(HostileInput, StdoutWriteErrorsFailTheCommand) {
  const std::string ck = Checkpoint("ck"), lm = Checkpoint("lm", true);
  const std::vector<std::vector<std::string>> verbs = {
      {"generate", lm, "--prompt", "hi", "--max-new", "50"},
      {"generate", lm, "--prompt", "hi", "--json"},
      {"eval", ck, "--lengths", "2-3", "--progress", "none"},
      {"inspect", ck},
      {"settings"},
      {"params", "--d-model", "8", "--heads", "2", "--max-distance", "2"},
      {"train", "--task", "reverse", "--steps", "1", "--d-model", "8",
       "--heads", "2", "--layers", "1", "--d-ff", "8", "--out", P("t"),
       "--progress", "none"},
      {"--version"}};
  for (const auto& args : verbs) {
    const std::vector<std::pair<ProgramOptions, std::string>> sinks = {
        {{.stdout_path = "/dev/full"}, "No space left on device"},
        {{.stdout_path = "-"}, "Bad file descriptor"},
        {{.stdout_path = "|", .ignore_sigpipe = true}, "Broken pipe"}};
    for (const auto& [sink, reason] : sinks) {
      fs::remove_all(P("t"));
      ChildResult r = Relpos(args, sink);
      const std::string what = args[0] + " (" + reason + ")";
      // train reports its start on stderr before the error line.
      if (args[0] == "train") r.err.erase(0, r.err.find('\n') + 1);
      ExpectRefused(r, "cannot write to standard output: " + reason, what);
    }
  }
  const ChildResult piped =
      Relpos({"generate", lm, "--prompt", "hi"}, {.stdout_path = "|"});
  EXPECT_EQ(piped.signal, SIGPIPE) << piped.err;
  // Generation stops at the first failed write rather than running on.
  const ChildResult full =
      Relpos({"generate", lm, "--prompt", "hi", "--max-new", "100000"},
             {.stdout_path = "/dev/full"});
  EXPECT_LT(full.seconds, 10.0);
}

// Paths are bytes: a corpus, a checkpoint folder or an --out whose name is
// not UTF-8 works, and is shown escaped (one line of valid UTF-8) in
// messages and JSON; config.json stores it reversibly, so --resume finds
// the same corpus.
TEST_F(HostileInput, PathsThatAreNotUtf8) {
  std::string text;
  for (int i = 0; text.size() < 3000; ++i) {
    text += "line " + std::to_string(i) + " of a small corpus\n";
  }
  const std::string corpus = P("t\xff.txt");
  Write("t\xff.txt", text);
  const std::string dir = P("ck\xff");
  const std::vector<std::string> tiny = {
      "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32",
      "--batch-size", "2", "--train-lengths", "8", "--progress", "none"};
  std::vector<std::string> args = {"train", "--task", "lm", "--corpus",
                                   corpus,  "--steps", "2",  "--out", dir};
  args.insert(args.end(), tiny.begin(), tiny.end());
  ChildResult r = Relpos(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(io::IsPrintableUtf8(r.out.substr(0, r.out.size() - 1))) << r.out;
  const nlohmann::json config =
      nlohmann::json::parse(testing::ReadWholeFile(dir + "/config.json"));
  EXPECT_EQ(config["train"]["corpus_path"], io::PathText(corpus));
  r = Relpos({"train", "--resume", dir, "--steps", "4", "--progress", "none"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const std::string verb : {"eval", "inspect"}) {
    std::vector<std::string> a = {verb, dir, "--json"};
    if (verb == "eval") a.insert(a.end(), {"--lengths", "8"});
    r = Relpos(a);
    ASSERT_EQ(r.exit_code, 0) << verb << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["checkpoint"], io::PathText(dir)) << verb;
  }
  ExpectRefused(Relpos({"eval", P("missing\xff\n"), "--lengths", "3"}),
                "missing\\xff\\n", "a missing folder named in bytes");
  r = Relpos({"compare", "--tasks", "lm", "--corpus", corpus, "--positions",
              "none", "--seeds", "1", "--steps", "1", "--sequences", "2",
              "--out", P("cmp\xff"), "--train-lengths", "8", "--d-model", "16",
              "--heads", "2", "--layers", "1", "--progress", "none"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json cmp =
      nlohmann::json::parse(testing::ReadWholeFile(P("cmp\xff/compare.json")));
  EXPECT_THAT(cmp["tasks"][0]["data"].get<std::string>(),
              HasSubstr("t\\xff.txt"));
}

// The memory a configuration needs is worked out before anything is
// allocated: what cannot fit the child's 2 GiB address space is refused
// in well under the 30-40 s that building the model took, with a message
// naming the largest parts; what the tensor files cannot hold is refused
// before any model is built.
TEST_F(HostileInput, MemoryIsPlannedBeforeAllocating) {
  const std::string ck = Checkpoint("ck"), lm = Checkpoint("lm", true);
  auto huge = [&](const std::string& from, const std::string& name) {
    const std::string dir = Copy(from, name);
    nlohmann::json j =
        nlohmann::json::parse(testing::ReadWholeFile(dir + "/config.json"));
    j["model"]["max_distance"] = 1 << 20;
    j["model"]["layers"] = 7;
    j["model"]["d_model"] = 64;
    std::ofstream(dir + "/config.json") << j.dump();
    return dir;
  };
  const std::string big = huge(ck, "big"), big_lm = huge(lm, "big_lm");
  const ProgramOptions limited{.timeout = std::chrono::seconds(20),
                               .address_space_limit = 2 * kGiB};
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"eval", big, "--lengths", "3"},
           {"inspect", big},
           {"generate", big_lm, "--prompt", "a"},
           {"train", "--resume", big}}) {
    const ChildResult r = Relpos(args, limited);
    ExpectRefused(r, "needs about", args[0] + " of a 2^20-distance config");
    EXPECT_THAT(r.err, HasSubstr("RLIMIT_AS"));
    EXPECT_LT(r.seconds, 10.0) << args[0];
  }
  // Without the limit the config fits the machine, but its tensor files
  // cannot hold what it declares: refused before a model is built.
  ExpectRefused(Relpos({"eval", big, "--lengths", "3"}),
                "bytes of tensors the model config implies", "eval, no limit");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"train", "--task", "reverse", "--max-distance", "1048576",
            "--layers", "4", "--d-model", "64", "--out", P("t1")},
           {"train", "--task", "reverse", "--batch-size", "65536",
            "--train-lengths", "65536", "--out", P("t2")},
           {"eval", ck, "--lengths", "65536", "--batch-size", "65536"}}) {
    ExpectRefused(Relpos(args, limited), "needs about", args.back());
  }
  EXPECT_FALSE(fs::exists(P("t1")));
  EXPECT_FALSE(fs::exists(P("t2")));
  // The same refusal from a documented cap instead of a limit.
  ChildResult r = Relpos({"eval", ck, "--lengths", "2000"},
                         {.env = {"RELPOS_MEMORY_LIMIT=1M"}});
  ExpectRefused(r, "RELPOS_MEMORY_LIMIT=1M", "RELPOS_MEMORY_LIMIT");
  ExpectRefused(Relpos({"eval", ck, "--lengths", "3"},
                       {.env = {"RELPOS_MEMORY_LIMIT=lots"}}),
                "RELPOS_MEMORY_LIMIT must be a size", "a malformed cap");
  // A signal file of 1 GiB (sparse: nothing on disk) is refused by its size
  // before a byte of it is read.
  const std::string sig = Copy(ck, "sig");
  ASSERT_EQ(::truncate(FileOf(sig, "signal-").c_str(), kGiB), 0);
  r = Relpos({"inspect", sig}, limited);
  ExpectRefused(r, "is too large", "a 1 GiB signal file");
  EXPECT_LT(r.seconds, 5.0);
}

// compare's grid is capped before it is planned, refused grids leave no
// --out and print one line, and SIGTERM is acted on while planning.
TEST_F(HostileInput, CompareGridsAreCappedAndRefusalsLeaveNothing) {
  std::string ranges;
  for (int i = 0; i < 5000; ++i) {
    if (i > 0) ranges += ',';
    ranges.append(std::to_string(1000 * i))
        .append("-")
        .append(std::to_string(1000 * i + 999));
  }
  const std::vector<std::pair<std::string, std::string>> refused = {
      {ranges, "more than 1000 seeds"},
      {"0-18446744073709551615", "more than 1000 seeds"},
      {"1,1", "names 1 twice"},
      {"-1", "--seeds must be"},
      {"18446744073709551616", "--seeds must be"}};
  for (const auto& [seeds, needle] : refused) {
    const ChildResult r = Relpos({"compare", "--quick", "--seeds", seeds,
                                  "--out", P("out")});
    ExpectRefused(r, needle, "--seeds " + seeds.substr(0, 20));
    EXPECT_LT(r.seconds, 5.0);
  }
  for (const char* positions : {"shaw,bogus", "shaw,shaw", "shaw,relative"}) {
    ExpectRefused(Relpos({"compare", "--quick", "--positions", positions,
                          "--out", P("out")}),
                  "--positions", positions);
  }
  EXPECT_FALSE(fs::exists(P("out")));
  // The largest grid (1000 seeds x 10 schemes) takes seconds to plan;
  // SIGTERM then stops the planning, and nothing is written.
  const pid_t pid = testing::StartProgram({RelposBinary(), "compare",
                                           "--tasks", "reverse", "--seeds",
                                           "1000", "--out", P("big")});
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const auto sent = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  const ChildResult r = testing::WaitChild(pid, std::chrono::seconds(20));
  const double after = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - sent)
                           .count();
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_LT(after, 3.0) << "SIGTERM was not acted on while planning";
  EXPECT_FALSE(fs::exists(P("big")));
}

// --svg (and every atomic replacement) writes only over a regular file or a
// new path: a FIFO, a symbolic link and a device node are refused and stay
// what they were.
TEST_F(HostileInput, SvgReplacesOnlyRegularFiles) {
  const std::string ck = Checkpoint("ck");
  Fifo(P("fifo"));
  Write("real.svg", "old");
  fs::create_symlink(P("real.svg"), P("link.svg"));
  std::vector<std::string> targets = {P("fifo"), P("link.svg")};
  if (::geteuid() == 0 &&
      ::mknod(P("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    targets.push_back(P("null"));
  }
  for (const std::string& t : targets) {
    ExpectRefused(Relpos({"inspect", ck, "--svg", t}), "not a regular file",
                  t);
  }
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(P("fifo"))));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(P("link.svg"))));
  EXPECT_EQ(testing::ReadWholeFile(P("real.svg")), "old");
  if (targets.size() == 3) {
    EXPECT_TRUE(fs::is_character_file(fs::symlink_status(P("null"))));
  }
  ASSERT_EQ(Relpos({"inspect", ck, "--svg", P("new.svg")}).exit_code, 0);
  EXPECT_THAT(testing::ReadWholeFile(P("new.svg")), HasSubstr("<svg"));
}

// One writer per folder: while a training run holds its --out, a second
// `train --out`, `train --resume` or `compare --out` of that folder is
// refused with a clear message (and changes nothing); after it ends, the
// folder can be resumed.
TEST_F(HostileInput, OneWriterPerFolder) {
  const std::string dir = P("run");
  const pid_t pid = testing::StartProgram(
      {RelposBinary(), "train", "--task", "reverse", "--steps", "1000000",
       "--checkpoint-every", "1", "--d-model", "16", "--heads", "2",
       "--layers", "1", "--d-ff", "32", "--batch-size", "2",
       "--train-lengths", "1-4", "--progress", "none", "--out", dir});
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!train::HasCheckpoint(dir) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(train::HasCheckpoint(dir));
  const std::string needle =
      "is in use by another relpos process (pid " + std::to_string(pid) + ")";
  ExpectRefused(Relpos({"train", "--task", "reverse", "--out", dir}),
                "already holds a checkpoint", "a second train --out");
  ExpectRefused(Relpos({"train", "--resume", dir}), needle, "train --resume");
  ExpectRefused(Relpos({"compare", "--tasks", "reverse", "--positions", "none",
                        "--seeds", "1", "--out", dir}),
                needle, "compare --out");
  ::kill(pid, SIGTERM);
  const ChildResult first = testing::WaitChild(pid, std::chrono::seconds(30));
  EXPECT_EQ(first.signal, SIGTERM);
  const int64_t step = train::ReadCheckpoint(dir, true).state.step;
  const ChildResult resumed =
      Relpos({"train", "--resume", dir, "--steps", std::to_string(step + 1),
              "--progress", "none"});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  // Two fresh runs racing for one new folder: one trains, the other is
  // refused (by the lock, or by the checkpoint the first committed).
  const std::string race = P("race");
  std::vector<std::string> quick = {"train",  "--task", "reverse", "--steps",
                                    "30",     "--d-model", "16", "--heads",
                                    "2",      "--layers", "1", "--d-ff", "32",
                                    "--batch-size", "2", "--progress", "none",
                                    "--out",  race};
  ChildResult a, b;
  std::thread ta([&] { a = Relpos(quick); });
  std::thread tb([&] { b = Relpos(quick); });
  ta.join();
  tb.join();
  EXPECT_EQ((a.exit_code == 0) + (b.exit_code == 0), 1)
      << a.err << " / " << b.err;
  EXPECT_EQ(a.exit_code + b.exit_code, 2) << a.err << " / " << b.err;
  EXPECT_EQ(train::ReadCheckpoint(race, true).state.step, 30);
}

// The temporary files of saves killed mid-write are removed by the next
// save of the folder (docs/training.md), and nothing that is not a
// checkpoint's is touched.
TEST_F(HostileInput, TheNextSaveRemovesLeftoverTemporaryFiles) {
  const std::string dir = Checkpoint("ck");
  for (const char* name :
       {"config.json.tmp.99999.0", "model-00000003.safetensors.tmp.1.2",
        "optimizer-00000001.1.safetensors.tmp.3.4",
        "signal-00000002.json.tmp.5.6", "notes.txt.tmp.7.8"}) {
    std::ofstream(fs::path(dir) / name) << "partial";
  }
  const CliResult r =
      RunRelpos({"train", "--resume", dir, "--steps", "4", "--progress",
                 "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> temps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) temps.push_back(name);
  }
  EXPECT_EQ(temps, std::vector<std::string>{"notes.txt.tmp.7.8"});
}

// One seed parser for every verb: out-of-range seeds are refused, never
// clamped to 2^64 - 1.
TEST_F(HostileInput, SeedsAreRefusedNotClamped) {
  const std::string ck = Checkpoint("ck"), lm = Checkpoint("lm", true);
  for (const char* seed : {"-1", "18446744073709551616", "1e23", " 5", "+5"}) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"generate", lm, "--prompt", "a", "--seed", seed},
             {"eval", ck, "--lengths", "3", "--seed", seed},
             {"train", "--task", "reverse", "--seed", seed, "--out", P("t")},
             {"compare", "--quick", "--seeds", seed, "--out", P("c")}}) {
      const CliResult r = RunRelpos(args);
      EXPECT_EQ(r.code, 2) << args[0] << " " << seed << ": " << r.err;
      EXPECT_THAT(r.err, HasSubstr("must be")) << args[0] << " " << seed;
    }
  }
  EXPECT_EQ(RunRelpos({"generate", lm, "--prompt", "a", "--max-new", "2",
                       "--seed", "18446744073709551615"})
                .code,
            0);
}

// Every compute verb takes --threads; the binary's OpenMP threads wait
// passively unless the user chose a policy (spinning threads stall busy
// machines, docs/robustness.md).
TEST_F(HostileInput, ThreadsAndTheWaitPolicy) {
  for (const char* verb : {"train", "eval", "generate", "compare", "sweep",
                           "demo", "bench"}) {
    const CliResult r = RunRelpos({verb, "--help"});
    EXPECT_THAT(r.out, HasSubstr("--threads")) << verb;
  }
  const std::string lm = Checkpoint("lm", true);
  EXPECT_EQ(RunRelpos({"generate", lm, "--prompt", "a", "--max-new", "2",
                       "--threads", "2"})
                .code,
            0);
  // libgomp prints its settings at start: the process that runs has a spin
  // count of 1000 (a short spin, then sleep), or the user's choice.
  ChildResult r = Relpos({"--version"}, {.env = {"OMP_DISPLAY_ENV=verbose"}});
  EXPECT_THAT(r.err, HasSubstr("GOMP_SPINCOUNT = '1000'"));
  EXPECT_EQ(r.out, std::string(RELPOS_VERSION_STRING) + "\n");
  r = Relpos({"--version"},
             {.env = {"OMP_DISPLAY_ENV=verbose", "OMP_WAIT_POLICY=active"}});
  EXPECT_THAT(r.err, HasSubstr("OMP_WAIT_POLICY = 'ACTIVE'"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("GOMP_SPINCOUNT = '1000'")));
  r = Relpos({"--version"},
             {.env = {"OMP_DISPLAY_ENV=verbose", "OMP_WAIT_POLICY=passive"}});
  EXPECT_THAT(r.err, HasSubstr("GOMP_SPINCOUNT = '0'"));
}

}  // namespace
}  // namespace relpos::cli
