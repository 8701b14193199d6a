#include "train/signal_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "model/positions.h"
#include "relpos/schemes.h"

namespace relpos::train {
namespace {

inline constexpr const char* kSignalFormat = "relpos-signal";
inline constexpr int kSignalVersion = 1;

[[noreturn]] void Bad(const std::string& source, const std::string& problem) {
  RELPOS_THROW(FormatError, source << ": " << problem);
}

}  // namespace

BucketMap ClipBucketMap(int64_t left, int64_t right) {
  const ClipBuckets b{.left = left, .right = right};
  ValidateClipBuckets(b);
  BucketMap m;
  m.rows = ClipBucketCount(b);
  m.reach = std::max<int64_t>({left, right, 1});
  m.bucket = [b](int64_t r) { return ClipBucket(r, b); };
  m.description = "clip(r, -" + std::to_string(left) + ", " +
                  std::to_string(right) + ") + " + std::to_string(left);
  return m;
}

BucketMap T5BucketMap(const T5Buckets& buckets) {
  ValidateT5Buckets(buckets);
  BucketMap m;
  m.rows = buckets.num_buckets;
  m.reach = T5BucketReach(buckets);
  m.bucket = [buckets](int64_t r) { return T5Bucket(r, buckets); };
  m.description = std::string("T5 buckets (") +
                  (buckets.bidirectional ? "bidirectional" : "causal") +
                  ", " + std::to_string(buckets.num_buckets) +
                  " buckets, max_distance " +
                  std::to_string(buckets.max_distance) + ")";
  return m;
}

namespace {

// The distance-indexed tables of one stack configured as `c` (the model, or
// a side of a seq2seq model) whose parameters are named `prefix` +
// "blocks.L.attn...": the registry's tables of the roles kKeyTable,
// kValueTable and kScoreBias (relpos/schemes.h), under the bucket map of the
// model's attention (model::AttentionOptionsFor), so rows here are the rows
// the kernel indexes. Transformer-XL's distance rows are computed from fixed
// sinusoids on every forward; what it learns (W, u, v) is not indexed by
// distance, and neither is an input table. `source`: the stack reads the
// batch's sources.
void StackTables(const model::ModelConfig& c, const std::string& prefix,
                 bool source, std::vector<RelativeTable>* out) {
  std::vector<RelativeTable>& tables = *out;
  const AttentionOptions o = model::AttentionOptionsFor(c, 1);
  // The bucket map of the model's attention (built once: every table of a
  // model shares it).
  const BucketMap map = [&] {
    switch (o.buckets.kind) {
      case BucketKind::kSymmetricClip:
        return ClipBucketMap(o.max_distance, o.max_distance);
      case BucketKind::kClip:
        return ClipBucketMap(o.buckets.clip.left, o.buckets.clip.right);
      case BucketKind::kT5:
        return T5BucketMap(o.buckets.t5);
    }
    return ClipBucketMap(o.max_distance, o.max_distance);
  }();
  const std::vector<SchemeTable> scheme_tables =
      FindScheme(c.position).Tables(model::SchemeLayerOf(c));
  for (int64_t l = 0; l < c.layers; ++l) {
    for (const SchemeTable& t : scheme_tables) {
      // [rows, width] shared, [heads, rows, width] per head; the scalar
      // bias [H, nb] is H heads of width 1.
      RelativeTable rt{
          .parameter = prefix + "blocks." + std::to_string(l) + ".attn." +
                       t.name,
          .layer = l,
          .role = "",
          .heads = t.shape.size() == 3 ? t.shape[0] : 1,
          .width = t.shape.back(),
          .map = map,
          .causal = o.causal,
          .source = source};
      if (t.role == TableRole::kKeyTable) {
        rt.role = "key";
      } else if (t.role == TableRole::kValueTable) {
        rt.role = "value";
      } else if (t.role == TableRole::kScoreBias) {
        rt.role = "bias";
        rt.heads = t.shape[0];
        rt.width = 1;
      } else {
        continue;
      }
      tables.push_back(std::move(rt));
    }
  }
}

}  // namespace

std::vector<RelativeTable> RelativeTables(const model::ModelConfig& c) {
  std::vector<RelativeTable> tables;
  if (c.arch == model::Arch::kSeq2seq) {
    StackTables(model::EncoderSide(c), "encoder.", /*source=*/true, &tables);
    StackTables(model::DecoderSide(c), "decoder.", false, &tables);
  } else {
    StackTables(c, "", false, &tables);
  }
  return tables;
}

RowDistances DescribeRows(const BucketMap& map) {
  const int64_t none = std::numeric_limits<int64_t>::max();
  RowDistances d;
  d.distance.assign(map.rows, none);
  d.min.assign(map.rows, none);
  d.max.assign(map.rows, std::numeric_limits<int64_t>::min());
  d.open_below.assign(map.rows, 0);
  d.open_above.assign(map.rows, 0);
  for (int64_t r = -map.reach; r <= map.reach; ++r) {
    const int64_t b = map.bucket(r);
    d.min[b] = std::min(d.min[b], r);
    d.max[b] = std::max(d.max[b], r);
    // Ties in |r| go to the negative distance (visited first).
    if (d.distance[b] == none || std::abs(r) < std::abs(d.distance[b])) {
      d.distance[b] = r;
    }
    if (r == -map.reach) d.open_below[b] = 1;
    if (r == map.reach) d.open_above[b] = 1;
  }
  for (int64_t b = 0; b < map.rows; ++b) {
    if (d.distance[b] == none) {  // no distance uses it
      d.distance[b] = 0;
      d.min[b] = 1;
      d.max[b] = 0;
    }
  }
  return d;
}

void AddPairCounts(const std::vector<int64_t>& lengths, bool causal,
                   const BucketMap& map, std::vector<int64_t>* counts) {
  if (counts->empty()) counts->assign(map.rows, 0);
  RELPOS_CHECK_ARG(static_cast<int64_t>(counts->size()) == map.rows,
                   "counts has " << counts->size() << " rows, the map "
                                 << map.rows);
  // by_distance[a]: pairs at |r| = a on one side (a sequence of n tokens
  // has n - a of them for each sign of r); O(n) per sequence.
  int64_t longest = 0;
  for (int64_t n : lengths) longest = std::max(longest, n);
  std::vector<int64_t> by_distance(longest, 0);
  for (int64_t n : lengths) {
    for (int64_t a = 0; a < n; ++a) by_distance[a] += n - a;
  }
  for (int64_t a = 0; a < longest; ++a) {
    if (by_distance[a] == 0) continue;
    (*counts)[map.bucket(-a)] += by_distance[a];
    if (a > 0 && !causal) (*counts)[map.bucket(a)] += by_distance[a];
  }
}

SignalStats MakeSignalStats(const model::ModelConfig& config,
                            int64_t first_step) {
  SignalStats s;
  s.first_step = first_step;
  for (const RelativeTable& t : RelativeTables(config)) {
    TableSignal ts;
    ts.parameter = t.parameter;
    ts.heads = t.heads;
    ts.rows = t.map.rows;
    ts.pair_count.assign(ts.rows, 0);
    ts.signal.assign(ts.rows, 0.0);
    if (t.heads > 1) ts.signal_per_head.assign(t.heads * ts.rows, 0.0);
    s.tables.push_back(std::move(ts));
  }
  return s;
}

void AccumulateSignal(const model::Batch& batch,
                      const model::Transformer& model,
                      const std::vector<RelativeTable>& tables,
                      SignalStats* stats) {
  RELPOS_CHECK_ARG(tables.size() == stats->tables.size(),
                   "signal statistics hold " << stats->tables.size()
                                             << " tables, the model "
                                             << tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    const RelativeTable& table = tables[t];
    TableSignal& ts = stats->tables[t];
    AddPairCounts(table.source ? batch.source_lengths : batch.lengths,
                  table.causal, table.map, &ts.pair_count);
    const int64_t index = model.FindParameter(table.parameter);
    RELPOS_CHECK_ARG(index >= 0, "the model has no parameter '"
                                     << table.parameter << "'");
    const std::vector<float>& g = model.parameters()[index].grad;
    RELPOS_CHECK_ARG(
        static_cast<int64_t>(g.size()) == table.heads * ts.rows * table.width,
        "parameter '" << table.parameter << "' has " << g.size()
                      << " values, the table layout implies "
                      << table.heads * ts.rows * table.width);
    for (int64_t h = 0; h < table.heads; ++h) {
      for (int64_t b = 0; b < ts.rows; ++b) {
        const float* row = g.data() + (h * ts.rows + b) * table.width;
        double sq = 0;
        for (int64_t c = 0; c < table.width; ++c) {
          sq += static_cast<double>(row[c]) * static_cast<double>(row[c]);
        }
        ts.signal[b] += sq;
        if (table.heads > 1) ts.signal_per_head[h * ts.rows + b] += sq;
      }
    }
  }
  ++stats->steps;
}

std::string EncodeSignalStats(const SignalStats& stats, int64_t step) {
  nlohmann::ordered_json tables = nlohmann::ordered_json::array();
  for (const TableSignal& t : stats.tables) {
    nlohmann::ordered_json per_head = nlohmann::ordered_json::array();
    for (int64_t h = 0; h < t.heads && t.heads > 1; ++h) {
      per_head.push_back(std::vector<double>(
          t.signal_per_head.begin() + h * t.rows,
          t.signal_per_head.begin() + (h + 1) * t.rows));
    }
    tables.push_back({{"parameter", t.parameter},
                      {"heads", t.heads},
                      {"rows", t.rows},
                      {"pair_count", t.pair_count},
                      {"signal", t.signal},
                      {"signal_per_head", per_head}});
  }
  const nlohmann::ordered_json j = {{"format", kSignalFormat},
                                    {"version", kSignalVersion},
                                    {"step", step},
                                    {"first_step", stats.first_step},
                                    {"steps", stats.steps},
                                    {"tables", tables}};
  return j.dump() + "\n";
}

namespace {

int64_t GetInt(const nlohmann::json& j, const char* key,
               const std::string& where, const std::string& source) {
  if (!j.contains(key) || !j[key].is_number_integer()) {
    Bad(source, where + "'" + key + "' must be an integer");
  }
  return j[key].get<int64_t>();
}

// A JSON array of exactly `n` numbers, each finite and >= 0.
template <typename T>
std::vector<T> GetArray(const nlohmann::json& j, int64_t n,
                        const std::string& what, const std::string& source) {
  if (!j.is_array() || static_cast<int64_t>(j.size()) != n) {
    Bad(source, what + " must be an array of " + std::to_string(n) +
                    " numbers");
  }
  std::vector<T> out;
  out.reserve(n);
  for (const auto& x : j) {
    // Integers must also fit int64 (JSON allows larger unsigned ones).
    const bool ok =
        std::is_integral_v<T>
            ? x.is_number_integer() &&
                  (!x.is_number_unsigned() ||
                   x.get<uint64_t>() <=
                       static_cast<uint64_t>(
                           std::numeric_limits<int64_t>::max()))
            : x.is_number();
    if (!ok || !std::isfinite(x.get<double>()) || x.get<double>() < 0) {
      Bad(source, what + " must hold finite " +
                      (std::is_integral_v<T> ? "integers" : "numbers") +
                      " >= 0");
    }
    out.push_back(x.get<T>());
  }
  return out;
}

}  // namespace

SignalStats DecodeSignalStats(const std::string& text,
                              const std::string& source,
                              const model::ModelConfig& config, int64_t step) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Bad(source, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) Bad(source, "must hold a JSON object");
  if (!j.contains("format") || j["format"] != kSignalFormat) {
    Bad(source, std::string("field 'format' must be \"") + kSignalFormat +
                    "\"");
  }
  if (!j.contains("version") || j["version"] != kSignalVersion) {
    Bad(source, "unsupported signal statistics version (this relpos reads "
                "version " +
                    std::to_string(kSignalVersion) + ")");
  }
  if (GetInt(j, "step", "", source) != step) {
    Bad(source, "field 'step' does not match config.json's step " +
                    std::to_string(step) + " (files from different saves?)");
  }
  SignalStats s;
  s.first_step = GetInt(j, "first_step", "", source);
  s.steps = GetInt(j, "steps", "", source);
  if (s.first_step < 0 || s.first_step > step || s.steps != step - s.first_step) {
    Bad(source, "fields 'first_step' and 'steps' must satisfy 0 <= first_step "
                "<= step and steps = step - first_step");
  }
  const SignalStats want = MakeSignalStats(config, 0);
  if (!j.contains("tables") || !j["tables"].is_array() ||
      j["tables"].size() != want.tables.size()) {
    Bad(source, "field 'tables' must be an array of the " +
                    std::to_string(want.tables.size()) +
                    " relative tables the model config implies");
  }
  for (size_t i = 0; i < want.tables.size(); ++i) {
    const nlohmann::json& jt = j["tables"][i];
    const TableSignal& w = want.tables[i];
    const std::string where = "tables[" + std::to_string(i) + "].";
    if (!jt.is_object() || !jt.contains("parameter") ||
        jt["parameter"] != w.parameter) {
      Bad(source, where + "parameter must be '" + w.parameter + "'");
    }
    if (GetInt(jt, "heads", where, source) != w.heads ||
        GetInt(jt, "rows", where, source) != w.rows) {
      Bad(source, where + "heads and rows must be " + std::to_string(w.heads) +
                      " and " + std::to_string(w.rows) +
                      " (the model config's)");
    }
    TableSignal t = w;
    t.pair_count = GetArray<int64_t>(jt.value("pair_count", nlohmann::json()),
                                     w.rows, where + "pair_count", source);
    t.signal = GetArray<double>(jt.value("signal", nlohmann::json()), w.rows,
                                where + "signal", source);
    const nlohmann::json ph =
        jt.value("signal_per_head", nlohmann::json::array());
    if (!ph.is_array() ||
        static_cast<int64_t>(ph.size()) != (w.heads > 1 ? w.heads : 0)) {
      Bad(source, where + "signal_per_head must hold one array per head (" +
                      std::to_string(w.heads > 1 ? w.heads : 0) + ")");
    }
    for (size_t h = 0; h < ph.size(); ++h) {
      const std::vector<double> row =
          GetArray<double>(ph[h], w.rows,
                           where + "signal_per_head[" + std::to_string(h) + "]",
                           source);
      std::copy(row.begin(), row.end(),
                t.signal_per_head.begin() + static_cast<int64_t>(h) * w.rows);
    }
    s.tables.push_back(std::move(t));
  }
  return s;
}

}  // namespace relpos::train
