// `relpos bench`: times the fused kernel (vanilla and relative) and the
// reference on self-attention problems and reports medians, GFLOP/s, extra
// memory and the machine's own SGEMM rate measured in the same run
// (docs/math.md section 7; docs/benchmarks.md explains the methodology).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "relpos/lab/bench.h"
#include "cli/bench_timing.h"
#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "relpos/error.h"
#include "relpos/schemes.h"

namespace relpos::cli {
namespace {

using bench::Variant;

// Bounds that keep a typo from allocating gigabytes: each of q, k, v, out,
// dout, dq, dk, dv holds batch * heads * n * dim floats, at most 2^25 (128 MiB)
// each, about 1 GiB in all.
constexpr int64_t kMaxN = 65536;
constexpr int64_t kMaxK = 65536;
constexpr int64_t kMaxHeadsOrDim = 4096;
constexpr int64_t kMaxElements = int64_t{1} << 25;
constexpr int kMaxThreads = 1024;
constexpr int kMaxRepeats = 1000;

struct BenchFlags {
  std::vector<int64_t> n = {256, 512, 1024, 2048, 4096, 8192};
  std::vector<int64_t> k = {16, 64};
  std::vector<std::string> variants = {"vanilla", "relative", "reference"};
  // Non-empty: one row per relative scheme (relpos/schemes.h; "vanilla" is
  // plain attention, always timed) instead of the variants above.
  std::vector<std::string> positions;
  int64_t batch = 1;
  int64_t heads = 8;
  int64_t dim = 64;
  int threads = 0;
  int repeats = 3;
  int reference_repeats = 1;
  int64_t reference_max_n = 2048;
  int64_t sgemm_size = 1024;
  bool json = false;
  // --layer: one pre-LayerNorm encoder layer (d_model = heads x dim), the
  // inference forward, per --positions variant (vanilla, shaw).
  bool layer = false;
  int64_t d_ff = 2048;
  std::string progress = "auto";
};

// What is being timed, on stderr, so that a long run (the reference at
// n = 2048 takes most of a minute; --json prints only at the end) is never
// silent. "bar" (auto on a terminal): one line redrawn in place and erased
// before each table row; "lines" (auto otherwise): one line per
// measurement as it starts; "none": nothing.
class BenchProgress {
 public:
  BenchProgress(const std::string& mode, int64_t total) : total_(total) {
    mode_ = mode == "auto" ? (isatty(STDERR_FILENO) ? "bar" : "lines") : mode;
  }
  ~BenchProgress() { Clear(); }
  BenchProgress(const BenchProgress&) = delete;
  BenchProgress& operator=(const BenchProgress&) = delete;

  // Before measurement `what` ("relative n=1024 k=16").
  void Start(const std::string& what) {
    ++done_;
    const std::string line = "bench: [" + std::to_string(done_) + "/" +
                             std::to_string(total_) + "] timing " + what;
    if (mode_ == "lines") std::cerr << line << "\n" << std::flush;
    if (mode_ == "bar") {
      std::cerr << "\r" << line << " ...\033[K" << std::flush;
      shown_ = true;
    }
  }
  // A planned measurement that is not run.
  void Skip() { ++done_; }
  // Erases the redrawn line (before a row goes to stdout).
  void Clear() {
    if (shown_) std::cerr << "\r\033[K" << std::flush;
    shown_ = false;
  }

 private:
  std::string mode_;
  int64_t total_ = 0, done_ = 0;
  bool shown_ = false;
};

std::string Describe(const std::string& name, int64_t n, bool has_k,
                     int64_t k) {
  return name + " n=" + std::to_string(n) +
         (has_k ? " k=" + std::to_string(k) : "");
}

// --layer's default lengths (when --n is not given).
const std::vector<int64_t> kLayerDefaultN = {512, 1024, 2048, 4096};

struct Row {
  Variant variant = Variant::kVanilla;
  // What the row is called ("vanilla", "relative", "reference", or a scheme
  // of --positions), whether it has a k, and which path ran it.
  std::string name;
  bool has_k = false;
  std::string path = "fused";
  bench::WorkloadShape shape;
  int repeats = 0;
  double fwd_s = 0, bwd_s = 0;
  int64_t extra_bytes = 0;
  std::string extra_bytes_source;
  // Relative rows: fwd+bwd time over the vanilla row's at the same n, minus
  // one, and the FLOP bound (2k+1)/Nk of docs/math.md section 4.
  // The overhead is the median of per-round ratios, the rows timed
  // interleaved with vanilla (InterleavedSeconds); min / max: the
  // smallest and largest round's.
  std::optional<double> overhead_pct, flop_bound_pct;
  std::optional<double> overhead_min_pct, overhead_max_pct;
  // Reference rows: reference fwd+bwd time over relative fused's (same n, k).
  std::optional<double> fused_speedup;

