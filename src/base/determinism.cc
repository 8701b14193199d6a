#include "base/determinism.h"

#include <omp.h>

#include "base/check.h"

namespace relpos::base {

uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  // SplitMix64's finaliser over (seed, stream): nearby inputs give unrelated
  // outputs, so streams 1, 2, 3 of one seed do not overlap in practice.
  uint64_t z = seed ^ (stream * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int SetThreads(int threads) {
  RELPOS_CHECK_ARG(threads >= 1,
                   "threads must be >= 1 (got " << threads << ")");
  omp_set_num_threads(threads);
  return omp_get_max_threads();
}

}  // namespace relpos::base
