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
//
// 8-bit activations (Int8Activations::k8, `--compute-type int8_a8`): each
// row with a zero point (asymmetric), over the range it spans: lo =
// min(0, min_c x), hi = max(0, max_c x), sx[r] = (hi - lo) / 254, z[r] =
// nearbyint(-127 - lo / sx[r]) in [-127, 127] and qx[r, c] =
// nearbyint(x[r, c] / sx[r]) + z[r] clamped to [-127, 127], so x ~=
// sx (qx - z) with 0 exact, and
//
//   y[r, j] = sx[r] sw[j] (sum_c qx[r, c] qw[j, c] - z[r] row_sums[j])
//
// with row_sums[j] = sum_c qw[j, c] (Int8Matrix::row_sums): the kernels
// compute the integer sum_c qx qw, then subtract z row_sums (exact) before
// scaling. The step is never coarser than the symmetric max |x| / 127 and
// half of it for a row of one sign (GELU's outputs, whose negative part is
// above -0.17). Where
// the CPU has AVX-512 VNNI the sums run as vpdpbusd (u8 x s8, 64
// multiply-adds per instruction, twice vpdpwssd's) on u = qx + 128 in
// [1, 255], each sum starting from -128 * row_sums[j]: the same integer
// sum_c qx qw. On AVX2 (no VNNI)
// they run as vpmaddubsw on |qw| and qx with qw's sign (vpsignb): each
// int16 pair sum is at most 2 x 127 x 127 and never saturates. Every other
// target feeds the same 8-bit values to its int16 kernel, so the outputs
// are again the same bits on every instruction set and thread count.
// Where Highway dispatches AVX-512 on a CPU with VNNI, or AVX2, both widths
// run on the weights packed in blocks of 16 rows x 4 columns
// (Int8Matrix::packed), whose int32 lanes are outputs (16 per AVX-512
// vector, 8 per AVX2 vector): no horizontal sum per dot product, the same
// integers and the same float scaling. Where the CPU also has AMX (and
// Linux grants its tile state), products of 8 or more activation rows run
// on the tile unit (tdpbssd), reading the same packed blocks as its weight
// tiles: 8-bit activations as signed bytes, 16-bit ones split into a
// signed high byte and an unsigned low byte (tdpbssd + tdpbusd, joined as
// 256 hi + lo): again the same integers and bits. The error bound above
// holds with qx - z in place of qx and sx = (hi - lo) / 254: an activation
// step up to 516 times (2 x 32767 / 127) the int16 path's, 258 times for a
// row of one sign.
#ifndef RELPOS_SRC_OP_KERNELS_INT8_LINEAR_H_
#define RELPOS_SRC_OP_KERNELS_INT8_LINEAR_H_

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace relpos {

// Rows are padded with zeros to a multiple of this many columns, so the
// kernels never need a partial vector.
inline constexpr int64_t kInt8RowAlign = 64;

// Storage aligned to 64 bytes (a cache line, an AVX-512 vector): with
// strides of kInt8RowAlign bytes every row starts a cache line, so no
// 64-byte load of the kernels straddles two.
template <typename T>
struct Int8Allocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  Int8Allocator() = default;
  template <typename U>
  Int8Allocator(const Int8Allocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), kAlign));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <typename U>
  bool operator==(const Int8Allocator<U>&) const { return true; }
};