  double FwdGflops() const { return bench::ForwardFlops(shape) / fwd_s * 1e-9; }
  double BwdGflops() const {
    return bench::BackwardFlops(shape) / bwd_s * 1e-9;
  }
  double TotalSeconds() const { return fwd_s + bwd_s; }
};

bool Selected(const BenchFlags& f, const char* variant) {
  for (const std::string& v : f.variants) {
    if (v == variant) return true;
  }
  return false;
}

void Validate(const BenchFlags& f) {
  RELPOS_CLI_CHECK(!f.n.empty(), "--n must list at least one size");
  RELPOS_CLI_CHECK(!f.k.empty(), "--k must list at least one distance");
  // Each scheme's own conditions (RoPE's even --dim), before anything runs.
  for (const std::string& name : f.positions) {
    if (name == "vanilla") continue;
    for (int64_t k : f.k) {
      const bench::WorkloadShape shape{
          .heads = f.heads, .dim = f.dim, .max_distance = k};
      try {
        FindScheme(name).Validate(bench::SchemeBenchLayer(shape));
      } catch (const InvalidArgument& e) {
        RELPOS_CLI_CHECK(false, "--positions " << name << " (--heads "
                                               << f.heads << ", --dim " << f.dim
                                               << ", --k " << k
                                               << "): " << MessageBody(e));
      }
    }
  }
  for (int64_t n : f.n) {
    // Each factor is at most 2^16, so the product cannot overflow.
    const int64_t elements = f.batch * f.heads * n * f.dim;
    RELPOS_CLI_CHECK(elements <= kMaxElements,
                     "--batch x --heads x --n x --dim must be <= "
                         << kMaxElements << " per tensor (got " << f.batch
                         << " x " << f.heads << " x " << n << " x " << f.dim
                         << " = " << elements << ")");
  }
}

// 1536 -> "1.50 KiB"
std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double value = static_cast<double>(bytes);
  int u = 0;
  while (value >= 1024.0 && u < 3) {
    value /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", value,
                units[u]);
  return buf;
}

// A row's description (everything but its times).
Row AttentionRow(bench::AttentionWorkload& w, Variant variant,
                 const bench::WorkloadShape& shape) {
  Row row;
  row.variant = variant;
  row.name = bench::VariantName(variant);
  row.has_k = variant != Variant::kVanilla;
  row.path = variant == Variant::kReference ? "reference" : "fused";
  row.shape = shape;
  row.extra_bytes = w.ExtraBytes();
  row.extra_bytes_source = w.ExtraBytesSource();
  return row;
}

Row Measure(Variant variant, const bench::WorkloadShape& shape, int threads,
            int repeats) {
  bench::AttentionWorkload w(variant, shape, threads);
  Row row = AttentionRow(w, variant, shape);
  row.repeats = repeats;
  // The forward's warm-up also leaves out and lse for the backward.
  row.fwd_s = MedianSeconds([&w] { w.Forward(); }, repeats);
  row.bwd_s = MedianSeconds([&w] { w.Backward(); }, repeats);
  return row;
}

// A workload's two timed calls (the backward needs the forward before it).
struct Calls {
  std::function<void()> fwd, bwd;
};

// Samples of vanilla's calls collected over one n.
struct Samples {
  std::vector<double> fwd, bwd;
};

std::vector<double> Totals(const std::vector<double>& fwd,
                           const std::vector<double>& bwd) {
  std::vector<double> t(fwd.size());
  for (size_t r = 0; r < t.size(); ++r) t[r] = fwd[r] + bwd[r];
  return t;
}

// Times `row_calls` interleaved with vanilla's, round by round (vanilla
// forward, backward, then the row's), so that load on a shared machine
// moves both alike: sets the row's medians and its overhead, the median of
// the per-round ratios of forward + backward time, with their spread, and
// appends vanilla's samples to *vanilla.
void TimeAgainstVanilla(const Calls& vanilla_calls, const Calls& row_calls,
                        int repeats, Row* row, Samples* vanilla) {
  const std::vector<std::vector<double>> t = InterleavedSeconds(
      {vanilla_calls.fwd, vanilla_calls.bwd, row_calls.fwd, row_calls.bwd},
      repeats);
  row->repeats = static_cast<int>(t[2].size());
  row->fwd_s = Median(t[2]);
  row->bwd_s = Median(t[3]);
  const RatioSpread ratio =
      RoundRatios(Totals(t[2], t[3]), Totals(t[0], t[1]));
  row->overhead_pct = 100.0 * (ratio.median - 1.0);
  row->overhead_min_pct = 100.0 * (ratio.min - 1.0);
  row->overhead_max_pct = 100.0 * (ratio.max - 1.0);
  vanilla->fwd.insert(vanilla->fwd.end(), t[0].begin(), t[0].end());
  vanilla->bwd.insert(vanilla->bwd.end(), t[1].begin(), t[1].end());
}

// The vanilla row's times: the medians of every sample of it taken beside
// the other rows, or (none) its own `repeats` rounds.
void SetVanillaTimes(const Calls& calls, int repeats, Samples samples,
                     Row* row) {
  if (samples.fwd.empty()) {
    const std::vector<std::vector<double>> t =
        InterleavedSeconds({calls.fwd, calls.bwd}, repeats);
    samples = {t[0], t[1]};
  }
  row->repeats = static_cast<int>(samples.fwd.size());
  row->fwd_s = Median(samples.fwd);
  row->bwd_s = Median(samples.bwd);
}

std::string Percent(double pct) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", pct);
  return buf;
}

