#include "cli/bench_timing.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "cli/cli_common.h"
#include "relpos/lab/bench.h"

namespace relpos::cli {

double MedianSeconds(const std::function<void()>& fn, int repeats,
                     double self_warm_seconds) {
  return Median(InterleavedSeconds({fn}, repeats, self_warm_seconds)[0]);
}

std::vector<std::vector<double>> InterleavedSeconds(
    const std::vector<std::function<void()>>& fns, int repeats,
    double self_warm_seconds) {
  RELPOS_CLI_CHECK(repeats >= 1, "repeats must be >= 1 (got " << repeats
                                                              << ")");
  RELPOS_CLI_CHECK(!fns.empty(), "nothing to time");
  using Clock = std::chrono::steady_clock;
  auto round = [&fns] {
    std::vector<double> t;
    for (const std::function<void()>& fn : fns) {
      const auto start = Clock::now();
      fn();
      t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    return t;
  };
  std::vector<std::vector<double>> seconds(fns.size());
  auto keep = [&seconds](const std::vector<double>& t) {
    for (size_t f = 0; f < t.size(); ++f) seconds[f].push_back(t[f]);
  };
  const std::vector<double> warm = round();
  if (*std::max_element(warm.begin(), warm.end()) > self_warm_seconds) {
    keep(warm);
  }
  while (static_cast<int>(seconds[0].size()) < repeats) keep(round());
  return seconds;
}

double Median(std::vector<double> x) {
  RELPOS_CLI_CHECK(!x.empty(), "median of nothing");
  std::sort(x.begin(), x.end());
  const size_t m = x.size() / 2;
  return x.size() % 2 ? x[m] : 0.5 * (x[m - 1] + x[m]);
}

RatioSpread RoundRatios(const std::vector<double>& num,
                        const std::vector<double>& den) {
  RELPOS_CLI_CHECK(!num.empty() && num.size() == den.size(),
                   "ratios need two series of the same non-zero length (got "
                       << num.size() << " and " << den.size() << ")");
  std::vector<double> r;
  for (size_t i = 0; i < num.size(); ++i) r.push_back(num[i] / den[i]);
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  return {.median = Median(r), .min = *lo, .max = *hi};
}

double SgemmGflops(int64_t size, int repeats) {
  bench::SgemmWorkload w(size);
  return w.Flops() / MedianSeconds([&w] { w.Run(); }, repeats) * 1e-9;
}

ScopedOmpThreads::ScopedOmpThreads(int threads)
    : saved_(omp_get_max_threads()), threads_(saved_) {
  RELPOS_CLI_CHECK(threads >= 0, "threads must be >= 0 (got " << threads
                                                              << ")");
  if (threads > 0) {
    omp_set_num_threads(threads);
    threads_ = threads;
  }
}

ScopedOmpThreads::~ScopedOmpThreads() { omp_set_num_threads(saved_); }

}  // namespace relpos::cli
