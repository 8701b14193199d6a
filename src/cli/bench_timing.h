// How `relpos bench` times the workloads of relpos/lab/bench.h: medians,
// interleaved rounds and their ratios, the SGEMM baseline, a scoped OpenMP
// thread count (docs/benchmarks.md, "Conventions").
#ifndef RELPOS_SRC_CLI_BENCH_TIMING_H_
#define RELPOS_SRC_CLI_BENCH_TIMING_H_

#include <cstdint>
#include <functional>
#include <vector>

namespace relpos::cli {

// Median of `repeats` timed calls of `fn`, in seconds. One untimed warm-up
// call first (page faults, thread-pool start, caches), except that a warm-up
// slower than `self_warm_seconds` is kept as the first sample: for calls that
// long the first-call costs (milliseconds) are under 1%, and the slow
// reference path should not pay twice. repeats >= 1.
double MedianSeconds(const std::function<void()>& fn, int repeats,
                     double self_warm_seconds = 1.0);

// Interleaved timing, for comparisons on a shared machine: `repeats` rounds,
// each calling every function of `fns` once, in order (ABAB...), after one
// untimed warm-up round, which is kept as the first round when its slowest
// call took more than `self_warm_seconds` (as MedianSeconds). Load that
// comes and goes during the run then slows every function of a round alike,
// where timing all repeats of one function before the next turns it into a
// bias between them. Returns seconds[f][round]. repeats >= 1.
std::vector<std::vector<double>> InterleavedSeconds(
    const std::vector<std::function<void()>>& fns, int repeats,
    double self_warm_seconds = 1.0);

// The median of x (the mean of the two middle values for an even count);
// x non-empty.
double Median(std::vector<double> x);

// Per-round ratios num[r] / den[r] of two interleaved series: their median
// and their smallest and largest value (the spread). Same non-zero length.
struct RatioSpread {
  double median = 0, min = 0, max = 0;
};
RatioSpread RoundRatios(const std::vector<double>& num,
                        const std::vector<double>& den);

// GFLOP/s of relpos's SGEMM (bench::SgemmWorkload) on size^3, the median
// of `repeats` after a warm-up.
double SgemmGflops(int64_t size, int repeats);

// RAII: omp_set_num_threads(threads) for the scope (threads > 0), restored at
// exit. oneDNN's Sgemm and the fused kernel's default both follow it.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;
  // The count in effect inside the scope.
  int threads() const { return threads_; }

 private:
  int saved_;
  int threads_;
};

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_BENCH_TIMING_H_