void PrintHeader(const BenchFlags& f, int threads, double sgemm_gflops,
                 std::ostream& out) {
  char line[256];
  std::snprintf(line, sizeof line,
                "relpos bench: B=%lld H=%lld d=%lld, %d thread(s), medians of "
                "%d (reference: %d, single-threaded)\n",
                static_cast<long long>(f.batch),
                static_cast<long long>(f.heads),
                static_cast<long long>(f.dim), threads, f.repeats,
                f.reference_repeats);
  out << line;
  std::snprintf(line, sizeof line,
                "same-run SGEMM %lld^3: %.1f GFLOP/s\n"
                "FLOPs: vanilla count for every variant (fwd 4 B H n^2 d, bwd "
                "2.5x fwd), so GFLOP/s ratios are speed ratios\n\n",
                static_cast<long long>(f.sgemm_size), sgemm_gflops);
  out << line;
  std::snprintf(line, sizeof line,
                "%-9s %6s %6s %10s %10s %9s %9s %7s %12s  %s\n", "variant",
                "n", "k", "fwd ms", "bwd ms", "fwd GF/s", "bwd GF/s",
                "%SGEMM", "extra mem", "note");
  out << line << std::flush;
}

void PrintRow(const Row& r, double sgemm_gflops, std::ostream& out) {
  const double total_gflops =
      (bench::ForwardFlops(r.shape) + bench::BackwardFlops(r.shape)) /
      r.TotalSeconds() * 1e-9;
  std::string note;
  if (r.overhead_pct) {
    note = "overhead vs vanilla " + Percent(*r.overhead_pct);
    if (r.overhead_min_pct && r.overhead_max_pct) {
      note += " [" + Percent(*r.overhead_min_pct) + ", " +
              Percent(*r.overhead_max_pct) + "]";
    }
    if (r.flop_bound_pct) {
      note += " (FLOP bound " + Percent(*r.flop_bound_pct) + ")";
    }
  }
  if (r.fused_speedup) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "relative fused is %.1fx faster",
                  *r.fused_speedup);
    note = buf;
  }
  if (r.path == "reference") {
    note += note.empty() ? "" : "; ";
    note += r.variant == Variant::kReference
                ? "extra mem computed"
                : "reference path (not fused yet); extra mem computed";
  }
  char line[512];
  std::snprintf(
      line, sizeof line, "%-9s %6lld %6s %10.3f %10.3f %9.2f %9.2f %6.1f%% %12s  %s\n",
      r.name.c_str(), static_cast<long long>(r.shape.n),
      r.has_k ? std::to_string(r.shape.max_distance).c_str() : "-",
      r.fwd_s * 1e3, r.bwd_s * 1e3, r.FwdGflops(), r.BwdGflops(),
      100.0 * total_gflops / sgemm_gflops, HumanBytes(r.extra_bytes).c_str(),
      note.c_str());
  out << line << std::flush;
}

