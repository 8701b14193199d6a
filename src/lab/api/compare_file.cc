#include "lab/api/compare_file.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/io/json_reader.h"

namespace relpos {
namespace {

using Json = nlohmann::ordered_json;

// Why a cell is not reused (caught per cell).
struct BadCell {
  std::string why;
};

const nlohmann::json& Field(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) throw BadCell{std::string(key)};
  return j[key];
}

int64_t Integer(const nlohmann::json& j, const char* key, int64_t lo) {
  const nlohmann::json& v = Field(j, key);
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() &&
       v.get<uint64_t>() >
           static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
      v.get<int64_t>() < lo) {
    throw BadCell{std::string(key)};
  }
  return v.get<int64_t>();
}

double Number(const nlohmann::json& j, const char* key, double lo,
              double hi = std::numeric_limits<double>::infinity()) {
  const nlohmann::json& v = Field(j, key);
  if (!v.is_number() || !std::isfinite(v.get<double>()) ||
      v.get<double>() < lo || v.get<double>() > hi) {
    throw BadCell{std::string(key)};
  }
  return v.get<double>();
}

std::string Text(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = Field(j, key);
  if (!v.is_string()) throw BadCell{std::string(key)};
  return v.get<std::string>();
}

Json MetricsJson(const LengthMetrics& m) {
  return {{"length", m.length},
          {"sequence_length", m.sequence_length},
          {"token_accuracy", m.token_accuracy},
          {"sequence_accuracy", m.sequence_accuracy},
          {"loss", m.loss},
          {"bits_per_token", m.bits_per_token},
          {"tokens", m.tokens},
          {"sequences", m.sequences},
          {"bleu", m.bleu},
          {"chrf", m.chrf}};
}

LengthMetrics MetricsFromJson(const nlohmann::json& j, int64_t sequences) {
  LengthMetrics m;
  m.length = Integer(j, "length", 1);
  m.sequence_length = Integer(j, "sequence_length", 1);
  m.token_accuracy = Number(j, "token_accuracy", 0, 1);
  m.sequence_accuracy = Number(j, "sequence_accuracy", 0, 1);
  m.loss = Number(j, "loss", 0);
  m.bits_per_token = Number(j, "bits_per_token", 0);
  m.tokens = Integer(j, "tokens", 0);
  m.sequences = Integer(j, "sequences", 0);
  // Written since compare grids score translation; absent in older files.
  if (j.contains("bleu")) m.bleu = Number(j, "bleu", 0, 100);
  if (j.contains("chrf")) m.chrf = Number(j, "chrf", 0, 100);
  // bits = loss / ln 2 (as Evaluate computes it), counts within the
  // evaluation's size.
  const double bits = m.loss / std::log(2.0);
  if (std::fabs(m.bits_per_token - bits) > 1e-9 * std::max(1.0, bits)) {
    throw BadCell{"bits_per_token"};
  }
  if (m.sequences > sequences) throw BadCell{"sequences"};
  if (static_cast<double>(m.tokens) >
      static_cast<double>(m.sequences) *
          static_cast<double>(m.sequence_length)) {
    throw BadCell{"tokens"};
  }
  return m;
}

CompareCell CellFromJson(const nlohmann::json& c) {
  CompareCell cell;
  const nlohmann::json& config = Field(c, "config");
  if (!config.is_object()) throw BadCell{"config"};
  cell.config_json = config.dump();
  cell.sequences_per_length = Integer(c, "sequences_per_length", 1);
  cell.task = Text(c, "task");
  cell.position = Text(c, "position");
  const nlohmann::json& seed = Field(c, "seed");
  if (!seed.is_number_unsigned() &&
      !(seed.is_number_integer() && seed.get<int64_t>() >= 0)) {
    throw BadCell{"seed"};
  }
  cell.seed = seed.get<uint64_t>();
  // The cell's own labels are those of its configuration.
  const nlohmann::json& train = Field(config, "train");
  const nlohmann::json& model = Field(config, "model");
  if (Field(train, "task") != cell.task) throw BadCell{"task"};
  if (Field(model, "position") != cell.position) throw BadCell{"position"};
  if (Field(train, "seed") != seed) throw BadCell{"seed"};
  cell.parameters = Integer(c, "parameters", 1);
  cell.train_seconds = Number(c, "train_seconds", 0);
  cell.eval_seconds = Number(c, "eval_seconds", 0);
  cell.final_loss = Number(c, "final_train_loss", 0);
  const nlohmann::json& by_length = Field(c, "by_length");
  if (!by_length.is_array() || by_length.empty()) throw BadCell{"by_length"};
  for (const nlohmann::json& m : by_length) {
    // A translate cell of a file from before BLEU scoring was scored by
    // accuracy: trained again.
    if (cell.task == "translate" && !m.contains("bleu")) throw BadCell{"bleu"};
    cell.by_length.push_back(MetricsFromJson(m, cell.sequences_per_length));
    if (cell.by_length.size() > 1 &&
        cell.by_length.back().length <=
            cell.by_length[cell.by_length.size() - 2].length) {
      throw BadCell{"by_length"};  // sorted, unique
    }
  }
  cell.reused = true;
  return cell;
}

}  // namespace

Json CellJson(const CompareCell& c) {
  Json by_length = Json::array();
  for (const LengthMetrics& m : c.by_length) by_length.push_back(MetricsJson(m));
  return {{"task", c.task},
          {"position", c.position},
          {"seed", c.seed},
          {"parameters", c.parameters},
          {"train_seconds", c.train_seconds},
          {"eval_seconds", c.eval_seconds},
          {"final_train_loss", c.final_loss},
          {"by_length", by_length},
          {"sequences_per_length", c.sequences_per_length},
          {"config", c.config_json.empty() ? Json()
                                           : Json::parse(c.config_json)}};
}

std::vector<CompareCell> ParseCompareCells(const std::string& text,
                                           const std::string& source,
                                           int64_t* rejected,
                                           std::string* first_problem) {
  *rejected = 0;
  const nlohmann::json j =
      io::ParseJson(text, source, {.max_bytes = kMaxCompareJsonBytes});
  if (!j.is_object() || !j.contains("format_version") ||
      j["format_version"] != kCompareFormatVersion) {
    io::ThrowBadDocument(source, "not a compare.json of format version " +
                                     std::to_string(kCompareFormatVersion));
  }
  if (!j.contains("cells") || !j["cells"].is_array()) {
    io::ThrowBadDocument(source, "field 'cells' must be an array");
  }
  std::vector<CompareCell> cells;
  for (const nlohmann::json& c : j["cells"]) {
    try {
      cells.push_back(CellFromJson(c));
    } catch (const BadCell& bad) {
      if (++*rejected == 1 && first_problem) {
        *first_problem = "field '" + bad.why + "' of cell " +
                         std::to_string(cells.size() + *rejected - 1);
      }
    }
  }
  return cells;
}

}  // namespace relpos
