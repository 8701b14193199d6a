// When the layers go parallel. An OpenMP region costs a few microseconds
// (more when the cores are shared and threads must be woken), so loops with
// less work than this run on the calling thread. Every parallel loop in
// src/model/nn and src/model splits work so that results are identical either way.
#ifndef RELPOS_SRC_MODEL_NN_PARALLEL_H_
#define RELPOS_SRC_MODEL_NN_PARALLEL_H_

#include <cstdint>

namespace relpos::nn {

// Roughly the element count of an elementwise loop worth ~10 us.
inline constexpr int64_t kMinParallelWork = int64_t{1} << 15;

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_PARALLEL_H_
