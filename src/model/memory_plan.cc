#include "model/memory_plan.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/io/file_io.h"
#include "model/arch.h"
#include "model/positions.h"
#include "relpos/schemes.h"

namespace relpos::model {
namespace {

constexpr double kFloat = 4;  // the model computes in float
constexpr double kMiB = 1024.0 * 1024.0;
// Address space a worker thread reserves: its stack (8 MiB) and, once it
// allocates, a glibc malloc arena (64 MiB).
constexpr double kReservedPerThread = 72 * kMiB;
// The fused kernel's per-thread tile scratch (a few query and key tiles).
constexpr double kKernelScratchPerThread = 1 * kMiB;

// What a config's parameters add up to.
struct ModelSizes {
  double params = 0;        // every parameter, in floats
  double largest = 0;       // the largest tensor, in floats
  double layer_tables = 0;  // one layer's kernel tables (KernelTable;
                            // seq2seq: the encoder's and the decoder's)
  double table_rows = 0;    // rows of those tables (0 without)
};

// Blocks whose activations a batch keeps, in units of one self-attention
// block over the batch's rows: a seq2seq model's encoder blocks run over
// the sources and its decoder blocks, each with a cross-attention as well,
// over the targets; both sides are counted at the batch's length (the
// longer side, DataSource::SequenceLength), and a decoder block as two.
double BlockUnits(const model::ModelConfig& c) {
  double units = 0;
  for (const model::StackInfo& stack : model::Stacks(c)) {
    units += static_cast<double>(stack.side.layers) * (stack.cross ? 2 : 1);
  }
  return units;
}

// Whether the attention kernel reads a table of this role as one of its
// inputs (AttentionInputs::ak, av, bias) and accumulates its gradient per
// thread.
bool KernelTable(TableRole role) {
  return role == TableRole::kKeyTable || role == TableRole::kValueTable ||
         role == TableRole::kScoreBias;
}

ModelSizes SizesOf(const model::ModelConfig& c) {
  ModelSizes s;
  for (const model::ParameterShape& p : model::ParameterShapes(c)) {
    const double n = static_cast<double>(p.numel());
    s.params += n;
    s.largest = std::max(s.largest, n);
  }
  // One layer's kernel tables per stack, as the registry declares them for
  // the scheme (ParameterShapes has validated the config).
  for (const model::StackInfo& stack : model::Stacks(c)) {
    const Scheme& scheme = FindScheme(stack.side.position);
    const SchemeLayer layer = model::SchemeLayerOf(stack.side);
    for (const SchemeTable& t : scheme.Tables(layer)) {
      if (!KernelTable(t.role)) continue;
      double n = 1;
      for (int64_t e : t.shape) n *= static_cast<double>(e);
      s.layer_tables += n;
      s.table_rows =
          static_cast<double>(TableRows(scheme.Call(layer, 1).attention));
    }
  }
  return s;
}

// Floats of the key table a layer builds over every distance of a call of
// `tokens` positions, and of its gradient, for the schemes that build one
// (Transformer-XL's W R: SchemeCall::xl_table): [H, 2 tokens + 1, dh]
// each; 0 for the others.
double DistanceTableFloats(const model::ModelConfig& c, double tokens) {
  const SchemeCall call =
      FindScheme(c.position).Call(model::SchemeLayerOf(c), 1);
  if (!call.xl_table) return 0;
  return 2 * (2 * tokens + 1) * static_cast<double>(c.d_model);
}

// Floats of one block's activations for `rows` positions padded to
// `tokens` per sequence (transformer_block.h's BlockActivations and the
// attention cache: LayerNorm outputs and statistics, q, k, v, the attention
// output and its merged copy, lse, the residual h, the feed-forward pre-
// and post-activation), plus Transformer-XL's distance tables, which cover
// every distance of the call.
double BlockFloats(const model::ModelConfig& c, double rows, double tokens) {
  const double d = static_cast<double>(c.d_model);
  const double per_row = 8 * d + 2 * static_cast<double>(c.d_ff) +
                         static_cast<double>(c.heads) + 4;
  return rows * per_row + DistanceTableFloats(c, tokens);
}

// The rows the fused kernel's per-thread table accumulators hold: the
// buckets a call can reach (at most 2 * tokens - 1 distances).
double ReachableTableFloats(const ModelSizes& s, double tokens) {
  if (s.table_rows <= 0) return 0;
  return s.layer_tables * std::min(1.0, (2 * tokens + 1) / s.table_rows);
}

std::string LargestParts(const MemoryPlan& plan) {
  std::vector<std::pair<std::string, double>> parts = plan.parts;
  std::sort(parts.begin(), parts.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (size_t i = 0; i < parts.size() && i < 3; ++i) {
    if (parts[i].second <= 0) break;
    out +=
        (i ? ", " : "") + parts[i].first + " " + FormatBytes(parts[i].second);
  }
  return out;
}

// "8G", "512M", "1.5T", "1000000": bytes; <= 0 or malformed: -1.
double ParseByteCount(const std::string& text) {
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(x) || x <= 0) return -1;
  const std::string unit(end);
  double scale = 1;
  if (unit == "K" || unit == "KiB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MiB") {
    scale = kMiB;
  } else if (unit == "G" || unit == "GiB") {
    scale = 1024 * kMiB;
  } else if (unit == "T" || unit == "TiB") {
    scale = 1024.0 * 1024 * kMiB;
  } else if (!unit.empty()) {
    return -1;
  }
  return x * scale;
}

// A number from a line "Key:   123 kB" of a /proc file, in bytes; -1 if
// absent.
double ProcField(const std::string& text, const std::string& key) {
  const size_t at = text.find(key + ":");
  if (at == std::string::npos) return -1;
  const double kib = std::strtod(text.c_str() + at + key.size() + 1, nullptr);
  return kib * 1024.0;
}

std::string ReadProc(const std::string& path) {
  try {
    return io::ReadFileBounded(path, int64_t{1} << 20);
  } catch (const Error&) {
    return "";
  }
}

// The memory limit of this process's cgroup minus its use; -1 if none.
// cgroup v2 ("0::/path": memory.max, memory.current) or v1
// ("N:memory:/path": memory.limit_in_bytes, memory.usage_in_bytes); in a
// container the path is the host's, so the mount's root is tried too.
double CgroupHeadroom() {
  const std::string cgroup = ReadProc("/proc/self/cgroup");
  std::istringstream lines(cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    const bool v2 = controllers.empty();
    if (!v2 && controllers != "memory") continue;
    const std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    for (const std::string& dir : {root + path, root}) {
      const std::string max =
          ReadProc(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
      if (max.empty()) continue;
      const double limit = std::strtod(max.c_str(), nullptr);
      // "max", or v1's "no limit" (2^63 rounded down to a page).
      if (max.rfind("max", 0) == 0 || limit <= 0 || limit >= 0x1p62) break;
      const double used = std::strtod(
          ReadProc(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"))
              .c_str(),
          nullptr);
      return limit - used;
    }
  }
  return -1;
}

}  // namespace

double MemoryPlan::total() const {
  double t = 0;
  for (const auto& [name, bytes] : parts) t += bytes;
  return t;
}

void MemoryPlan::Add(const MemoryPlan& other) {
  parts.insert(parts.end(), other.parts.begin(), other.parts.end());
  reserved += other.reserved;
  if (reduce.empty()) reduce = other.reduce;
}

MemoryPlan PlanModel(const model::ModelConfig& c) {
  const ModelSizes s = SizesOf(c);
  MemoryPlan p;
  p.what = "the model";
  // Values and gradients, and the initial values of the largest tensor
  // while it is generated.
  p.parts.push_back(
      {"parameters and gradients", kFloat * (2 * s.params + s.largest)});
  p.reduce = s.table_rows > 1e6 ? "max_distance (or k_left, k_right), "
                                  "layers, d_model"
                                : "d_model, d_ff, layers, vocab_size";
  return p;
}

MemoryPlan PlanCheckpointLoad(const model::ModelConfig& c,
                              bool with_optimizer) {
  const ModelSizes s = SizesOf(c);
  MemoryPlan p = PlanModel(c);
  p.what = "loading the checkpoint";
  // The model file's bytes, then its parsed tensors, held until the model
  // is built; the optimizer file's bytes and moments likewise.
  p.parts.push_back(
      {"tensor files read", kFloat * s.params * (with_optimizer ? 3 : 1)});
  if (with_optimizer) {
    p.parts.push_back({"AdamW moments", kFloat * 2 * s.params});
  }
  return p;
}

namespace {

// The sizes a batch plan is made of: `batch` sequences of `tokens` tokens
// (rows = batch x tokens, all of them: padding included).
struct BatchSizes {
  BatchSizes(const model::ModelConfig& c, int64_t batch, int64_t tokens)
      : s(SizesOf(c)),
        n(static_cast<double>(tokens)),
        rows(static_cast<double>(batch) * n),
        d(static_cast<double>(c.d_model)),
        v(static_cast<double>(c.vocab_size)),
        label("activations of one batch (" + std::to_string(batch) + " x " +
              std::to_string(tokens) + " tokens)") {}
  ModelSizes s;
  double n, rows, d, v;
  std::string label;
};

}  // namespace

MemoryPlan PlanTraining(const model::ModelConfig& c, int64_t batch,
                        int64_t tokens, int threads) {
  const BatchSizes z(c, batch, tokens);
  const ModelSizes& s = z.s;
  const double n = z.n, rows = z.rows, d = z.d, v = z.v;
  const double layers = BlockUnits(c);
  MemoryPlan p = PlanModel(c);
  p.what = "training";
  p.parts.push_back({"AdamW moments", kFloat * 2 * s.params});
  // Trainer::Save copies the parameters and both moments, then encodes the
  // optimizer file (the larger) while the copies are alive.
  p.parts.push_back({"checkpoint writing", kFloat * 5 * s.params});
  // Forward keeps x_0..x_L and every block's activations; the output keeps
  // LayerNormF(x_L) and the logits; backward adds the gradients of the
  // logits, of lnf and of the residual stream, and its scratch (a branch,
  // its gradient, a LayerNorm gradient, the feed-forward gradient, the
  // attention's flat and head-split gradients, the tables' group
  // gradients).
  const double forward = (layers + 1) * rows * d +
                         layers * BlockFloats(c, rows, n) + rows * (d + 2 + v) +
                         4 * rows;
  const double backward =
      rows * (v + 2 * d) + rows * (8 * d + static_cast<double>(c.d_ff)) +
      2 * s.layer_tables + DistanceTableFloats(c, n);
  p.parts.push_back({z.label, kFloat * (forward + backward)});
  p.parts.push_back({"kernel per-thread buffers",
                     threads * (kFloat * ReachableTableFloats(s, n) +
                                kKernelScratchPerThread)});
  p.reserved = threads * kReservedPerThread;
  if (rows * (d + v) > s.params) {
    p.reduce = "batch_size, the training lengths, d_model";
  }
  return p;
}

MemoryPlan PlanInference(const model::ModelConfig& c, int64_t batch,
                         int64_t tokens, int threads) {
  const BatchSizes z(c, batch, tokens);
  const double n = z.n, rows = z.rows, d = z.d, v = z.v;
  MemoryPlan p = PlanModel(c);
  p.what = "evaluation";
  // x_0 (updated in place by each block), one block's activations shared
  // by all, LayerNormF's output and the logits, the tokens, targets and
  // predictions, the sinusoid table.
  double floats = rows * d + BlockFloats(c, rows, n) +
                  rows * (d + 2 + v) + 6 * rows + n * d;
  // Seq2seq: the encoder's output, kept while the decoder runs, and the
  // cross-attention's activations beside the self-attention's.
  if (model::Describe(c.arch).source) {
    floats += rows * d + BlockFloats(c, rows, n);
  }
  p.parts.push_back({z.label, kFloat * floats});
  p.parts.push_back(
      {"kernel per-thread buffers", threads * kKernelScratchPerThread});
  p.reserved = threads * kReservedPerThread;
  if (rows * (d + v) > z.s.params) {
    p.reduce = "the batch size or the lengths";
  }
  return p;
}

MemoryPlan PlanGeneration(const model::ModelConfig& c, int64_t sequences,
                          int64_t capacity, bool use_cache, int threads) {
  // The prompts' forward pass (or, without the cache, every step's) is
  // inference over at most `capacity` tokens per sequence.
  MemoryPlan p = PlanInference(c, sequences, capacity, threads);
  p.what = "generation";
  if (use_cache) {
    const double d = static_cast<double>(c.d_model);
    const double cap = static_cast<double>(capacity);
    const double xl = DistanceTableFloats(c, cap);
    p.parts.push_back(
        {"key/value cache",
         kFloat * (static_cast<double>(model::DecoderLayers(c)) *
                       (2 * static_cast<double>(sequences) * cap * d + xl) +
                   cap * d)});
  }
  p.reduce = sequences > 1 ? "--max-new, the prompts or the batch size"
                           : "--max-new or the prompt";
  return p;
}

MemoryPlan PlanTranslation(const model::ModelConfig& c, int64_t sources,
                           int64_t longest_source, int64_t beam, int64_t steps,
                           int threads) {
  MemoryPlan p = PlanInference(c, sources, std::max<int64_t>(longest_source, 1),
                               threads);
  p.what = "translation";
  const double d = static_cast<double>(c.d_model);
  const double layers = static_cast<double>(model::DecoderLayers(c));
  const double n = static_cast<double>(sources);
  const double hyps = n * static_cast<double>(beam);
  const double cap = static_cast<double>(steps);
  const double xl = DistanceTableFloats(c, cap);
  p.parts.push_back({"cross-attention keys and values",
                     kFloat * n * layers * 2 *
                         static_cast<double>(longest_source) * d});
  p.parts.push_back({"key/value cache",
                     kFloat * (2 * hyps * layers * 2 * cap * d + layers * xl)});
  // Each step's logits and log-probabilities, for 2 x beam candidates.
  p.parts.push_back({"logits", kFloat * 4 * hyps *
                                   static_cast<double>(c.vocab_size)});
  p.reduce = "the number of sentences per call, the beam size or "
             "max_length";
  return p;
}

MemoryBudget AvailableMemory() {
  MemoryBudget b;
  const std::string meminfo = ReadProc("/proc/meminfo");
  b.total = {ProcField(meminfo, "MemTotal"), "the machine's memory (MemTotal)"};
  if (const char* env = std::getenv("RELPOS_MEMORY_LIMIT")) {
    const double limit = ParseByteCount(env);
    RELPOS_CHECK_ARG(limit > 0, "RELPOS_MEMORY_LIMIT must be a size such as "
                                "8G, 512M or 1000000 bytes (got '"
                                    << env << "')");
    b.total = {limit, std::string("RELPOS_MEMORY_LIMIT=") + env};
  }
  const std::string status = ReadProc("/proc/self/status");
  auto lower = [](MemoryLimit* l, double bytes, const std::string& source) {
    if (l->bytes <= 0 || bytes < l->bytes) *l = {std::max(bytes, 1.0), source};
  };
  if (const double available = ProcField(meminfo, "MemAvailable");
      available >= 0) {
    lower(&b.headroom, available, "the machine's available memory (MemAvailable)");
  }
  if (const double cgroup = CgroupHeadroom(); cgroup >= 0) {
    lower(&b.headroom, cgroup, "the cgroup's memory limit");
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_DATA, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    lower(&b.headroom,
          static_cast<double>(lim.rlim_cur) - ProcField(status, "VmData"),
          "RLIMIT_DATA (ulimit -d)");
  }
  if (::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    lower(&b.address_space,
          static_cast<double>(lim.rlim_cur) - ProcField(status, "VmSize"),
          "RLIMIT_AS (ulimit -v)");
  }
  return b;
}

void CheckMemory(const MemoryPlan& plan) {
  const MemoryBudget b = AvailableMemory();
  const double total = plan.total();
  const double fresh = std::max(0.0, total - plan.resident);
  // Each limit against what it counts; of those exceeded, the smallest is
  // reported (the one to raise first).
  const std::pair<const MemoryLimit*, double> checks[] = {
      {&b.total, total},
      {&b.headroom, fresh},
      {&b.address_space, fresh + plan.reserved}};
  const MemoryLimit* limit = nullptr;
  double need = 0;
  for (const auto& [l, n] : checks) {
    if (l->bytes > 0 && n > l->bytes && (!limit || l->bytes < limit->bytes)) {
      limit = l;
      need = n;
    }
  }
  if (!limit) return;
  const bool with_reserve = limit == &b.address_space && plan.reserved > 0;
  RELPOS_THROW(
      ResourceError,
      plan.what << " needs about " << FormatBytes(need)
                << (limit != &b.total && plan.resident > 0 ? " more" : "")
                << " (" << LargestParts(plan)
                << (with_reserve
                        ? ", thread stacks and arenas " + FormatBytes(plan.reserved)
                        : std::string())
                << "), more than the " << FormatBytes(limit->bytes)
                << " this process may use (" << limit->source << "); reduce "
                << plan.reduce
                << ", or raise the limit (RELPOS_MEMORY_LIMIT, "
                   "docs/robustness.md)");
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  } else if (bytes >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3g %s", bytes, units[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  }
  return buf;
}

}  // namespace relpos::model
