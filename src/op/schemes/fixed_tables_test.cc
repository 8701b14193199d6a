// The fixed sinusoid tables (relpos/position_schemes.h): their values
// against the formulas, a longer table extending a shorter one, float as
// the double values rounded, and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "relpos/position_schemes.h"
#include "support/expect_invalid.h"

namespace relpos {
namespace {

TEST(FixedTables, SinusoidalValues) {
  const int64_t len = 5, dim = 6;
  std::vector<double> t(len * dim);
  SinusoidalTable(len, dim, t.data());
  for (int64_t c = 0; c < dim; ++c) EXPECT_EQ(t[c], c % 2 == 0 ? 0.0 : 1.0);
  // Position 3, pair 1 (dims 2 and 3): frequency 10000^(-2/6).
  const double f = std::pow(10000.0, -2.0 / 6.0);
  EXPECT_NEAR(t[3 * dim + 2], std::sin(3 * f), 1e-15);
  EXPECT_NEAR(t[3 * dim + 3], std::cos(3 * f), 1e-15);
  // A longer table extends a shorter one (the model caches it).
  std::vector<double> longer(9 * dim);
  SinusoidalTable(9, dim, longer.data());
  for (int64_t i = 0; i < len * dim; ++i) EXPECT_EQ(longer[i], t[i]);
  // float: the same values rounded once.
  std::vector<float> single(len * dim);
  SinusoidalTable(len, dim, single.data());
  for (int64_t i = 0; i < len * dim; ++i) {
    EXPECT_EQ(single[i], static_cast<float>(t[i]));
  }
  // An odd width: the last column is a sine.
  std::vector<double> odd(2 * 3);
  SinusoidalTable(2, 3, odd.data());
  EXPECT_NEAR(odd[3 + 2], std::sin(std::pow(10000.0, -2.0 / 3.0)), 1e-15);
}

TEST(FixedTables, XlSinusoidValues) {
  const int64_t k = 3, dim = 8, half = dim / 2;
  std::vector<double> t((2 * k + 1) * dim);
  XlSinusoidTable(k, dim, t.data());
  for (int64_t row = 0; row <= 2 * k; ++row) {
    const double x = static_cast<double>(k - row);  // XL's i - j = -r
    for (int64_t i = 0; i < half; ++i) {
      const double f = std::pow(10000.0, -2.0 * i / dim);
      EXPECT_NEAR(t[row * dim + i], std::sin(x * f), 1e-15) << row << " " << i;
      EXPECT_NEAR(t[row * dim + half + i], std::cos(x * f), 1e-15)
          << row << " " << i;
    }
  }
  // Row k is distance 0: sines 0, cosines 1.
  for (int64_t i = 0; i < half; ++i) {
    EXPECT_EQ(t[k * dim + i], 0.0);
    EXPECT_EQ(t[k * dim + half + i], 1.0);
  }
  std::vector<float> single(t.size());
  XlSinusoidTable(k, dim, single.data());
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(single[i], static_cast<float>(t[i]));
  }
}

TEST(FixedTables, Validation) {
  std::vector<double> t(64);
  SinusoidalTable(0, 4, t.data());  // empty: nothing written
  ExpectInvalid([&] { SinusoidalTable(-1, 4, t.data()); },
                {"SinusoidalTable", "-1"});
  ExpectInvalid([&] { SinusoidalTable(2, 0, t.data()); },
                {"SinusoidalTable", "dim"});
  ExpectInvalid([&] { SinusoidalTable(int64_t{1} << 40, 2, t.data()); },
                {"SinusoidalTable", "2^40"});
  XlSinusoidTable(0, 2, t.data());
  EXPECT_EQ(t[0], 0.0);
  EXPECT_EQ(t[1], 1.0);
  ExpectInvalid([&] { XlSinusoidTable(-1, 4, t.data()); },
                {"XlSinusoidTable", "k = -1"});
  ExpectInvalid([&] { XlSinusoidTable(2, 5, t.data()); },
                {"XlSinusoidTable", "even", "dim = 5"});
  ExpectInvalid([&] { XlSinusoidTable(int64_t{1} << 40, 2, t.data()); },
                {"XlSinusoidTable", "2^40"});
}

}  // namespace
}  // namespace relpos
