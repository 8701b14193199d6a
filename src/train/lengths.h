// Length lists and ranges as the command line and configs spell them:
// "8-16", "4-64:4", "2,4,8-12".
#ifndef RELPOS_SRC_TRAIN_LENGTHS_H_
#define RELPOS_SRC_TRAIN_LENGTHS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace relpos::train {

// Splits at every `sep`: "a,,b" -> {"a", "", "b"}; "" -> {""}.
std::vector<std::string> SplitList(const std::string& text, char sep = ',');

// Parses a list of lengths: comma-separated items, each "N", "A-B" (every
// length from A to B) or "A-B:S" (A, A+S, ..., up to B; B itself is always
// included). Sorted, duplicates removed. InvalidArgument naming `name` (the
// setting or flag) on a malformed item, a reversed range, a length < 1 or >
// `max_length`, or more than 4096 lengths.
std::vector<int64_t> ParseLengths(const std::string& spec,
                                  const std::string& name,
                                  int64_t max_length = int64_t{1} << 20);
// Parses one range "A-B" (or "N" = "N-N") with 1 <= A <= B <= max_length.
std::pair<int64_t, int64_t> ParseLengthRange(const std::string& spec,
                                             const std::string& name,
                                             int64_t max_length = int64_t{1}
                                                                  << 20);
// "8-16" / "8" (for a one-length range).
std::string FormatLengthRange(int64_t lo, int64_t hi);

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_LENGTHS_H_
