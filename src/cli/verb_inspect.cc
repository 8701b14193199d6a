// `relpos inspect DIR [--json] [--svg FILE] [--share S]
// [--untrained-fraction F]`: which distances a checkpoint's relative tables
// learned (docs/inspect.md). Per table and row: the pairs that used it, the
// cumulative gradient signal, the row's norm and how far it moved from its
// initial value; a one-line verdict per table; optionally an SVG of signal
// and movement against distance, one line per layer.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "cli/svg_plot.h"
#include "relpos/lab/files.h"
#include "relpos/lab/inspect.h"

namespace relpos::cli {
namespace {

struct InspectFlags {
  std::string dir, svg;
  bool json = false;
  InspectOptions options;
};

// "AK" / "AV" / "B": the tables' names in docs/math.md.
std::string TableName(const TableInspection& t) {
  if (t.role == "key") return "AK";
  if (t.role == "value") return "AV";
  if (t.role == "bias") return "B";
  return t.role;
}

nlohmann::ordered_json TableJson(const TableInspection& t) {
  nlohmann::ordered_json labels = nlohmann::ordered_json::array();
  for (int64_t b = 0; b < t.rows; ++b) labels.push_back(DistanceLabel(t, b));
  nlohmann::ordered_json j = {{"parameter", t.parameter},
                              {"layer", t.layer},
                              {"role", t.role},
                              {"heads", t.heads},
                              {"rows", t.rows},
                              {"width", t.width},
                              {"bucket_map", t.bucket_map},
                              {"distance", t.distance},
                              {"distance_label", labels},
                              {"row_norm", t.row_norm},
                              {"movement", t.movement}};
  if (!t.signal.empty()) {
    std::vector<bool> untrained(t.untrained.begin(), t.untrained.end());
    j["pair_count"] = t.pair_count;
    j["signal"] = t.signal;
    if (!t.signal_per_head.empty()) j["signal_per_head"] = t.signal_per_head;
    j["untrained"] = untrained;
    j["untrained_rows"] = t.untrained_rows;
    j["threshold"] = t.threshold;
    j["share"] = t.share;
    j["share_k"] = t.share_k;
    j["verdict"] = Verdict(t);
  }
  return j;
}

void PrintTable(const TableInspection& t, bool with_signal, std::ostream& out) {
  out << "\n" << t.parameter << " (" << TableName(t) << ", " << t.rows
      << " rows x " << t.width
      << (t.heads > 1 ? ", per head x " + std::to_string(t.heads) : "")
      << "; rows " << t.bucket_map << ")\n";
  out << (with_signal
              ? "   row  distance         pairs        signal      norm  "
                "   moved\n"
              : "   row  distance      norm     moved\n");
  for (int64_t b = 0; b < t.rows; ++b) {
    char line[160];
    if (with_signal) {
      std::snprintf(line, sizeof line,
                    "%6lld  %8s  %12lld  %12.4e  %8.4f  %8.4f%s\n",
                    static_cast<long long>(b), DistanceLabel(t, b).c_str(),
                    static_cast<long long>(t.pair_count[b]), t.signal[b],
                    t.row_norm[b], t.movement[b],
                    t.untrained[b] ? "  untrained" : "");
    } else {
      std::snprintf(line, sizeof line, "%6lld  %8s  %8.4f  %8.4f\n",
                    static_cast<long long>(b), DistanceLabel(t, b).c_str(),
                    t.row_norm[b], t.movement[b]);
    }
    out << line;
  }
}

// Per role (AK, AV, ...): signal (relative to the table's largest row) and
// movement against distance, one line per layer.
std::string InspectSvg(const Inspection& in) {
  std::map<std::string, std::vector<const TableInspection*>> by_role;
  std::vector<std::string> roles;
  for (const TableInspection& t : in.tables) {
    if (!by_role.count(TableName(t))) roles.push_back(TableName(t));
    by_role[TableName(t)].push_back(&t);
  }
  const std::string trained =
      in.train_max_tokens > 0
          ? " (training distances |r| <= " +
                std::to_string(in.train_max_tokens - 1) + ")"
          : "";
  constexpr int kWidth = 720, kHeight = 400;
  std::vector<std::string> panels;
  for (const std::string& role : roles) {
    for (int kind = in.has_signal ? 0 : 1; kind < 2; ++kind) {
      std::vector<PlotSeries> series;
      double y_max = 0;
      for (const TableInspection* t : by_role[role]) {
        PlotSeries s{.name = "layer " + std::to_string(t->layer)};
        double top = 0;
        for (double x : t->signal) top = std::max(top, x);
        std::vector<std::pair<double, double>> pts;
        for (int64_t b = 0; b < t->rows; ++b) {
          if (t->distance_min[b] > t->distance_max[b]) continue;  // unused
          const double y = kind == 0 ? (top > 0 ? t->signal[b] / top : 0.0)
                                     : t->movement[b];
          pts.emplace_back(static_cast<double>(t->distance[b]), y);
          y_max = std::max(y_max, y);
        }
        std::sort(pts.begin(), pts.end());
        s.points = std::move(pts);
        series.push_back(std::move(s));
      }
      PlotOptions o;
      o.title = (kind == 0 ? "Training signal of " : "Movement of ") + role +
                " rows" + trained;
      o.x_label = "distance r = j - i (key minus query)";
      o.y_label = kind == 0 ? "signal / largest row's" : "||row - initial||";
      o.y_max = kind == 0 ? 1.0 : (y_max > 0 ? 1.05 * y_max : 1.0);
      o.width = kWidth;
      o.height = kHeight;
      panels.push_back(RenderSvg(series, o));
    }
  }
  return StackSvg(panels, kWidth, kHeight);
}

void RunInspect(const InspectFlags& f, std::ostream& out) {
  const Inspection in = AsFlag("--untrained-fraction", "untrained_fraction",
                               [&] {
                                 return AsFlag("--share", "share", [&] {
                                   return Inspect(f.dir, f.options);
                                 });
                               });
  if (!f.svg.empty()) {
    RELPOS_CLI_CHECK(!in.tables.empty(),
                     "--svg: the checkpoint has no relative tables (position "
                         << in.config.Get("model", "position") << ")");
    WriteFileAtomically(f.svg, InspectSvg(in));
  }
  if (f.json) {
    nlohmann::ordered_json tables = nlohmann::ordered_json::array();
    for (const TableInspection& t : in.tables) tables.push_back(TableJson(t));
    nlohmann::ordered_json j = {
        {"checkpoint", PathText(f.dir)},
        {"position", in.config.Get("model", "position")},
        {"arch", in.config.Get("model", "arch")},
        {"step", in.step},
        {"train_max_tokens", in.train_max_tokens},
        {"has_signal", in.has_signal},
        {"untrained_fraction", f.options.untrained_fraction},
        {"share", f.options.share}};
    if (in.has_signal) {
      j["first_step"] = in.first_step;
      j["steps"] = in.steps;
    } else {
      j["no_signal"] = in.no_signal;
    }
    j["tables"] = tables;
    out << j.dump() << "\n";
    return;
  }
  out << "checkpoint " << PathText(f.dir) << ": position " << PositionLabel(in.config)
      << ", " << in.config.Get("model", "arch") << ", step " << in.step;
  if (in.train_max_tokens > 0) {
    out << ", trained on sequences of at most " << in.train_max_tokens
        << " tokens (distances |r| <= " << in.train_max_tokens - 1 << ")";
  }
  out << "\n";
  if (in.tables.empty()) {
    out << "no relative tables: position "
        << in.config.Get("model", "position")
        << " learns no distance-indexed rows\n";
    return;
  }
  if (in.has_signal) {
    char rule[200];
    std::snprintf(rule, sizeof rule,
                  "signal = sum over updates %lld..%lld of ||gradient of the "
                  "row||^2; untrained: below %g x the median row with any\n",
                  static_cast<long long>(in.first_step),
                  static_cast<long long>(in.first_step + in.steps - 1),
                  f.options.untrained_fraction);
    out << rule;
  } else {
    out << in.no_signal << "\n";
  }
  for (const TableInspection& t : in.tables) PrintTable(t, in.has_signal, out);
  if (in.has_signal) {
    out << "\n";
    for (const TableInspection& t : in.tables) out << Verdict(t) << "\n";
  }
}

}  // namespace

void AddInspectVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Which distances a checkpoint's relative tables learned: per-row "
      "pairs, gradient signal, norm and movement");
  sub->add_option("dir", flags->dir, "Checkpoint folder (from relpos train)")
      ->required();
  sub->add_flag("--json", flags->json,
                "Print one JSON object (per-table arrays) instead of tables");
  sub->add_option("--svg", flags->svg,
                  "Write signal and movement against distance to this SVG");
  sub->add_option("--share", flags->options.share,
                  "Verdict: smallest k holding this share of the signal")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(text, v) || !(v > 0 && v <= 1)) {
              return "must be a number in (0, 1] (got " + text + ")";
            }
            return "";
          },
          "FLOAT in (0, 1]"));
  sub->add_option("--untrained-fraction", flags->options.untrained_fraction,
                  "Verdict: a row below this fraction of the median row's "
                  "signal is untrained (docs/inspect.md)")
      ->check(CLI::Range(0.0, 1.0));
  sub->callback([flags, &out] { RunInspect(*flags, out); });
}

}  // namespace relpos::cli
