// The determinism key of a run: seeds split into independent streams, and
// the OpenMP thread count (reductions depend on it).
#ifndef RELPOS_SRC_BASE_DETERMINISM_H_
#define RELPOS_SRC_BASE_DETERMINISM_H_

#include <cstdint>

namespace relpos::base {

// Sets the OpenMP thread count (threads >= 1); returns the value in force.
int SetThreads(int threads);

// Mixes a seed with a stream id (SplitMix64 finaliser): independent streams
// for initialisation, data, dropout and evaluation.
uint64_t DeriveSeed(uint64_t seed, uint64_t stream);

}  // namespace relpos::base

#endif  // RELPOS_SRC_BASE_DETERMINISM_H_
