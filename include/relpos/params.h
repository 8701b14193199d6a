// Parameter counts and initialisation of relative position tables
// (docs/math.md section 5).
#ifndef RELPOS_PARAMS_H_
#define RELPOS_PARAMS_H_

#include <cstdint>

#include "relpos/tensor_view.h"

namespace relpos {

struct LayerShape {
  int64_t d_model = 512;
  int64_t heads = 8;
  int64_t max_distance = 16;  // k
  int64_t dk = 0;             // 0: d_model / heads
  int64_t dv = 0;             // 0: d_model / heads
  bool per_head_tables = false;
};

struct ParamCounts {
  int64_t dk = 0, dv = 0;
  int64_t table_rows = 0;                // 2k + 1
  int64_t relative_params_per_head = 0;  // one table pair: (2k+1)(dk+dv)
  int64_t relative_params = 0;           // per layer: x heads if per-head
  int64_t qkv_params = 0;                // d_model * heads * (2 dk + dv)
  int64_t output_params = 0;             // heads * dv * d_model
};

// Validates `shape` (positive sizes, d_model divisible by heads unless dk and
// dv are both given, k >= 0) and counts. Throws InvalidArgument.
ParamCounts CountParams(const LayerShape& shape);

enum class TableInit {
  kXavierNormal,   // N(0, (scale * sqrt(2 / (rows + d)))^2)
  kXavierUniform,  // U(-a, a), a = scale * sqrt(6 / (rows + d))
  kZeros,
};

struct TableInitOptions {
  TableInit kind = TableInit::kXavierNormal;
  double scale = 1.0;  // multiplier on the Xavier std / bound; >= 0, finite
  uint64_t seed = 0;
};

// Xavier/Glorot std for a [rows, d] table: sqrt(2 / (rows + d)).
double XavierStd(int64_t rows, int64_t d);

// Fills a [2k+1, d] or [H, 2k+1, d] table. fan_in + fan_out = rows + d, taken
// from the last two extents. Deterministic for a given seed on every platform
// (relpos's own generator; std:: distributions vary between libraries).
void InitRelativeTable(TensorView<float> table, const TableInitOptions& options);

}  // namespace relpos

#endif  // RELPOS_PARAMS_H_
