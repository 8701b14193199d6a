// libFuzzer target for the compare.json reader (ParseCompareCells in
// src/lab/api/compare_file.h), which reads a --out folder's compare.json
// back to reuse its cells. Contract checked here:
//   - ParseCompareCells either returns or throws relpos::Error
//     (FormatError); anything else, a crash, a sanitizer report or
//     out-of-memory is a bug; a cell that fails validation is counted as
//     rejected, never returned;
//   - what it accepts has finite, non-negative numbers (accuracies in
//     [0, 1]) and survives CellJson -> ParseCompareCells unchanged,
//     with nothing rejected.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lab/api/compare_file.h"
#include "relpos/error.h"

namespace {

bool Unit(double x) { return std::isfinite(x) && x >= 0 && x <= 1; }

void Check(const relpos::CompareCell& c) {
  for (const relpos::LengthMetrics& m : c.by_length) {
    if (!Unit(m.token_accuracy) || !Unit(m.sequence_accuracy) ||
        !std::isfinite(m.loss) || m.loss < 0 ||
        !std::isfinite(m.bits_per_token) || m.tokens < 0 ||
        m.sequences < 0) {
      __builtin_trap();
    }
  }
  for (double x : {c.train_seconds, c.eval_seconds, c.final_loss}) {
    if (!std::isfinite(x) || x < 0) __builtin_trap();
  }
}

std::string Encode(const std::vector<relpos::CompareCell>& cells) {
  nlohmann::ordered_json j;
  j["format_version"] = relpos::kCompareFormatVersion;
  nlohmann::ordered_json cs = nlohmann::ordered_json::array();
  for (const relpos::CompareCell& c : cells) cs.push_back(relpos::CellJson(c));
  j["cells"] = cs;
  return j.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<relpos::CompareCell> cells;
  int64_t rejected = 0;
  try {
    cells = relpos::ParseCompareCells(text, "compare.json", &rejected);
  } catch (const relpos::Error&) {
    return 0;  // rejected cleanly
  }
  if (rejected < 0) __builtin_trap();
  for (const relpos::CompareCell& c : cells) Check(c);
  // Accepted cells: the round trip must be exact (not caught: a throw is a
  // bug).
  const std::string first = Encode(cells);
  int64_t again_rejected = 0;
  const std::vector<relpos::CompareCell> again =
      relpos::ParseCompareCells(first, "again.json", &again_rejected);
  if (again_rejected != 0 || Encode(again) != first) __builtin_trap();
  return 0;
}
