// The fixed sinusoid tables of relpos/position_schemes.h: the absolute
// encoding of scheme `sinusoidal` and Transformer-XL's relative encodings R
// (the one implementation; the model, the Python package and the tests take
// them from here).
#include <cmath>
#include <cstdint>

#include "base/check.h"
#include "relpos/position_schemes.h"

namespace relpos {
namespace {

constexpr int64_t kMaxTableSize = int64_t{1} << 40;

// The frequency of pair t of a width-dim table: 10000^(-2t / dim).
double Frequency(int64_t t, int64_t dim) {
  return std::exp(-std::log(10000.0) * static_cast<double>(2 * t) /
                  static_cast<double>(dim));
}

template <typename T>
void Sinusoidal(int64_t length, int64_t dim, T* table) {
  RELPOS_CHECK_ARG(length >= 0 && dim >= 1 && length <= kMaxTableSize / dim,
                   "SinusoidalTable: length must be >= 0 and dim >= 1 with "
                   "length x dim <= 2^40 (got "
                       << length << " x " << dim << ")");
  // Shapes: table [length, dim].
  for (int64_t p = 0; p < length; ++p) {
    for (int64_t c = 0; c < dim; ++c) {
      // Dims 2i and 2i+1 share a frequency.
      const double angle = static_cast<double>(p) * Frequency(c / 2, dim);
      table[p * dim + c] =
          static_cast<T>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
}

template <typename T>
void XlSinusoids(int64_t k, int64_t dim, T* table) {
  RELPOS_CHECK_ARG(
      k >= 0 && dim >= 2 && dim % 2 == 0 && k < kMaxTableSize / dim / 2,
      "XlSinusoidTable: k must be >= 0 and dim even and >= 2 with "
      "(2k+1) x dim <= 2^40 (got k = "
          << k << ", dim = " << dim << ")");
  // Shapes: table [2k+1, dim].
  const int64_t half = dim / 2;
  for (int64_t row = 0; row <= 2 * k; ++row) {
    const double x = static_cast<double>(k - row);  // XL's i - j = -r
    for (int64_t t = 0; t < half; ++t) {
      const double angle = x * Frequency(t, dim);
      table[row * dim + t] = static_cast<T>(std::sin(angle));
      table[row * dim + half + t] = static_cast<T>(std::cos(angle));
    }
  }
}

}  // namespace

void SinusoidalTable(int64_t length, int64_t dim, float* table) {
  Sinusoidal(length, dim, table);
}
void SinusoidalTable(int64_t length, int64_t dim, double* table) {
  Sinusoidal(length, dim, table);
}
void XlSinusoidTable(int64_t k, int64_t dim, float* table) {
  XlSinusoids(k, dim, table);
}
void XlSinusoidTable(int64_t k, int64_t dim, double* table) {
  XlSinusoids(k, dim, table);
}

}  // namespace relpos
