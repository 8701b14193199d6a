// Fully connected layer y = x W^T + b, with W stored [out, in] as in PyTorch
// (so checkpoints read naturally next to torch.nn.Linear weights).
#ifndef RELPOS_SRC_MODEL_NN_LINEAR_H_
#define RELPOS_SRC_MODEL_NN_LINEAR_H_

#include <cstdint>

namespace relpos::nn {

struct LinearShape {
  int64_t rows = 0;  // independent input vectors (batch x positions)
  int64_t in = 0;    // input features
  int64_t out = 0;   // output features
};

// x [rows, in], weight [out, in], bias [out] or nullptr -> y [rows, out]:
//   y = x W^T + b
template <typename T>
void LinearForward(const T* x, const T* weight, const T* bias, T* y,
                   const LinearShape& shape);

struct LinearBackwardOptions {
  // true: dx += dy W (several layers read the same x); false: dx = dy W.
  bool accumulate_dx = false;
};

// Differentiates `y = x W^T + b`:
//   dx [rows, in]  = dy W          (skipped when dx is nullptr)
//   dweight [out, in] = dy^T x     (overwritten)
//   dbias [out]   = sum_rows dy    (overwritten; skipped when nullptr)
template <typename T>
void LinearBackward(const T* x, const T* weight, const T* dy, T* dx, T* dweight,
                    T* dbias, const LinearShape& shape,
                    const LinearBackwardOptions& options = {});

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_LINEAR_H_
