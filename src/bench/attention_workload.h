// The benchmark workloads are public: include/relpos/bench.h. This header
// remains for bench/attention_bench.cc.
#ifndef RELPOS_SRC_BENCH_ATTENTION_WORKLOAD_H_
#define RELPOS_SRC_BENCH_ATTENTION_WORKLOAD_H_

#include "relpos/bench.h"

#endif  // RELPOS_SRC_BENCH_ATTENTION_WORKLOAD_H_
