// The signal file of a checkpoint (signal_stats.h): writing, and reading
// untrusted text against the layout the model config implies. Apart from
// signal_stats.cc so that it depends on nothing but the JSON reader (the
// signal fuzzer links it alone).
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "base/check.h"
#include "base/io/json_reader.h"
#include "train/signal_stats.h"

namespace relpos::train {
namespace {

using io::ThrowBadDocument;

inline constexpr const char* kSignalFormat = "relpos-signal";
inline constexpr int kSignalVersion = 1;

}  // namespace

int64_t MaxSignalFileBytes(const SignalStats& layout) {
  // What EncodeSignalStats writes at most: 2 + (heads > 1 ? heads : 0)
  // numbers per row (a number is at most 24 characters and a comma), a few
  // hundred bytes per table (its name and keys), and the preamble; twice
  // that, for a file re-indented by hand.
  int64_t numbers = 0, tables = 0;
  for (const TableSignal& t : layout.tables) {
    numbers += t.rows * (2 + (t.heads > 1 ? t.heads : 0));
    tables += 1;
  }
  return 2 * (32 * numbers + 512 * tables + 4096);
}

std::string EncodeSignalStats(const SignalStats& stats, int64_t step) {
  nlohmann::ordered_json tables = nlohmann::ordered_json::array();
  for (const TableSignal& t : stats.tables) {
    nlohmann::ordered_json per_head = nlohmann::ordered_json::array();
    for (int64_t h = 0; h < t.heads && t.heads > 1; ++h) {
      per_head.push_back(
          std::vector<double>(t.signal_per_head.begin() + h * t.rows,
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
  if (!j.contains(key) || !j[key].is_number_integer() ||
      (j[key].is_number_unsigned() &&
       j[key].get<uint64_t>() >
           static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    ThrowBadDocument(source, where + "'" + key + "' must be an integer");
  }
  return j[key].get<int64_t>();
}

// A JSON array of exactly `n` numbers, each finite and >= 0.
template <typename T>
std::vector<T> GetArray(const nlohmann::json& j, int64_t n,
                        const std::string& what, const std::string& source) {
  if (!j.is_array() || static_cast<int64_t>(j.size()) != n) {
    ThrowBadDocument(source, what + " must be an array of " +
                                 std::to_string(n) + " numbers");
  }
  std::vector<T> out;
  out.reserve(n);
  for (const auto& x : j) {
    // Integers must also fit int64 (JSON allows larger unsigned ones).
    const bool ok = std::is_integral_v<T>
                        ? x.is_number_integer() &&
                              (!x.is_number_unsigned() ||
                               x.get<uint64_t>() <=
                                   static_cast<uint64_t>(
                                       std::numeric_limits<int64_t>::max()))
                        : x.is_number();
    if (!ok || !std::isfinite(x.get<double>()) || x.get<double>() < 0) {
      ThrowBadDocument(source,
                       what + " must hold finite " +
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
                              const SignalStats& want, int64_t step) {
  const nlohmann::json j =
      io::ParseJson(text, source, {.max_bytes = MaxSignalFileBytes(want)});
  io::CheckFormatAndVersion(j, source, kSignalFormat, kSignalVersion,
                            "signal statistics");
  if (GetInt(j, "step", "", source) != step) {
    ThrowBadDocument(source, "field 'step' does not match config.json's step " +
                                 std::to_string(step) +
                                 " (files from different saves?)");
  }
  SignalStats s;
  s.first_step = GetInt(j, "first_step", "", source);
  s.steps = GetInt(j, "steps", "", source);
  if (s.first_step < 0 || s.first_step > step ||
      s.steps != step - s.first_step) {
    ThrowBadDocument(
        source,
        "fields 'first_step' and 'steps' must satisfy 0 <= first_step "
        "<= step and steps = step - first_step");
  }
  if (!j.contains("tables") || !j["tables"].is_array() ||
      j["tables"].size() != want.tables.size()) {
    ThrowBadDocument(source, "field 'tables' must be an array of the " +
                                 std::to_string(want.tables.size()) +
                                 " relative tables the model config implies");
  }
  for (size_t i = 0; i < want.tables.size(); ++i) {
    const nlohmann::json& jt = j["tables"][i];
    const TableSignal& w = want.tables[i];
    const std::string where = "tables[" + std::to_string(i) + "].";
    if (!jt.is_object() || !jt.contains("parameter") ||
        jt["parameter"] != w.parameter) {
      ThrowBadDocument(source,
                       where + "parameter must be '" + w.parameter + "'");
    }
    if (GetInt(jt, "heads", where, source) != w.heads ||
        GetInt(jt, "rows", where, source) != w.rows) {
      ThrowBadDocument(source, where + "heads and rows must be " +
                                   std::to_string(w.heads) + " and " +
                                   std::to_string(w.rows) +
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
      ThrowBadDocument(
          source, where + "signal_per_head must hold one array per head (" +
                      std::to_string(w.heads > 1 ? w.heads : 0) + ")");
    }
    for (size_t h = 0; h < ph.size(); ++h) {
      const std::vector<double> row = GetArray<double>(
          ph[h], w.rows, where + "signal_per_head[" + std::to_string(h) + "]",
          source);
      std::copy(row.begin(), row.end(),
                t.signal_per_head.begin() + static_cast<int64_t>(h) * w.rows);
    }
    s.tables.push_back(std::move(t));
  }
  return s;
}

}  // namespace relpos::train
