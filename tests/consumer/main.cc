// Uses only the installed public headers: one forward pass, checked.
#include <cmath>
#include <cstdio>
#include <vector>

#include "relpos/relpos.h"

int main() {
  const int64_t n = 5, d = 4, k = 2;
  std::vector<float> q(n * d, 0.1f), kk(n * d, 0.2f), v(n * d, 1.0f);
  std::vector<float> ak((2 * k + 1) * d, 0.0f), av((2 * k + 1) * d, 0.0f);
  std::vector<float> out(n * d), lse(n);
  relpos::AttentionForward<float>(
      {.q = {q.data(), {1, 1, n, d}}, .k = {kk.data(), {1, 1, n, d}},
       .v = {v.data(), {1, 1, n, d}}, .ak = {ak.data(), {2 * k + 1, d}},
       .av = {av.data(), {2 * k + 1, d}}},
      {out.data(), {1, 1, n, d}}, {lse.data(), {1, 1, n}},
      {.max_distance = k});
  // Every value row is all ones, so every output is 1.
  for (float x : out) {
    if (std::fabs(x - 1.0f) > 1e-5f) {
      std::printf("consumer: wrong output %f\n", x);
      return 1;
    }
  }
  std::printf("relpos %s: consumer ok\n", RELPOS_VERSION_STRING);
  return 0;
}
