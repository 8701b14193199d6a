#include "train/signal_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "model/arch.h"
#include "model/positions.h"
#include "relpos/schemes.h"

namespace relpos::train {

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
  for (const model::StackInfo& stack : model::Stacks(c)) {
    StackTables(stack.side, stack.prefix, stack.over_source, &tables);
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

SignalStats DecodeSignalStats(const std::string& text,
                              const std::string& source,
                              const model::ModelConfig& config, int64_t step) {
  return DecodeSignalStats(text, source, MakeSignalStats(config, 0), step);
}

}  // namespace relpos::train
