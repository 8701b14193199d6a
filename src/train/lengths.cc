#include "train/lengths.h"

#include <set>

#include "base/check.h"

namespace relpos::train {

namespace {

// Strict decimal parse of a positive integer (no sign, no spaces, no
// overflow). Returns false on anything else.
bool ParsePositive(const std::string& s, int64_t* value) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *value = v;
  return true;
}

}  // namespace

std::vector<std::string> SplitList(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    parts.push_back(
        s.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

std::pair<int64_t, int64_t> ParseLengthRange(const std::string& spec,
                                             const std::string& name,
                                             int64_t max_length) {
  const std::vector<std::string> parts = SplitList(spec, '-');
  int64_t lo = 0, hi = 0;
  const bool ok =
      (parts.size() == 1 && ParsePositive(parts[0], &lo) && (hi = lo, true)) ||
      (parts.size() == 2 && ParsePositive(parts[0], &lo) &&
       ParsePositive(parts[1], &hi));
  RELPOS_CHECK_ARG(ok, name << " must be a length range A-B with positive "
                               "integers (got '"
                            << spec << "')");
  RELPOS_CHECK_ARG(lo <= hi, name << " range " << spec
                                  << " is reversed (the first length must "
                                     "not exceed the second)");
  RELPOS_CHECK_ARG(lo >= 1 && hi <= max_length,
                   name << " lengths must be in [1, " << max_length
                        << "] (got '" << spec << "')");
  return {lo, hi};
}

std::vector<int64_t> ParseLengths(const std::string& spec,
                                  const std::string& name, int64_t max_length) {
  constexpr size_t kMaxCount = 4096;
  std::set<int64_t> lengths;
  RELPOS_CHECK_ARG(!spec.empty(), name << " must not be empty");
  for (const std::string& item : SplitList(spec, ',')) {
    const std::vector<std::string> range_step = SplitList(item, ':');
    RELPOS_CHECK_ARG(
        range_step.size() <= 2,
        name << ": bad item '" << item << "' (expected N, A-B or A-B:STEP)");
    const auto [lo, hi] = ParseLengthRange(range_step[0], name, max_length);
    int64_t stride = 1;
    if (range_step.size() == 2) {
      RELPOS_CHECK_ARG(ParsePositive(range_step[1], &stride) && stride >= 1,
                       name << ": bad step in '" << item
                            << "' (expected a positive integer)");
    }
    RELPOS_CHECK_ARG((hi - lo) / stride + 1 + lengths.size() <= kMaxCount,
                     name << " lists more than " << kMaxCount << " lengths ('"
                          << spec << "')");
    for (int64_t n = lo; n <= hi; n += stride) lengths.insert(n);
    lengths.insert(hi);
  }
  return {lengths.begin(), lengths.end()};
}

std::string FormatLengthRange(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo)
                  : std::to_string(lo) + "-" + std::to_string(hi);
}

}  // namespace relpos::train
