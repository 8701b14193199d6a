// `relpos params`: table shapes and parameter counts of one attention layer
// (docs/math.md section 5).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "relpos/params.h"

namespace relpos::cli {
namespace {

// 1769472 -> "1,769,472"
std::string Grouped(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t t = 0; t < digits.size(); ++t) {
    if (t && (digits.size() - t) % 3 == 0) out += ',';
    out += digits[t];
  }
  return value < 0 ? "-" + out : out;
}

std::string TableShape(const LayerShape& s, int64_t rows, int64_t d) {
  std::string shape = "[";
  if (s.per_head_tables) shape += std::to_string(s.heads) + ", ";
  return shape + std::to_string(rows) + ", " + std::to_string(d) + "]";
}

struct ParamsFlags {
  LayerShape shape;
  bool json = false;
};

void RunParams(const ParamsFlags& f, std::ostream& out) {
  const LayerShape& s = f.shape;
  const ParamCounts c = CountParams(s);
  const std::string ak = TableShape(s, c.table_rows, c.dk);
  const std::string av = TableShape(s, c.table_rows, c.dv);
  if (f.json) {
    nlohmann::json j = {
        {"d_model", s.d_model},
        {"heads", s.heads},
        {"max_distance", s.max_distance},
        {"dk", c.dk},
        {"dv", c.dv},
        {"per_head_tables", s.per_head_tables},
        {"table_rows", c.table_rows},
        {"ak_shape", nlohmann::json::parse(ak)},
        {"av_shape", nlohmann::json::parse(av)},
        {"relative_params_per_head", c.relative_params_per_head},
        {"relative_params", c.relative_params},
        {"qkv_params", c.qkv_params},
        {"output_params", c.output_params},
    };
    out << j.dump() << "\n";
    return;
  }
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2f%%",
                100.0 * static_cast<double>(c.relative_params) /
                    static_cast<double>(c.qkv_params));
  out << "layer: d_model " << s.d_model << ", " << s.heads << " heads, dk "
      << c.dk << ", dv " << c.dv << ", max distance k " << s.max_distance
      << ", " << (s.per_head_tables ? "per-head" : "shared") << " tables\n"
      << "tables: AK " << ak << ", AV " << av << "\n"
      << "relative params per head ((2k+1)(dk+dv)): "
      << Grouped(c.relative_params_per_head) << "\n"
      << "relative params per layer:                "
      << Grouped(c.relative_params) << "\n"
      << "Q, K, V projection params per layer:      "
      << Grouped(c.qkv_params) << "\n"
      << "output projection params per layer:       "
      << Grouped(c.output_params) << "\n"
      << "relative / QKV:                           " << ratio << "\n";
}

}  // namespace

void AddParamsVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<ParamsFlags>();
  CLI::App* sub = app.add_subcommand(
      "params", "Print relative table shapes and parameter counts of a layer");
  sub->add_option("--d-model", flags->shape.d_model, "Model width")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  sub->add_option("--heads", flags->shape.heads, "Attention heads")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  sub->add_option("--max-distance,-k", flags->shape.max_distance,
                  "Clipping distance k")
      ->required()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  sub->add_option("--dk", flags->shape.dk, "Key/query width")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->default_str("d_model/heads");
  sub->add_option("--dv", flags->shape.dv, "Value width")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->default_str("d_model/heads");
  sub->add_flag("--per-head", flags->shape.per_head_tables,
                "One table pair per head (default: shared, as Shaw et al.)");
  sub->add_flag("--json", flags->json, "Print one JSON object");
  sub->callback([flags, &out] { RunParams(*flags, out); });
}

}  // namespace relpos::cli