// A weight matrix [rows, cols] quantized per row.
struct Int8Matrix {
  int64_t rows = 0, cols = 0;
  int64_t stride = 0;          // cols rounded up to kInt8RowAlign
  // [rows, stride], zeros beyond cols; 64-byte aligned. Empty where
  // `packed` holds the weights (QuantizeRows where the packed kernels run:
  // AVX-512 with VNNI, or AVX2): one copy of the int8 weights, not two.
  // Read them with Value().
  std::vector<int8_t, Int8Allocator<int8_t>> values;
  std::vector<float> scales;   // [rows]: W[j, c] ~= scales[j] * Value(j, c)
  // [rows]: sum_c Value(j, c), the 8-bit path's correction for its
  // activations' zero points and for the VNNI kernel's unsigned ones
  // (|row_sums[j]| <= 127 stride).
  std::vector<int32_t> row_sums;
  // The weights packed for the packed kernels (only where they run: AVX-512
  // with VNNI (and AMX), or AVX2; empty elsewhere): blocks of 16 rows x 4
  // columns, 64 bytes each, [ceil(rows / 16), stride / 4, 16, 4], i.e. (16
  // consecutive blocks of a block row are one AMX weight tile)
  // packed[(b * stride / 4 + g) * 64 + i * 4 + c] = Value(16 b + i, 4 g + c),
  // rows from `rows` on zeros; 64-byte aligned.
  std::vector<int8_t, Int8Allocator<int8_t>> packed;
  // The weight [j, c] (c < stride; 0 beyond cols), from whichever layout
  // is held.
  int8_t Value(int64_t j, int64_t c) const {
    if (!values.empty()) return values[static_cast<size_t>(j * stride + c)];
    return packed[static_cast<size_t>(((j / 16) * (stride / 4) + c / 4) * 64 +
                                      (j % 16) * 4 + c % 4)];
  }
  // Bytes of the int8 weights in row-major form, rows x stride, whichever
  // layout holds them (the same on every CPU).
  int64_t row_major_bytes() const { return rows * stride; }
  // Bytes held (values or packed values, scales and row sums).
  int64_t bytes() const {
    return static_cast<int64_t>(values.size()) +
           static_cast<int64_t>(packed.size()) +
           static_cast<int64_t>(scales.size() * sizeof(float)) +
           static_cast<int64_t>(row_sums.size() * sizeof(int32_t));
  }
};

// How Int8Linear quantizes the activations: k16 symmetrically onto the
// int16 range Int8ActivationRange (W8A16, `--compute-type int8`), k8 onto
// [-127, 127] with a zero point (W8A8, `--compute-type int8_a8`).
enum class Int8Activations { k16, k8 };

// The widest padded row (stride) the 8-bit path takes: its VNNI kernel
// starts from -128 sum_c qw (|.| <= 128 * 127 * stride) and adds products
// u x qw with u in [1, 255] and |qw| <= 127 (at most 255 * 127 * stride in
// all), so every int32 partial sum stays within (128 + 255) * 127 * stride
// <= 2^31 - 1 (and qx . qw within 127 * 127 * stride, the result qx . qw -
// z row_sums within 254 * 127 * stride). 44096 = 689 * 64.
inline constexpr int64_t kInt8A8MaxStride = 44096;

// Quantizes w [rows, cols] (row stride ldw >= cols) per row. A row of zeros
// gets scale 0. InvalidArgument for a negative size or ldw < cols, and for
// a non-finite weight (naming its row and column).
Int8Matrix QuantizeRows(const float* w, int64_t rows, int64_t cols,
                        int64_t ldw);

// The activation range A for rows of `stride` columns (see above).
int32_t Int8ActivationRange(int64_t stride);

// y[r, :] = x[r, :] W^T (+ bias, unless nullptr) for r < m, with x
// [m, w.cols] (row stride ldx >= w.cols) and y [m, w.rows] (row stride
// ldy >= w.rows), quantizing x per row as above (`activations`), 64 rows
// at a time (the quantized copy stays small). Threads (up to num_threads;
// one for small products) take blocks of W's rows. InvalidArgument for
// bad sizes, and for k8 with w.stride above kInt8A8MaxStride.
void Int8Linear(int64_t m, const float* x, int64_t ldx, const Int8Matrix& w,
                const float* bias, float* y, int64_t ldy, int num_threads,
                Int8Activations activations = Int8Activations::k16);

// Highway target Int8Linear dispatches to on this CPU ("AVX3", "AVX2", ...;
// "AVX3+VNNI" where AVX3's CPU has AVX-512 VNNI and its vpdpwssd runs the
// multiply-adds, vpdpbusd for 8-bit activations; "AVX3+AMX" where products
// of 8 or more rows run on AMX's tile unit, fewer on VNNI's kernels).
const char* Int8LinearTargetName();

// Tests and benchmarks: false makes the CPU take Highway's row-major
// kernels (AVX3 without VNNI's kernels, AVX2 without its packed ones) for
// both activation widths, and QuantizeRows keep the row-major layout.
void Int8LinearAllowPackedForTest(bool allow);

// false keeps the products off AMX's tile unit (the VNNI kernels run
// instead, on the same packed weights and with the same results):
// LimitCpuIsa("avx512"), tests and benchmarks. True by default.
void Int8LinearAllowAmx(bool allow);

}  // namespace relpos

#endif  // RELPOS_SRC_OP_KERNELS_INT8_LINEAR_H_
