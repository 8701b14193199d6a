#include "relpos/params.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "relpos/error.h"

namespace relpos {
namespace {

TEST(CountParams, ShawBaseTwelveHeadsPerHead) {
  // docs/math.md section 5: d_model 768, 12 heads (dk = 64), k = 64.
  LayerShape s{.d_model = 768, .heads = 12, .max_distance = 64,
               .per_head_tables = true};
  const ParamCounts c = CountParams(s);
  EXPECT_EQ(c.dk, 64);
  EXPECT_EQ(c.dv, 64);
  EXPECT_EQ(c.table_rows, 129);
  EXPECT_EQ(c.relative_params_per_head, 16512);
  EXPECT_EQ(c.relative_params, 198144);
  EXPECT_EQ(c.qkv_params, 1769472);
  EXPECT_EQ(c.output_params, 589824);
}

TEST(CountParams, SharedTablesCountOnce) {
  LayerShape s{.d_model = 768, .heads = 12, .max_distance = 64};
  EXPECT_EQ(CountParams(s).relative_params, 16512);
}

TEST(CountParams, ExplicitWidthsAndKZero) {
  LayerShape s{.d_model = 10, .heads = 3, .max_distance = 0, .dk = 4, .dv = 5};
  const ParamCounts c = CountParams(s);
  EXPECT_EQ(c.relative_params_per_head, 1 * (4 + 5));
  EXPECT_EQ(c.qkv_params, 10 * 3 * (4 + 4 + 5));
}

TEST(CountParams, RejectsBadShapes) {
  auto expect_error = [](LayerShape s, const std::string& needle) {
    try {
      CountParams(s);
      FAIL() << "no error for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << e.what();
    }
  };
  expect_error({.d_model = 0}, "d_model must be in [1");
  expect_error({.heads = 0}, "heads must be in [1");
  expect_error({.max_distance = -1}, "max_distance must be in [0");
  expect_error({.d_model = 100, .heads = 8}, "d_model (100) must be divisible");
}

// The empirical std of a large table matches sqrt(2 / (rows + d)) * scale.
// With n samples the sample std has relative standard error 1/sqrt(2n); we
// allow 6 standard errors.
TEST(InitRelativeTable, EmpiricalStdMatchesXavier) {
  for (TableInit kind : {TableInit::kXavierNormal, TableInit::kXavierUniform}) {
    const int64_t rows = 2 * 64 + 1, d = 64, heads = 16;
    std::vector<float> t(heads * rows * d);
    InitRelativeTable(TensorView<float>(t.data(), {heads, rows, d}),
                      {.kind = kind, .scale = 0.5, .seed = 7});
    double sum = 0, sum2 = 0;
    for (float x : t) {
      sum += x;
      sum2 += double(x) * x;
    }
    const double n = static_cast<double>(t.size());
    const double mean = sum / n;
    const double std = std::sqrt(sum2 / n - mean * mean);
    const double want = 0.5 * std::sqrt(2.0 / (rows + d));
    EXPECT_NEAR(std / want, 1.0, 6.0 / std::sqrt(2.0 * n));
    EXPECT_NEAR(mean, 0.0, 6.0 * want / std::sqrt(n));
  }
}

TEST(InitRelativeTable, SeededAndReproducible) {
  std::vector<float> a(33 * 8), b(33 * 8), c(33 * 8);
  InitRelativeTable(TensorView<float>(a.data(), {33, 8}), {.seed = 1});
  InitRelativeTable(TensorView<float>(b.data(), {33, 8}), {.seed = 1});
  InitRelativeTable(TensorView<float>(c.data(), {33, 8}), {.seed = 2});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(InitRelativeTable, RejectsBadArguments) {
  std::vector<float> a(8);
  EXPECT_THROW(InitRelativeTable(TensorView<float>(a.data(), {8}), {}),
               InvalidArgument);
  EXPECT_THROW(InitRelativeTable(TensorView<float>(a.data(), {2, 4}),
                                 {.scale = -1.0}),
               InvalidArgument);
  EXPECT_THROW(InitRelativeTable(TensorView<float>(), {}), InvalidArgument);
}

}  // namespace
}  // namespace relpos
