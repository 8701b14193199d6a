// `relpos bench` on tiny sizes: the JSON carries every field with values that
// agree with the FLOP convention, and bad usage exits 2 with one line. No
// timing is asserted beyond "positive and finite": this is not a speed test.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "relpos/lab/bench.h"
#include "cli/bench_timing.h"
#include "cli/cli_test_util.h"
#include "relpos/error.h"

namespace relpos::cli {
namespace {

bool PositiveFinite(const nlohmann::json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) &&
         v.get<double>() > 0.0;
}

// GFLOP/s times milliseconds must give back the convention's FLOP count
// (docs/math.md section 7): 4 B H n^2 d forward, 2.5x that backward. The JSON
// doubles round-trip, so only the divide/multiply rounding (a few ulps) is
// left: 1e-9 relative is ample and still catches any convention slip.
void ExpectFlopConvention(const nlohmann::json& row) {
  const double b = row["batch"], h = row["heads"], n = row["n"],
               d = row["dim"];
  const double fwd = 4.0 * b * h * n * n * d;
  const double fwd_from_rate =
      row["fwd_gflops"].get<double>() * 1e9 * row["fwd_ms"].get<double>() * 1e-3;
  const double bwd_from_rate =
      row["bwd_gflops"].get<double>() * 1e9 * row["bwd_ms"].get<double>() * 1e-3;
  EXPECT_NEAR(fwd_from_rate, fwd, 1e-9 * fwd) << row.dump();
  EXPECT_NEAR(bwd_from_rate, 2.5 * fwd, 1e-9 * 2.5 * fwd) << row.dump();
}

TEST(BenchVerb, JsonTinySizesAllVariants) {
  const std::vector<std::string> args = {
      "bench", "--n",       "16,33", "--k",       "0,3",  "--heads",
      "2",     "--dim",     "8",     "--repeats", "1",    "--sgemm-size",
      "64",    "--threads", "2",     "--json"};
  CliResult r = RunRelpos(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(PositiveFinite(j["sgemm_gflops"])) << j.dump();
  EXPECT_EQ(j["threads"], 2);
  ASSERT_TRUE(j["rows"].is_array());
  // Per n: one vanilla row, one relative and one reference row per k.
  ASSERT_EQ(j["rows"].size(), 2u * (1 + 2 + 2)) << j.dump();

  std::map<std::string, int> per_variant;
  for (const nlohmann::json& row : j["rows"]) {
    const std::string variant = row["variant"];
    ++per_variant[variant];
    const int64_t n = row["n"], k = row["k"];
    EXPECT_TRUE(n == 16 || n == 33) << row.dump();
    EXPECT_EQ(row["heads"], 2);
    EXPECT_EQ(row["dim"], 8);
    EXPECT_EQ(row["batch"], 1);
    // Vanilla is timed beside each relative row (one round per k).
    EXPECT_EQ(row["repeats"], variant == "vanilla" ? 2 : 1) << row.dump();
    for (const char* field : {"fwd_ms", "bwd_ms", "fwd_gflops", "bwd_gflops"}) {
      EXPECT_TRUE(PositiveFinite(row[field])) << field << " " << row.dump();
    }
    ExpectFlopConvention(row);
    ASSERT_TRUE(row["extra_bytes"].is_number_integer()) << row.dump();
    EXPECT_GE(row["extra_bytes"].get<int64_t>(), 0) << row.dump();
    EXPECT_EQ(row["nxn_bytes"], n * n * 4);
    if (variant == "vanilla") {
      EXPECT_EQ(k, 0);
      EXPECT_FALSE(row.contains("overhead_pct"));
    } else {
      EXPECT_TRUE(k == 0 || k == 3) << row.dump();
    }
    if (variant == "relative") {
      // Overhead is measured (any sign on a noisy machine); the bound is exact.
      ASSERT_TRUE(row.contains("overhead_pct")) << row.dump();
      EXPECT_TRUE(std::isfinite(row["overhead_pct"].get<double>()));
      // One round: the spread is that round's ratio.
      EXPECT_EQ(row["overhead_min_pct"], row["overhead_pct"]) << row.dump();
      EXPECT_EQ(row["overhead_max_pct"], row["overhead_pct"]) << row.dump();
      EXPECT_DOUBLE_EQ(row["flop_bound_pct"].get<double>(),
                       100.0 * (2 * k + 1) / static_cast<double>(n));
      EXPECT_EQ(row["extra_bytes_source"], "FusedExtraBytes");
      // The relative kernel keeps at least one (2k+1)-wide W row.
      EXPECT_GT(row["extra_bytes"].get<int64_t>(), 0) << row.dump();
    }
    if (variant == "reference") {
      // The reference's prob and dprob rows: 2 Nk floats.
      EXPECT_EQ(row["extra_bytes"], 2 * n * 4);
      ASSERT_TRUE(row.contains("fused_speedup")) << row.dump();
      EXPECT_TRUE(PositiveFinite(row["fused_speedup"])) << row.dump();
    }
  }
  EXPECT_EQ(per_variant["vanilla"], 2);
  EXPECT_EQ(per_variant["relative"], 4);
  EXPECT_EQ(per_variant["reference"], 4);
}

// docs/math.md section 6: no n x n buffer, extra memory linear in n. Doubling n
// may at most double the fused kernel's extra bytes, and at n = 512 they stay
// below one n x n float matrix (1 MiB).
TEST(BenchVerb, FusedExtraMemoryIsLinearInN) {
  CliResult r = RunRelpos({"bench", "--n", "256,512", "--k", "4", "--heads", "1",
                        "--dim", "8", "--repeats", "1", "--sgemm-size", "16",
                        "--variants", "vanilla,relative", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 4u) << j.dump();
  std::map<std::pair<std::string, int64_t>, int64_t> extra;
  for (const nlohmann::json& row : j["rows"]) {
    extra[{row["variant"], row["n"]}] = row["extra_bytes"];
  }
  for (const std::string variant : {"vanilla", "relative"}) {
    const int64_t at256 = extra[std::make_pair(variant, int64_t{256})];
    const int64_t at512 = extra[std::make_pair(variant, int64_t{512})];
    EXPECT_LE(at512, 2 * at256) << variant;
    EXPECT_LT(at512, 512 * 512 * 4) << variant;
  }
}

TEST(BenchVerb, VariantFilterAndReferenceCap) {
  CliResult r = RunRelpos({"bench", "--n", "16,33", "--k", "0,3", "--heads", "1",
                        "--dim", "4", "--repeats", "2", "--sgemm-size", "16",
                        "--variants", "reference", "--reference-max-n", "16",
                        "--reference-repeats", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 2u) << j.dump();  // n = 16 only, k = 0 and 3
  for (const nlohmann::json& row : j["rows"]) {
    EXPECT_EQ(row["variant"], "reference");
    EXPECT_EQ(row["n"], 16);
    EXPECT_EQ(row["repeats"], 1);  // --reference-repeats, not --repeats
    EXPECT_FALSE(row.contains("fused_speedup"));  // no relative row to compare
    ExpectFlopConvention(row);
  }
}

// Runs the command line with std::cerr captured (the verbs report progress
// there directly, as the training verbs do).
CliResult RunCapturingCerr(const std::vector<std::string>& args,
                           std::string* cerr_text) {
  std::ostringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  CliResult r = RunRelpos(args);
  std::cerr.rdbuf(old);
  *cerr_text = captured.str();
  return r;
}

// With --json nothing reaches stdout before the end, so stderr says what is
// being timed, one line per measurement ("lines" is what auto picks off a
// terminal), numbered against the planned count; --progress none is silent.
TEST(BenchVerb, ProgressOnStderrOneLinePerMeasurement) {
  std::vector<std::string> args = {"bench", "--n", "16,33", "--k", "0,3",
                                   "--heads", "1", "--dim", "4", "--repeats",
                                   "1", "--sgemm-size", "16",
                                   "--reference-max-n", "16", "--json",
                                   "--progress", "lines"};
  std::string progress;
  CliResult r = RunCapturingCerr(args, &progress);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  // n = 16: vanilla, relative x 2, reference x 2; n = 33: no reference.
  ASSERT_EQ(j["rows"].size(), 8u);
  EXPECT_EQ(std::count(progress.begin(), progress.end(), '\n'), 8) << progress;
  EXPECT_NE(progress.find("bench: [1/8] timing vanilla n=16\n"),
            std::string::npos)
      << progress;
  EXPECT_NE(progress.find("bench: [5/8] timing reference n=16 k=3\n"),
            std::string::npos)
      << progress;
  EXPECT_NE(progress.find("bench: [8/8] timing relative n=33 k=3\n"),
            std::string::npos)
      << progress;

  // --positions and --layer count their own rows.
  r = RunCapturingCerr({"bench", "--positions", "shaw,alibi", "--n", "16",
                        "--k", "2,3", "--heads", "1", "--dim", "4",
                        "--repeats", "1", "--sgemm-size", "16", "--json",
                        "--progress", "lines"},
                       &progress);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(progress.find("[4/4] timing alibi n=16\n"), std::string::npos)
      << progress;
  r = RunCapturingCerr({"bench", "--layer", "--n", "8", "--k", "16",
                        "--heads", "1",
                        "--dim", "4", "--d-ff", "8", "--repeats", "1",
                        "--json", "--progress", "lines"},
                       &progress);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(progress.find("[2/2] timing layer shaw n=8 k=16\n"),
            std::string::npos)
      << progress;

  args.back() = "none";
  r = RunCapturingCerr(args, &progress);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(progress.empty()) << progress;
}

// Side-by-side timing: rounds call every function once, in order, after
// an untimed warm-up round (kept when slower than self_warm_seconds).
TEST(BenchTiming, InterleavedRoundsAlternate) {
  std::string log;
  const std::vector<std::function<void()>> fns = {[&log] { log += 'a'; },
                                                  [&log] { log += 'b'; }};
  std::vector<std::vector<double>> t = InterleavedSeconds(fns, 3);
  EXPECT_EQ(log, "abababab");  // warm-up round, then three timed rounds
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].size(), 3u);
  EXPECT_EQ(t[1].size(), 3u);
  log.clear();
  t = InterleavedSeconds(fns, 2, /*self_warm_seconds=*/-1.0);
  EXPECT_EQ(log, "abab");  // the warm-up round counts as the first
  EXPECT_EQ(t[0].size(), 2u);
  EXPECT_THROW(InterleavedSeconds(fns, 0), InvalidArgument);

  const RatioSpread r = RoundRatios({2, 9, 4}, {1, 3, 2});
  EXPECT_EQ(r.median, 2.0);
  EXPECT_EQ(r.min, 2.0);
  EXPECT_EQ(r.max, 3.0);
  EXPECT_EQ(Median({3, 1, 4, 2}), 2.5);
  EXPECT_THROW(RoundRatios({1}, {1, 2}), InvalidArgument);
}

TEST(BenchVerb, TextTable) {
  CliResult r = RunRelpos({"bench", "--n", "16", "--k", "2", "--heads", "1",
                        "--dim", "4", "--repeats", "1", "--sgemm-size", "16"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want :
       {"SGEMM 16^3", "GFLOP/s", "fwd ms", "bwd ms", "extra mem", "vanilla ",
        "relative ", "reference ", "overhead vs vanilla", "FLOP bound",
        "faster"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
}

// Every bad invocation: exit code 2, exactly one line on stderr, nothing on
// stdout (flags are checked before anything is measured or printed).
TEST(BenchVerb, BadUsage) {
  const std::vector<std::vector<std::string>> cases = {
      {"bench", "--n", "0"},
      {"bench", "--n", "-5"},
      {"bench", "--n", "abc"},
      {"bench", "--n", "16,x"},
      {"bench", "--n", "70000"},
      {"bench", "--k", "-1"},
      {"bench", "--heads", "0"},
      {"bench", "--dim", "0"},
      {"bench", "--batch", "0"},
      {"bench", "--threads", "-1"},
      {"bench", "--repeats", "0"},
      {"bench", "--reference-repeats", "0"},
      {"bench", "--reference-max-n", "-1"},
      {"bench", "--sgemm-size", "0"},
      {"bench", "--sgemm-size", "100000"},
      {"bench", "--variants", "fast"},
      {"bench", "--positions", "shaw,nope"},
      {"bench", "--positions", "t5", "--variants", "vanilla"},
      {"bench", "--positions", "rope", "--dim", "7"},
      // 1 x 4096 x 4096 x 64 = 2^30 floats per tensor: over the 2^25 bound.
      {"bench", "--n", "4096", "--heads", "4096", "--dim", "64"},
      {"bench", "--bogus"},
      {"bench", "--repeats"},
  };
  for (const auto& args : cases) {
    CliResult r = RunRelpos(args);
    EXPECT_EQ(r.code, 2) << Joined(args);
    EXPECT_TRUE(r.out.empty()) << Joined(args) << r.out;
    ASSERT_FALSE(r.err.empty()) << Joined(args);
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << Joined(args) << r.err;
  }
}

// --positions: per n one vanilla row, then every listed scheme (shaw and
// shaw-asym once per k), each named by its scheme, with its path and its
// overhead over that vanilla row.
TEST(BenchVerb, PositionsOneRowPerScheme) {
  const std::vector<std::string> args = {
      "bench",     "--positions",
      "shaw,shaw-asym,shaw-log,t5,alibi,rope,xl",
      "--n",       "16,33",
      "--k",       "0,3",
      "--heads",   "2",
      "--dim",     "8",
      "--repeats", "1",
      "--sgemm-size", "64",
      "--json"};
  CliResult r = RunRelpos(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 2u * (1 + 2 + 2 + 5)) << j.dump();
  std::map<std::string, int> per_scheme;
  for (const nlohmann::json& row : j["rows"]) {
    const std::string name = row["variant"];
    ++per_scheme[name];
    ExpectFlopConvention(row);
    const std::string path = row["path"];
    EXPECT_TRUE(path == "fused" || path == "reference") << row.dump();
    if (name == "vanilla" || name == "shaw" || name == "rope") {
      EXPECT_EQ(path, "fused") << row.dump();
    }
    if (name == "vanilla") {
      EXPECT_FALSE(row.contains("overhead_pct")) << row.dump();
    } else {
      ASSERT_TRUE(row.contains("overhead_pct")) << row.dump();
      EXPECT_TRUE(std::isfinite(row["overhead_pct"].get<double>()));
    }
    const int64_t k = row["k"];
    if (name == "shaw" || name == "shaw-asym") {
      EXPECT_TRUE(k == 0 || k == 3) << row.dump();
    } else {
      EXPECT_EQ(k, 0) << row.dump();
    }
  }
  EXPECT_EQ(per_scheme["vanilla"], 2);
  EXPECT_EQ(per_scheme["shaw"], 4);
  EXPECT_EQ(per_scheme["shaw-asym"], 4);
  for (const char* one : {"shaw-log", "t5", "alibi", "rope", "xl"}) {
    EXPECT_EQ(per_scheme[one], 2) << one;
  }
}

// --layer: per n one vanilla row and one shaw row per k, with the fields of
// the issue (variant, n, fwd_ms, peak_bytes); the peak holds at least the
// weights plus one [n, d_model] and one [n, d_ff] activation, and at most
// the weights plus a generous 32 [n, d_model] + 4 [n, d_ff] buffers + 1 MiB
// of kernel workspace (a sanity bound: the exact sum is the workload's).
TEST(BenchVerb, LayerRows) {
  const int64_t d = 16, heads = 2, f = 24;
  CliResult r = RunRelpos({"bench", "--layer", "--n", "8,33", "--k", "0,3",
                           "--heads", "2", "--dim", "8", "--d-ff", "24",
                           "--repeats", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mode"], "layer");
  ASSERT_EQ(j["rows"].size(), 2u * (1 + 2)) << j.dump();
  for (const nlohmann::json& row : j["rows"]) {
    const std::string name = row["variant"];
    EXPECT_TRUE(name == "vanilla" || name == "shaw") << row.dump();
    EXPECT_TRUE(PositiveFinite(row["fwd_ms"])) << row.dump();
    EXPECT_EQ(row["d_model"], d);
    EXPECT_EQ(row["heads"], heads);
    EXPECT_EQ(row["d_ff"], f);
    const int64_t n = row["n"], k = row["k"], peak = row["peak_bytes"];
    const int64_t tables = name == "shaw" ? 2 * (2 * k + 1) * (d / heads) : 0;
    const int64_t weights =
        4 * (4 * d * d + 4 * d + 4 * d + 2 * d * f + f + d + tables);
    EXPECT_GE(peak, weights + 4 * n * (d + f)) << row.dump();
    EXPECT_LE(peak, weights + 4 * n * (32 * d + 4 * f) + (1 << 20))
        << row.dump();
    EXPECT_EQ(row.contains("overhead_pct"), name == "shaw") << row.dump();
  }
  CliResult text = RunRelpos({"bench", "--layer", "--n", "8", "--heads", "2",
                              "--dim", "4", "--d-ff", "8", "--repeats", "1",
                              "--positions", "shaw", "--k", "2"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("encoder layer"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("shaw"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("vanilla "), std::string::npos) << text.out;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"bench", "--layer", "--positions", "t5"},
        {"bench", "--layer", "--variants", "vanilla"},
        {"bench", "--layer", "--d-ff", "0"},
        {"bench", "--layer", "--n", "65536", "--d-ff", "4096"}}) {
    CliResult e = RunRelpos(bad);
    EXPECT_EQ(e.code, 2) << Joined(bad);
    EXPECT_TRUE(e.out.empty()) << Joined(bad);
    EXPECT_EQ(e.err.find('\n'), e.err.size() - 1) << Joined(bad) << e.err;
  }
}

// The layer workload is deterministic for a seed, finite, and the relative
// tables change its output (the shaw rows time a different computation).
TEST(LayerWorkload, DeterministicAndRelativeMatters) {
  bench::LayerShape shape{.batch = 2, .n = 9, .d_model = 8, .heads = 2,
                          .d_ff = 12, .relative = true, .max_distance = 2};
  bench::LayerWorkload a(shape, 1), b(shape, 1);
  a.Forward();
  b.Forward();
  EXPECT_EQ(a.output(), b.output());
  shape.relative = false;
  bench::LayerWorkload plain(shape, 1);
  plain.Forward();
  double diff = 0;
  for (size_t i = 0; i < a.output().size(); ++i) {
    ASSERT_TRUE(std::isfinite(a.output()[i]));
    diff = std::max(diff, double(std::fabs(a.output()[i] - plain.output()[i])));
  }
  EXPECT_GT(diff, 1e-3);
  shape.heads = 3;
  EXPECT_THROW(bench::LayerWorkload(shape, 1), InvalidArgument);
}

TEST(BenchVerb, Help) {
  CliResult r = RunRelpos({"bench", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* want : {"--n", "--k", "--heads", "--dim", "--threads",
                           "--repeats", "--json", "--positions", "--layer",
                           "--d-ff"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << r.out;
  }
}

}  // namespace
}  // namespace relpos::cli
