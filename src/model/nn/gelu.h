// GELU activation, exact form (Hendrycks and Gimpel, 2016), as
// torch.nn.GELU() with approximate='none':
//   gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
// double uses std::erf; float a SIMD erf with |error| <= 1.5e-7 (gelu.cc),
// i.e. within a few float roundings of the exact function.
#ifndef RELPOS_SRC_MODEL_NN_GELU_H_
#define RELPOS_SRC_MODEL_NN_GELU_H_

#include <cstdint>

namespace relpos::nn {

// x [n] -> y [n]. y may alias x.
template <typename T>
void GeluForward(const T* x, T* y, int64_t n);

// Differentiates `y = 0.5 x (1 + erf(x / sqrt(2)))`:
//   dx = dy * (Phi(x) + x phi(x)),  phi the standard normal density.
// x is the forward input; dx may alias dy.
template <typename T>
void GeluBackward(const T* x, const T* dy, T* dx, int64_t n);

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_GELU_H_
