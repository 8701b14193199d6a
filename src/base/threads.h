// OpenMP thread settings shared by the op and everything above it: how many
// threads a call uses, the run's thread count (reductions, and so the last
// bits of results, depend on it), and when a loop is worth a parallel region.
#ifndef RELPOS_SRC_BASE_THREADS_H_
#define RELPOS_SRC_BASE_THREADS_H_

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>

#include "base/check.h"

namespace relpos::base {

// OpenMP's current team size; 1 in a build without OpenMP (the fuzzers).
inline int MaxThreads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Sets OpenMP's team size for later regions (nothing without OpenMP).
inline void SetTeamSize(int threads) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

// An OpenMP region costs a few microseconds (more when the cores are shared
// and threads must be woken), so elementwise loops with fewer elements than
// this (roughly ~10 us of work) run on the calling thread. Every parallel
// loop splits its work so that results are identical either way.
inline constexpr int64_t kMinParallelWork = int64_t{1} << 15;

// The threads a call with `num_threads` uses: that many when positive, else
// OpenMP's current team size (at least 1).
inline int ResolveThreads(int num_threads) {
  return num_threads > 0 ? num_threads : std::max(1, MaxThreads());
}

// Sets the OpenMP thread count (threads >= 1); returns the value in force.
inline int SetThreads(int threads) {
  RELPOS_CHECK_ARG(threads >= 1,
                   "threads must be >= 1 (got " << threads << ")");
  SetTeamSize(threads);
  return MaxThreads();
}

// Sets this thread's OpenMP team size for the scope (oneDNN reads
// omp_get_max_threads() on every call).
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : saved_(MaxThreads()) {
    SetTeamSize(threads);
  }
  ~ScopedOmpThreads() { SetTeamSize(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace relpos::base

#endif  // RELPOS_SRC_BASE_THREADS_H_