nlohmann::json RowJson(const Row& r) {
  const bench::WorkloadShape& s = r.shape;
  nlohmann::json j = {
      {"variant", r.name},
      {"path", r.path},
      {"n", s.n},
      // Rows without a clipping distance (vanilla, t5, alibi, ...) report 0.
      {"k", r.has_k ? s.max_distance : 0},
      {"batch", s.batch},
      {"heads", s.heads},
      {"dim", s.dim},
      {"repeats", r.repeats},
      {"fwd_ms", r.fwd_s * 1e3},
      {"bwd_ms", r.bwd_s * 1e3},
      {"fwd_gflops", r.FwdGflops()},
      {"bwd_gflops", r.BwdGflops()},
      {"extra_bytes", r.extra_bytes},
      {"extra_bytes_source", r.extra_bytes_source},
      // One float32 n x n matrix: the per-layer bias a materialising
      // implementation keeps (docs/math.md section 6), for comparison.
      {"nxn_bytes", s.n * s.n * static_cast<int64_t>(sizeof(float))},
  };
  if (r.overhead_pct) j["overhead_pct"] = *r.overhead_pct;
  if (r.overhead_min_pct) j["overhead_min_pct"] = *r.overhead_min_pct;
  if (r.overhead_max_pct) j["overhead_max_pct"] = *r.overhead_max_pct;
  if (r.flop_bound_pct) j["flop_bound_pct"] = *r.flop_bound_pct;
  if (r.fused_speedup) j["fused_speedup"] = *r.fused_speedup;
  return j;
}

// The row name of a scheme: "vanilla" for plain attention (none).
std::string RowName(const Scheme& scheme) {
  return scheme.id == SchemeId::kNone ? "vanilla" : scheme.name;
}

// --positions' choices: vanilla, then every scheme that acts inside
// attention, in the registry's order.
std::vector<std::string> BenchSchemeNames() {
  std::vector<std::string> names = {"vanilla"};
  for (const Scheme& s : Schemes()) {
    if (s.InsideAttention()) names.push_back(s.name);
  }
  return names;
}

// A scheme row's description (everything but its times).
Row SchemeRow(const bench::SchemeWorkload& w,
              const bench::WorkloadShape& shape) {
  Row row;
  row.name = RowName(w.scheme());
  row.has_k = bench::SchemeUsesMaxDistance(w.scheme());
  row.path = w.Fused() ? "fused" : "reference";
  row.shape = shape;
  row.extra_bytes = w.ExtraBytes();
  row.extra_bytes_source =
      w.Fused() ? "FusedExtraBytes" : "computed (reference row buffers)";
  return row;
}

Calls SchemeCalls(bench::SchemeWorkload& w) {
  return {[&w] { w.Forward(); }, [&w] { w.Backward(); }};
}

// --positions: per n, vanilla first (every other row's overhead is over it),
// then each listed scheme; shaw and shaw-asym once per --k. Each scheme is
// timed interleaved with vanilla (TimeAgainstVanilla). Schemes the fused
// kernel does not run yet take the reference path, with
// --reference-repeats, and only up to --reference-max-n.
std::vector<const Scheme*> ListedSchemes(const BenchFlags& f) {
  std::vector<const Scheme*> schemes;
  for (const std::string& name : f.positions) {
    if (name != "vanilla") schemes.push_back(&FindScheme(name));
  }
  return schemes;
}

// How many measurements RunSchemes plans (for the progress count).
int64_t SchemeMeasurements(const BenchFlags& f) {
  int64_t per_n = 1;  // vanilla
  for (const Scheme* s : ListedSchemes(f)) {
    per_n += bench::SchemeUsesMaxDistance(*s)
                 ? static_cast<int64_t>(f.k.size())
                 : 1;
  }
  return per_n * static_cast<int64_t>(f.n.size());
}

void RunSchemes(const BenchFlags& f, int threads, double sgemm_gflops,
                std::vector<Row>* rows, BenchProgress& progress,
                std::ostream& out) {
  const std::vector<const Scheme*> schemes = ListedSchemes(f);
  const Scheme& vanilla_scheme = FindScheme(SchemeId::kNone);
  for (int64_t n : f.n) {
    bench::WorkloadShape shape{.batch = f.batch, .heads = f.heads, .n = n,
                               .dim = f.dim, .max_distance = 0};
    progress.Start(Describe("vanilla", n, false, 0));
    bench::SchemeWorkload vanilla_w(vanilla_scheme, shape, threads);
    const Calls vanilla_calls = SchemeCalls(vanilla_w);
    Samples vanilla_samples;
    std::vector<Row> timed;
    for (const Scheme* scheme : schemes) {
      const std::vector<int64_t> ks =
          bench::SchemeUsesMaxDistance(*scheme) ? f.k : std::vector<int64_t>{0};
      for (int64_t k : ks) {
        shape.max_distance = k;
        bench::SchemeWorkload w(*scheme, shape, threads);
        if (!w.Fused() && n > f.reference_max_n) {
          progress.Skip();
          Row skipped;
          skipped.name = RowName(*scheme);
          skipped.repeats = 0;  // a placeholder line, printed in order
          timed.push_back(skipped);
          continue;
        }
        progress.Start(Describe(RowName(*scheme), n,
                                bench::SchemeUsesMaxDistance(*scheme), k));
        Row r = SchemeRow(w, shape);
        TimeAgainstVanilla(vanilla_calls, SchemeCalls(w),
                           w.Fused() ? f.repeats : f.reference_repeats, &r,
                           &vanilla_samples);
        timed.push_back(r);
      }
    }
    shape.max_distance = 0;
    Row vanilla = SchemeRow(vanilla_w, shape);
    SetVanillaTimes(vanilla_calls, f.repeats, vanilla_samples, &vanilla);
    progress.Clear();
    timed.insert(timed.begin(), vanilla);
    for (const Row& r : timed) {
      if (r.repeats == 0) {
        if (!f.json) {
          out << r.name << " at n=" << n
              << ": skipped (reference path beyond --reference-max-n "
              << f.reference_max_n << ")\n";
        }
        continue;
      }
      rows->push_back(r);
      if (!f.json) PrintRow(r, sgemm_gflops, out);
    }
  }
}

