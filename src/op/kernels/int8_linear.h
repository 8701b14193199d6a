// Linear layers with int8 weights, for inference (docs/generate.md,
// "Quantized inference"):
//
//   y[r, j] = sx[r] sw[j] sum_c qx[r, c] qw[j, c]  (+ bias[j])
//
// The weights W [n, k] are quantized once, per output row (channel):
// sw[j] = max_c |W[j, c]| / 127 and qw[j, c] = round(W[j, c] / sw[j]) in
// [-127, 127]. The activations are quantized per call, per row (dynamic):
// sx[r] = max_c |x[r, c]| / A and qx[r, c] = round(x[r, c] / sx[r]) in
// [-A, A], with A the largest int16 range for which no int32 sum can
// overflow, A = min(32767, floor((2^31 - 1) / (127 k_pad))): 32767 up to
// k = 516, 8256 at k = 2048. The sums are exact integer arithmetic (int8
// weights widened to int16, multiply-add of int16 pairs into int32), so
// every result is independent of the instruction set and of the thread
// count; only the final scaling rounds. A batch-1 decoding step streams each
// weight once, and int8 is a quarter of float32's bytes.
//
// Error: with |qx - x/sx| <= 1/2 and |qw - W/sw| <= 1/2 per element,
//   |y - x W^T| <= sx sw (sum_c |qx_c| + sum_c |qw_c| + k/2) / 2
// plus float rounding of the scaling (int8_linear_test.cc checks it).
//
// A row of x holding NaN or an infinity gives NaN in every output of that
// row (the float product would be NaN or infinite there too).
#ifndef RELPOS_SRC_OP_KERNELS_INT8_LINEAR_H_
#define RELPOS_SRC_OP_KERNELS_INT8_LINEAR_H_

#include <cstdint>
#include <vector>

namespace relpos {

// Rows are padded with zeros to a multiple of this many columns, so the
// kernels never need a partial vector.
inline constexpr int64_t kInt8RowAlign = 64;

// A weight matrix [rows, cols] quantized per row.
struct Int8Matrix {
  int64_t rows = 0, cols = 0;
  int64_t stride = 0;          // cols rounded up to kInt8RowAlign
  std::vector<int8_t> values;  // [rows, stride], zeros beyond cols
  std::vector<float> scales;   // [rows]: W[j, c] ~= scales[j] * values[j, c]
  // Bytes held (values and scales).
  int64_t bytes() const {
    return static_cast<int64_t>(values.size()) +
           static_cast<int64_t>(scales.size() * sizeof(float));
  }
};

// Quantizes w [rows, cols] (row stride ldw >= cols) per row. A row of zeros
// gets scale 0. InvalidArgument for a negative size or ldw < cols, and for
// a non-finite weight (naming its row and column).
Int8Matrix QuantizeRows(const float* w, int64_t rows, int64_t cols,
                        int64_t ldw);

// The activation range A for rows of `stride` columns (see above).
int32_t Int8ActivationRange(int64_t stride);

// y[r, :] = x[r, :] W^T (+ bias, unless nullptr) for r < m, with x
// [m, w.cols] (row stride ldx >= w.cols) and y [m, w.rows] (row stride
// ldy >= w.rows), quantizing x per row as above. Threads (up to
// num_threads; one for small products) take blocks of W's rows.
void Int8Linear(int64_t m, const float* x, int64_t ldx, const Int8Matrix& w,
                const float* bias, float* y, int64_t ldy, int num_threads);

// Highway target Int8Linear dispatches to on this CPU ("AVX3", "AVX2", ...;
// "AVX3+VNNI" where AVX3's CPU has AVX-512 VNNI and its vpdpwssd runs the
// multiply-adds).
const char* Int8LinearTargetName();

// Tests: false makes an AVX-512 VNNI CPU take the plain AVX3 path too.
void Int8LinearAllowVnniForTest(bool allow);

}  // namespace relpos

#endif  // RELPOS_SRC_OP_KERNELS_INT8_LINEAR_H_
