// Parameter counts and table initialisation (docs/math.md section 5).
#include "relpos/params.h"

#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/rng.h"

namespace relpos {
namespace {

// Sizes above this are rejected: products of a few of them stay in int64.
constexpr int64_t kMaxExtent = int64_t{1} << 24;

void CheckExtent(const char* name, int64_t value, int64_t min) {
  RELPOS_CHECK_ARG(value >= min && value <= kMaxExtent,
                   name << " must be in [" << min << ", " << kMaxExtent
                        << "] (got " << value << ")");
}

}  // namespace

ParamCounts CountParams(const LayerShape& shape) {
  CheckExtent("d_model", shape.d_model, 1);
  CheckExtent("heads", shape.heads, 1);
  CheckExtent("max_distance", shape.max_distance, 0);
  CheckExtent("dk", shape.dk, 0);
  CheckExtent("dv", shape.dv, 0);
  if (shape.dk == 0 || shape.dv == 0) {
    RELPOS_CHECK_ARG(shape.d_model % shape.heads == 0,
                     "d_model (" << shape.d_model
                                 << ") must be divisible by heads ("
                                 << shape.heads
                                 << ") unless dk and dv are both given");
  }
  ParamCounts c;
  c.dk = shape.dk ? shape.dk : shape.d_model / shape.heads;
  c.dv = shape.dv ? shape.dv : shape.d_model / shape.heads;
  c.table_rows = 2 * shape.max_distance + 1;
  c.relative_params_per_head = c.table_rows * (c.dk + c.dv);
  c.relative_params = shape.per_head_tables
                          ? shape.heads * c.relative_params_per_head
                          : c.relative_params_per_head;
  c.qkv_params = shape.d_model * shape.heads * (2 * c.dk + c.dv);
  c.output_params = shape.heads * c.dv * shape.d_model;
  return c;
}

double XavierStd(int64_t rows, int64_t d) {
  RELPOS_CHECK_ARG(rows > 0 && d > 0, "XavierStd needs rows > 0 and d > 0 (got "
                                          << rows << ", " << d << ")");
  return std::sqrt(2.0 / static_cast<double>(rows + d));
}

void InitRelativeTable(TensorView<float> table,
                       const TableInitOptions& options) {
  RELPOS_CHECK_ARG(!table.empty(), "table must not be empty");
  RELPOS_CHECK_ARG(table.rank() == 2 || table.rank() == 3,
                   "table must have rank 2 [2k+1, d] or 3 [H, 2k+1, d] (got "
                       << table.ShapeString() << ")");
  RELPOS_CHECK_ARG(std::isfinite(options.scale) && options.scale >= 0,
                   "scale must be finite and >= 0 (got " << options.scale
                                                         << ")");
  const int64_t rows = table.dim(table.rank() - 2);
  const int64_t d = table.dim(table.rank() - 1);
  float* data = table.data();
  const int64_t n = table.numel();
  if (options.kind == TableInit::kZeros || n == 0) {
    for (int64_t t = 0; t < n; ++t) data[t] = 0.0f;
    return;
  }
  const double std = options.scale * XavierStd(rows, d);
  Rng rng(options.seed);
  if (options.kind == TableInit::kXavierNormal) {
    for (int64_t t = 0; t < n; ++t) data[t] = static_cast<float>(std * rng.Normal());
  } else {
    // Uniform on [-a, a] has variance a^2 / 3, so a = sqrt(3) * std.
    const double a = std::sqrt(3.0) * std;
    for (int64_t t = 0; t < n; ++t) {
      data[t] = static_cast<float>(a * (2.0 * rng.Uniform() - 1.0));
    }
  }
}

}  // namespace relpos