// ---- --layer: one encoder layer, inference forward ----

struct LayerRow {
  std::string name;  // "vanilla" or "shaw"
  bench::LayerShape shape;
  int repeats = 0;
  double fwd_s = 0;
  int64_t peak_bytes = 0;
  // shaw: over vanilla at the same n, the median of interleaved rounds'
  // ratios, and the smallest and largest round's.
  std::optional<double> overhead_pct, overhead_min_pct, overhead_max_pct;
};

std::vector<std::string> LayerPositions(const BenchFlags& f) {
  return f.positions.empty() ? std::vector<std::string>{"vanilla", "shaw"}
                             : f.positions;
}

void ValidateLayer(const BenchFlags& f) {
  RELPOS_CLI_CHECK(!f.n.empty(), "--n must list at least one size");
  for (const std::string& name : LayerPositions(f)) {
    RELPOS_CLI_CHECK(name == "vanilla" || name == "shaw",
                     "--layer times --positions vanilla and shaw (the "
                     "model's attention), got '" << name << "'");
  }
  for (int64_t n : f.n) {
    // Each factor is at most 2^20, so the product cannot overflow.
    const int64_t widest = std::max(f.heads * f.dim, f.d_ff);
    const int64_t elements = f.batch * n * widest;
    RELPOS_CLI_CHECK(elements <= kMaxElements,
                     "--batch x --n x max(--heads x --dim, --d-ff) must be <= "
                         << kMaxElements << " per buffer (got " << f.batch
                         << " x " << n << " x " << widest << " = " << elements
                         << ")");
  }
}

LayerRow MeasureLayer(const std::string& name, const bench::LayerShape& shape,
                      int threads, int repeats) {
  bench::LayerWorkload w(shape, threads);
  LayerRow row;
  row.name = name;
  row.shape = shape;
  row.repeats = repeats;
  row.fwd_s = MedianSeconds([&w] { w.Forward(); }, repeats);
  row.peak_bytes = w.PeakBytes();
  return row;
}

nlohmann::json LayerRowJson(const LayerRow& r) {
  const bench::LayerShape& s = r.shape;
  nlohmann::json j = {
      {"variant", r.name},
      {"n", s.n},
      {"k", s.relative ? s.max_distance : 0},
      {"batch", s.batch},
      {"d_model", s.d_model},
      {"heads", s.heads},
      {"d_ff", s.d_ff},
      {"repeats", r.repeats},
      {"fwd_ms", r.fwd_s * 1e3},
      {"peak_bytes", r.peak_bytes},
      {"peak_bytes_source",
       "computed: weights, x, y, the block's buffers and FusedExtraBytes"},
  };
  if (r.overhead_pct) j["overhead_pct"] = *r.overhead_pct;
  if (r.overhead_min_pct) j["overhead_min_pct"] = *r.overhead_min_pct;
  if (r.overhead_max_pct) j["overhead_max_pct"] = *r.overhead_max_pct;
  return j;
}

void PrintLayerRow(const LayerRow& r, std::ostream& out) {
  const std::string note =
      r.overhead_pct ? "overhead vs vanilla " + Percent(*r.overhead_pct) +
                           " [" + Percent(*r.overhead_min_pct) + ", " +
                           Percent(*r.overhead_max_pct) + "]"
                     : "";
  const std::string k =
      r.shape.relative ? std::to_string(r.shape.max_distance) : "-";
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %6lld %5s %10.3f %12s  %s\n",
                r.name.c_str(), static_cast<long long>(r.shape.n), k.c_str(),
                r.fwd_s * 1e3, HumanBytes(r.peak_bytes).c_str(),
                note.c_str());
  out << line << std::flush;
}

