// The benchmark workloads are public: include/relpos/lab/bench.h. This header
// remains for bench/attention_bench.cc.
#ifndef RELPOS_SRC_LAB_WORKLOADS_ATTENTION_WORKLOAD_H_
#define RELPOS_SRC_LAB_WORKLOADS_ATTENTION_WORKLOAD_H_

#include "relpos/lab/bench.h"

#endif  // RELPOS_SRC_LAB_WORKLOADS_ATTENTION_WORKLOAD_H_
