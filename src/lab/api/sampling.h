// The next token from a row of logits: greedy, or a draw from the tempered,
// top-k-limited softmax. Used by relpos::Generate (src/lab/api/generate.cc).
#ifndef RELPOS_SRC_LAB_API_SAMPLING_H_
#define RELPOS_SRC_LAB_API_SAMPLING_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "base/rng.h"

namespace relpos {

// logits [vocab] -> a token id in [0, vocab). temperature == 0: the argmax
// (ties to the lowest id; no draw from rng). temperature > 0: token i with
// probability exp(logits[i] / temperature) / Z over the top_k largest logits
// (ties to the lower id; top_k == 0 or >= vocab: all of them), computed in
// double; one rng.Uniform() per call.
template <typename T>
int32_t SampleToken(const T* logits, int64_t vocab, double temperature,
                    int64_t top_k, Rng& rng) {
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (temperature == 0) {
    return *std::min_element(order.begin(), order.end(), higher);
  }
  const int64_t k = top_k > 0 ? std::min(top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), higher);
  // exp((l - max) / T): the largest weight is 1, so nothing overflows.
  const double top = static_cast<double>(logits[order[0]]);
  std::vector<double> weight(k);
  double total = 0;
  for (int64_t i = 0; i < k; ++i) {
    weight[i] =
        std::exp((static_cast<double>(logits[order[i]]) - top) / temperature);
    total += weight[i];
  }
  double u = rng.Uniform() * total;
  for (int64_t i = 0; i < k; ++i) {
    u -= weight[i];
    if (u < 0) return order[i];
  }
  return order[k - 1];  // u landed on the rounding of the last weight
}

}  // namespace relpos

#endif  // RELPOS_SRC_LAB_API_SAMPLING_H_