// The rows of one n: vanilla (if listed) first, then shaw once per --k,
// each a fresh layer with the same seeded weights. With both listed each
// shaw layer is timed interleaved with vanilla's (rounds of vanilla then
// shaw), its overhead the median of the per-round ratios; vanilla's time
// is the median of all its rounds.
std::vector<LayerRow> MeasureLayersAtN(const BenchFlags& f,
                                       const std::vector<std::string>& positions,
                                       bench::LayerShape shape, int threads,
                                       BenchProgress& progress) {
  const bool has_vanilla =
      std::find(positions.begin(), positions.end(), "vanilla") !=
      positions.end();
  const bool has_shaw = std::find(positions.begin(), positions.end(),
                                  "shaw") != positions.end();
  std::vector<LayerRow> rows;
  std::optional<bench::LayerWorkload> vanilla_w;
  std::vector<double> vanilla_s;
  if (has_vanilla) {
    progress.Start("layer " + Describe("vanilla", shape.n, false, 0));
    vanilla_w.emplace(shape, threads);
    rows.push_back({.name = "vanilla", .shape = shape});
  }
  for (int64_t k : has_shaw ? f.k : std::vector<int64_t>{}) {
    bench::LayerShape s = shape;
    s.relative = true;
    s.max_distance = k;
    progress.Start("layer " + Describe("shaw", s.n, true, k));
    if (!vanilla_w) {
      rows.push_back(MeasureLayer("shaw", s, threads, f.repeats));
      continue;
    }
    bench::LayerWorkload w(s, threads);
    const std::vector<std::vector<double>> t = InterleavedSeconds(
        {[&vanilla_w] { vanilla_w->Forward(); }, [&w] { w.Forward(); }},
        f.repeats);
    const RatioSpread ratio = RoundRatios(t[1], t[0]);
    rows.push_back({.name = "shaw",
                    .shape = s,
                    .repeats = static_cast<int>(t[1].size()),
                    .fwd_s = Median(t[1]),
                    .peak_bytes = w.PeakBytes(),
                    .overhead_pct = 100.0 * (ratio.median - 1.0),
                    .overhead_min_pct = 100.0 * (ratio.min - 1.0),
                    .overhead_max_pct = 100.0 * (ratio.max - 1.0)});
    vanilla_s.insert(vanilla_s.end(), t[0].begin(), t[0].end());
  }
  if (vanilla_w) {
    if (vanilla_s.empty()) {
      vanilla_s = InterleavedSeconds(
          {[&vanilla_w] { vanilla_w->Forward(); }}, f.repeats)[0];
    }
    rows[0].repeats = static_cast<int>(vanilla_s.size());
    rows[0].fwd_s = Median(vanilla_s);
    rows[0].peak_bytes = vanilla_w->PeakBytes();
  }
  progress.Clear();
  return rows;
}

// Per n: vanilla (if listed) first, then shaw once per --k.
void RunLayer(const BenchFlags& f, std::ostream& out) {
  ValidateLayer(f);
  ScopedOmpThreads omp(f.threads);
  const int threads = omp.threads();
  const std::vector<std::string> positions = LayerPositions(f);
  if (!f.json) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "relpos bench --layer: pre-LayerNorm encoder layer, B=%lld "
                  "d_model=%lld heads=%lld d_ff=%lld, GELU, inference "
                  "forward, %d thread(s), medians of %d\n\n",
                  static_cast<long long>(f.batch),
                  static_cast<long long>(f.heads * f.dim),
                  static_cast<long long>(f.heads),
                  static_cast<long long>(f.d_ff), threads, f.repeats);
    out << line;
    std::snprintf(line, sizeof line, "%-8s %6s %5s %10s %12s  %s\n",
                  "variant", "n", "k", "fwd ms", "peak mem", "note");
    out << line << std::flush;
  }
  int64_t per_n = 0;
  for (const std::string& name : positions) {
    per_n += name == "shaw" ? static_cast<int64_t>(f.k.size()) : 1;
  }
  BenchProgress progress(f.progress,
                         per_n * static_cast<int64_t>(f.n.size()));
  std::vector<LayerRow> rows;
  for (int64_t n : f.n) {
    bench::LayerShape shape{.batch = f.batch, .n = n,
                            .d_model = f.heads * f.dim, .heads = f.heads,
                            .d_ff = f.d_ff, .relative = false,
                            .max_distance = 0};
    for (LayerRow& r : MeasureLayersAtN(f, positions, shape, threads,
                                        progress)) {
      rows.push_back(r);
      if (!f.json) PrintLayerRow(rows.back(), out);
    }
  }
  if (f.json) {
    nlohmann::json j = {{"mode", "layer"},
                        {"threads", threads},
                        {"repeats", f.repeats},
                        {"rows", nlohmann::json::array()}};
    for (const LayerRow& r : rows) j["rows"].push_back(LayerRowJson(r));
    out << j.dump() << "\n";
  }
}

