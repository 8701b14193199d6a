// compare.json's cells: how `relpos compare` writes them and how a rerun
// reads them back before reusing them (apart from compare.cc so that the
// compare.json fuzzer links it alone).
//
// A reused cell is shown as if it had been trained in this run, so every
// cell read back is checked: each field of the right type and range
// (accuracies in [0, 1]; loss, bits, seconds finite and >= 0; bits = loss /
// ln 2; counts >= 0 and consistent), and its task, position and seed those
// of its own configuration. A cell that fails is not reused (it is trained
// again); RunCompare also checks that it matches the planned cell.
#ifndef RELPOS_SRC_LAB_API_COMPARE_FILE_H_
#define RELPOS_SRC_LAB_API_COMPARE_FILE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "relpos/lab/compare.h"

namespace relpos {

// compare.json's layout; a file of another version is not reused.
inline constexpr int kCompareFormatVersion = 1;
// The largest compare.json read back (far above the kMaxCompareCells cells
// of about 2 KiB each that a grid writes).
inline constexpr int64_t kMaxCompareJsonBytes = int64_t{64} << 20;

// One cell as compare.json holds it.
nlohmann::ordered_json CellJson(const CompareCell& cell);

// The cells of a compare.json text: FormatError "<source>: ..." if it is not
// JSON, too large, or not of this format version; otherwise every cell that
// passes the checks above (marked reused); *rejected counts the others and
// *first_problem (if given) names the first one's bad field.
std::vector<CompareCell> ParseCompareCells(const std::string& text,
                                           const std::string& source,
                                           int64_t* rejected,
                                           std::string* first_problem = nullptr);

}  // namespace relpos

#endif  // RELPOS_SRC_LAB_API_COMPARE_FILE_H_
