// relpos::Inspect: the per-row view of the relative tables of a checkpoint
// or an in-memory model (include/relpos/lab/inspect.h, docs/inspect.md).
#include "relpos/lab/inspect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "lab/api/internal.h"
#include "base/check.h"
#include "relpos/lab/training.h"
#include "train/checkpoint.h"
#include "model/memory_plan.h"
#include "train/signal_stats.h"

namespace relpos {
namespace {

void CheckOptions(const InspectOptions& o) {
  RELPOS_CHECK_ARG(o.untrained_fraction >= 0 && o.untrained_fraction <= 1,
                   "untrained_fraction must be in [0, 1] (got "
                       << o.untrained_fraction << ")");
  RELPOS_CHECK_ARG(o.share > 0 && o.share <= 1,
                   "share must be in (0, 1] (got " << o.share << ")");
}

// Which distances each row takes (train::DescribeRows).
void DescribeRows(const train::BucketMap& map, TableInspection* t) {
  train::RowDistances d = train::DescribeRows(map);
  t->distance = std::move(d.distance);
  t->distance_min = std::move(d.min);
  t->distance_max = std::move(d.max);
  t->open_below = std::move(d.open_below);
  t->open_above = std::move(d.open_above);
}

bool Used(const TableInspection& t, int64_t row) {
  return t.distance_min[row] <= t.distance_max[row];
}

// ||W[row]|| over heads and columns of a [heads, rows, width] table.
std::vector<double> RowNorms(const std::vector<float>& w,
                             const std::vector<float>* minus,
                             const TableInspection& t) {
  std::vector<double> out(t.rows, 0.0);
  for (int64_t h = 0; h < t.heads; ++h) {
    for (int64_t b = 0; b < t.rows; ++b) {
      const int64_t base = (h * t.rows + b) * t.width;
      for (int64_t c = 0; c < t.width; ++c) {
        double x = w[base + c];
        if (minus) x -= static_cast<double>((*minus)[base + c]);
        out[b] += x * x;
      }
    }
  }
  for (double& x : out) x = std::sqrt(x);
  return out;
}

// The rule of InspectOptions::untrained_fraction, and the smallest k
// holding options.share of the signal.
void Judge(const InspectOptions& o, TableInspection* t) {
  std::vector<double> positive;
  double total = 0;
  for (int64_t b = 0; b < t->rows; ++b) {
    if (t->signal[b] > 0) positive.push_back(t->signal[b]);
    total += t->signal[b];
  }
  std::sort(positive.begin(), positive.end());
  double median = 0;
  if (!positive.empty()) {
    const size_t n = positive.size();
    median = n % 2 ? positive[n / 2]
                   : 0.5 * (positive[n / 2 - 1] + positive[n / 2]);
  }
  t->threshold = o.untrained_fraction * median;
  t->untrained.assign(t->rows, 0);
  t->untrained_rows = 0;
  for (int64_t b = 0; b < t->rows; ++b) {
    if (!Used(*t, b)) continue;  // a row no distance can reach is no verdict
    const bool u = t->signal[b] == 0 || t->signal[b] < t->threshold;
    t->untrained[b] = u;
    t->untrained_rows += u;
  }
  t->share = o.share;
  t->share_k = -1;
  if (total <= 0) return;
  // Rows by |distance|, taking all rows of one |distance| at once.
  std::vector<int64_t> order;
  for (int64_t b = 0; b < t->rows; ++b) {
    if (Used(*t, b)) order.push_back(b);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::abs(t->distance[a]) < std::abs(t->distance[b]);
  });
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    sum += t->signal[order[i]];
    const int64_t a = std::abs(t->distance[order[i]]);
    const bool group_end = i + 1 == order.size() ||
                           std::abs(t->distance[order[i + 1]]) != a;
    if (group_end && sum >= o.share * total) {
      t->share_k = a;
      return;
    }
  }
  t->share_k = std::abs(t->distance[order.back()]);  // rounding: all of it
}