// The vanilla and relative rows of one n. With both selected, each
// relative row is timed interleaved with vanilla (TimeAgainstVanilla) and
// vanilla's row gets the medians of all its samples; appends and prints
// them (vanilla first) and returns the relative rows.
std::vector<Row> RunFusedVariants(const BenchFlags& f,
                                  bench::WorkloadShape shape, int threads,
                                  BenchProgress& progress, double sgemm_gflops,
                                  std::vector<Row>* rows, std::ostream& out) {
  const int64_t n = shape.n;
  std::optional<bench::AttentionWorkload> vanilla_w;
  Calls vanilla_calls;
  Samples vanilla_samples;
  if (Selected(f, "vanilla")) {
    progress.Start(Describe("vanilla", n, false, 0));
    vanilla_w.emplace(Variant::kVanilla, shape, threads);
    vanilla_calls = {[&vanilla_w] { vanilla_w->Forward(); },
                     [&vanilla_w] { vanilla_w->Backward(); }};
  }
  std::vector<Row> relative;
  if (Selected(f, "relative")) {
    for (int64_t k : f.k) {
      shape.max_distance = k;
      progress.Start(Describe("relative", n, true, k));
      if (!vanilla_w) {
        relative.push_back(
            Measure(Variant::kRelative, shape, threads, f.repeats));
        continue;
      }
      bench::AttentionWorkload w(Variant::kRelative, shape, threads);
      Row r = AttentionRow(w, Variant::kRelative, shape);
      TimeAgainstVanilla(vanilla_calls,
                         {[&w] { w.Forward(); }, [&w] { w.Backward(); }},
                         f.repeats, &r, &vanilla_samples);
      r.flop_bound_pct =
          100.0 * static_cast<double>(2 * k + 1) / static_cast<double>(n);
      relative.push_back(r);
    }
  }
  progress.Clear();
  if (vanilla_w) {
    shape.max_distance = 0;
    Row vanilla = AttentionRow(*vanilla_w, Variant::kVanilla, shape);
    SetVanillaTimes(vanilla_calls, f.repeats, vanilla_samples, &vanilla);
    rows->push_back(vanilla);
    if (!f.json) PrintRow(vanilla, sgemm_gflops, out);
  }
  for (const Row& r : relative) {
    rows->push_back(r);
    if (!f.json) PrintRow(r, sgemm_gflops, out);
  }
  return relative;
}

// How many measurements RunBench plans (for the progress count).
int64_t PlannedMeasurements(const BenchFlags& f) {
  if (!f.positions.empty()) return SchemeMeasurements(f);
  int64_t planned = 0;
  const int64_t ks = static_cast<int64_t>(f.k.size());
  for (int64_t n : f.n) {
    planned += (Selected(f, "vanilla") ? 1 : 0) +
               (Selected(f, "relative") ? ks : 0) +
               (Selected(f, "reference") && n <= f.reference_max_n ? ks : 0);
  }
  return planned;
}

void RunBench(const BenchFlags& f, std::ostream& out) {
  if (f.layer) {
    RunLayer(f, out);
    return;
  }
  Validate(f);
  ScopedOmpThreads omp(f.threads);
  const int threads = omp.threads();
  // SGEMM first, then the attention rows, all under the same thread count.
  const double sgemm_gflops =
      SgemmGflops(f.sgemm_size, std::max(f.repeats, 3));
  if (!f.json) PrintHeader(f, threads, sgemm_gflops, out);

  BenchProgress progress(f.progress, PlannedMeasurements(f));
  std::vector<Row> rows;
  if (!f.positions.empty()) {
    RunSchemes(f, threads, sgemm_gflops, &rows, progress, out);
  }
  for (int64_t n : f.positions.empty() ? f.n : std::vector<int64_t>{}) {
    bench::WorkloadShape shape{.batch = f.batch, .heads = f.heads, .n = n,
                               .dim = f.dim, .max_distance = 0};
    const std::vector<Row> relative =
        RunFusedVariants(f, shape, threads, progress, sgemm_gflops, &rows, out);
    if (Selected(f, "reference") && n <= f.reference_max_n) {
      for (size_t t = 0; t < f.k.size(); ++t) {
        shape.max_distance = f.k[t];
        progress.Start(Describe("reference", n, true, f.k[t]));
        Row r = Measure(Variant::kReference, shape, threads,
                        f.reference_repeats);
        progress.Clear();
        if (!relative.empty()) {
          r.fused_speedup = r.TotalSeconds() / relative[t].TotalSeconds();
        }
        rows.push_back(r);
        if (!f.json) PrintRow(rows.back(), sgemm_gflops, out);
      }
    }
  }

  if (f.json) {
    nlohmann::json j = {
        {"sgemm_gflops", sgemm_gflops},
        {"sgemm_size", f.sgemm_size},
        {"threads", threads},
        {"repeats", f.repeats},
        {"reference_repeats", f.reference_repeats},
        {"flop_convention",
         "vanilla for every variant: fwd 4*B*H*n*n*d, bwd 2.5x fwd"},
        {"rows", nlohmann::json::array()},
    };
    for (const Row& r : rows) j["rows"].push_back(RowJson(r));
    out << j.dump() << "\n";
  }
}

}  // namespace

