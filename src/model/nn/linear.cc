#include "model/nn/linear.h"

#include "model/nn/matmul.h"
#include "base/threads.h"

namespace relpos::nn {

template <typename T>
void LinearForward(const T* x, const T* weight, const T* bias, T* y,
                   const LinearShape& s) {
  // Shapes: x [rows, in], weight [out, in], bias [out], y [rows, out].
  // Seed y with the bias, then let the GEMM add x W^T on top (beta = 1), so
  // the bias costs no extra pass over y after the GEMM.
  T beta = 0;
  if (bias != nullptr) {
#pragma omp parallel for schedule(static) if (s.rows * s.out >= \
                                              base::kMinParallelWork)
    for (int64_t r = 0; r < s.rows; ++r) {
      T* row = y + r * s.out;
      for (int64_t o = 0; o < s.out; ++o) row[o] = bias[o];
    }
    beta = 1;
  }
  Matmul<T>(Trans::kNo, Trans::kYes, s.rows, s.out, s.in, T(1), x, s.in, weight,
            s.in, beta, y, s.out);
}

template <typename T>
void LinearBackward(const T* x, const T* weight, const T* dy, T* dx, T* dweight,
                    T* dbias, const LinearShape& s,
                    const LinearBackwardOptions& options) {
  // Shapes: x [rows, in], weight [out, in], dy [rows, out].
  // Differentiates `y = x W^T + b`.
  // dx = dy W: [rows, out] x [out, in].
  if (dx != nullptr) {
    Matmul<T>(Trans::kNo, Trans::kNo, s.rows, s.in, s.out, T(1), dy, s.out,
              weight, s.in, options.accumulate_dx ? T(1) : T(0), dx, s.in);
  }
  // dW = dy^T x: [out, rows] x [rows, in].
  Matmul<T>(Trans::kYes, Trans::kNo, s.out, s.in, s.rows, T(1), dy, s.out, x,
            s.in, T(0), dweight, s.in);
  // db = sum over rows of dy.
  if (dbias != nullptr) ColumnSum<T>(dy, s.rows, s.out, dbias);
}

template void LinearForward<float>(const float*, const float*, const float*,
                                   float*, const LinearShape&);
template void LinearForward<double>(const double*, const double*, const double*,
                                    double*, const LinearShape&);
template void LinearBackward<float>(const float*, const float*, const float*,
                                    float*, float*, float*, const LinearShape&,
                                    const LinearBackwardOptions&);
template void LinearBackward<double>(const double*, const double*,
                                     const double*, double*, double*, double*,
                                     const LinearShape&,
                                     const LinearBackwardOptions&);

}  // namespace relpos::nn