// Everything but the signal: the tables, their rows and values.
Inspection Describe(const model::Transformer& trained,
                    const train::TrainConfig& train,
                    const std::optional<train::SignalStats>& signal,
                    int64_t step, const std::string& source,
                    const InspectOptions& options) {
  CheckOptions(options);
  const model::ModelConfig& mc = trained.config();
  Inspection in;
  in.source = source;
  in.config = MakeConfig(mc, train);
  in.step = step;
  try {
    in.train_max_tokens =
        SequenceLength(in.config, train.train_max_length);
  } catch (const Error&) {
    in.train_max_tokens = 0;  // the data is not readable here (an LM file)
  }
  in.has_signal = signal.has_value();
  if (!in.has_signal) {
    in.no_signal =
        "this checkpoint has no signal statistics (written before relpos "
        "recorded them, or saved from a model not trained by "
        "relpos::Training); norms and movement only";
  } else {
    in.first_step = signal->first_step;
    in.steps = signal->steps;
  }
  // The initial values: the model inits deterministically from config.seed.
  const model::Transformer initial(mc);
  const std::vector<train::RelativeTable> tables = train::RelativeTables(mc);
  for (size_t i = 0; i < tables.size(); ++i) {
    const train::RelativeTable& rt = tables[i];
    TableInspection t;
    t.parameter = rt.parameter;
    t.layer = rt.layer;
    t.role = rt.role;
    t.heads = rt.heads;
    t.rows = rt.map.rows;
    t.width = rt.width;
    t.bucket_map = rt.map.description;
    DescribeRows(rt.map, &t);
    const int64_t index = trained.FindParameter(rt.parameter);
    RELPOS_CHECK_ARG(index >= 0, "the model has no parameter '"
                                     << rt.parameter << "'");
    const std::vector<float>& w = trained.parameters()[index].value;
    const std::vector<float>& w0 = initial.parameters()[index].value;
    t.row_norm = RowNorms(w, nullptr, t);
    t.movement = RowNorms(w, &w0, t);
    if (signal) {
      const train::TableSignal& ts = signal->tables.at(i);
      t.pair_count = ts.pair_count;
      t.signal = ts.signal;
      t.signal_per_head = ts.signal_per_head;
      Judge(options, &t);
    }
    in.tables.push_back(std::move(t));
  }
  return in;
}

}  // namespace

Inspection Inspect(const std::string& dir, const InspectOptions& options) {
  CheckOptions(options);
  {
    // The checkpoint's model, and its initial values beside it (Describe).
    const model::ModelConfig mc = train::ReadCheckpointConfig(dir).model_config;
    model::MemoryPlan plan = model::PlanCheckpointLoad(mc, false);
    plan.Add(model::PlanModel(mc));
    plan.what = "inspecting the checkpoint";
    model::CheckMemory(plan);
  }
  train::Checkpoint ck =
      train::ReadCheckpoint(dir, /*with_optimizer=*/false,
                            /*with_signal=*/true);
  model::Transformer model(ck.model_config);
  train::SetParameters(ck.parameters, dir, model);
  return Describe(model, ck.train_config, ck.signal, ck.state.step, dir,
                  options);
}

Inspection Inspect(const Model& model, const InspectOptions& options) {
  const auto& m = Internals(model);
  std::optional<train::SignalStats> signal;
  if (m.signal) signal = *m.signal;
  Inspection in =
      Describe(FloatTransformer(model, "Inspect"), Internals(m.config).train,
               signal, model.step(), "(in memory)", options);
  if (!in.has_signal) {
    in.no_signal =
        "this model has no signal statistics (only a relpos::Training's "
        "model records them); norms and movement only";
  }
  return in;
}

std::string DistanceLabel(const TableInspection& t, int64_t row) {
  const int64_t lo = t.distance_min.at(row), hi = t.distance_max.at(row);
  if (lo > hi) return "none";
  if (t.open_below[row] && t.open_above[row]) return "all";
  if (t.open_below[row]) return "<= " + std::to_string(hi);
  if (t.open_above[row]) return ">= " + std::to_string(lo);
  if (lo == hi) return std::to_string(lo);
  return std::to_string(lo) + ".." + std::to_string(hi);
}

std::string Verdict(const TableInspection& t) {
  std::string line = t.parameter + ": ";
  if (t.untrained.empty()) return line + "no signal statistics";
  line += std::to_string(t.untrained_rows) + " of " + std::to_string(t.rows) +
          " rows untrained";
  if (t.untrained_rows > 0) {
    // The untrained rows' distances, merged into ranges (in distance order,
    // which is not row order under T5 buckets).
    struct Span {
      int64_t lo, hi;
      bool open_below, open_above;
    };
    std::vector<Span> spans;
    for (int64_t b = 0; b < t.rows; ++b) {
      if (t.untrained[b]) {
        spans.push_back({t.distance_min[b], t.distance_max[b],
                         t.open_below[b] != 0, t.open_above[b] != 0});
      }
    }
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.lo < b.lo; });
    std::vector<Span> merged;
    for (const Span& sp : spans) {
      if (!merged.empty() && merged.back().hi + 1 == sp.lo) {
        merged.back().hi = sp.hi;
        merged.back().open_above = sp.open_above;
      } else {
        merged.push_back(sp);
      }
    }
    std::string runs;
    for (const Span& sp : merged) {
      std::string label;
      if (sp.open_below && sp.open_above) {
        label = "every r";
      } else if (sp.open_below) {
        label = "r <= " + std::to_string(sp.hi);
      } else if (sp.open_above) {
        label = "r >= " + std::to_string(sp.lo);
      } else if (sp.lo == sp.hi) {
        label = "r = " + std::to_string(sp.lo);
      } else {
        label = "r in " + std::to_string(sp.lo) + ".." + std::to_string(sp.hi);
      }
      runs += (runs.empty() ? "" : ", ") + label;
    }
    line += " (" + runs + ")";
  }
  char share[64];
  std::snprintf(share, sizeof share, "%g%%", 100.0 * t.share);
  if (t.share_k < 0) {
    line += "; no signal at all";
  } else {
    line += std::string("; ") + share + " of the signal within |r| <= " +
            std::to_string(t.share_k);
  }
  return line;
}

}  // namespace relpos