void AddBenchVerb(CLI::App& app, std::ostream& out) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Time fused (vanilla, relative) and reference attention; report "
      "medians, GFLOP/s, extra memory and same-run SGEMM GFLOP/s");
  CLI::Option* n_opt =
      sub->add_option("--n", f->n, "Sequence lengths, comma-separated "
                      "(--layer: default 512,1024,2048,4096)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, kMaxN))
      ->capture_default_str();
  sub->add_option("--k", f->k, "Clipping distances k, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{0}, kMaxK))
      ->capture_default_str();
  CLI::Option* variants_opt = sub->add_option("--variants", f->variants,
                  "Which of vanilla,relative,reference to run")
      ->delimiter(',')
      ->check(CLI::IsMember({"vanilla", "relative", "reference"}))
      ->capture_default_str();
  sub->add_option(
         "--positions", f->positions,
         "Time these relative schemes instead of --variants: any of " +
             [] {
               std::string all;
               for (const std::string& n : BenchSchemeNames()) {
                 all += all.empty() ? "" : ",";
                 all += n;
               }
               return all;
             }() +
             " (vanilla is always timed; overhead_pct is over it)")
      ->delimiter(',')
      ->check(CLI::IsMember(BenchSchemeNames()))
      ->excludes(variants_opt);
  sub->add_option("--batch", f->batch, "Batch size B")
      ->check(CLI::Range(int64_t{1}, kMaxHeadsOrDim))
      ->capture_default_str();
  sub->add_option("--heads", f->heads, "Heads H")
      ->check(CLI::Range(int64_t{1}, kMaxHeadsOrDim))
      ->capture_default_str();
  sub->add_option("--dim", f->dim, "Head width d (dk = dv)")
      ->check(CLI::Range(int64_t{1}, kMaxHeadsOrDim))
      ->capture_default_str();
  sub->add_option("--threads", f->threads,
                  "Threads for the fused kernel and SGEMM (0: OpenMP default)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  sub->add_option("--repeats", f->repeats,
                  "Timed runs per measurement (the median is reported)")
      ->check(CLI::Range(1, kMaxRepeats))
      ->capture_default_str();
  sub->add_option("--reference-repeats", f->reference_repeats,
                  "Timed runs per reference measurement (it is slow)")
      ->check(CLI::Range(1, kMaxRepeats))
      ->capture_default_str();
  sub->add_option("--reference-max-n", f->reference_max_n,
                  "Largest n the reference runs at (0: never)")
      ->check(CLI::Range(int64_t{0}, kMaxN))
      ->capture_default_str();
  sub->add_option("--sgemm-size", f->sgemm_size,
                  "M = N = K of the same-run SGEMM reference")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  sub->add_flag("--json", f->json, "Print one JSON object");
  AddProgressFlag(sub, &f->progress)
      ->description(
          "What is being timed, on stderr: auto (a line redrawn in place on "
          "a terminal, a line per measurement otherwise), bar, lines or "
          "none");
  sub->add_flag("--layer", f->layer,
                "Time one pre-LayerNorm encoder layer (d_model = --heads x "
                "--dim, FFN --d-ff, GELU), inference forward, for "
                "--positions vanilla,shaw (default both; shaw per --k)")
      ->excludes(variants_opt);
  sub->add_option("--d-ff", f->d_ff, "--layer: feed-forward width")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->callback([f, n_opt, &out] {
    if (f->layer && n_opt->count() == 0) f->n = kLayerDefaultN;
    RunBench(*f, out);
  });
}

}  // namespace relpos::cli
