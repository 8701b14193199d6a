// The extension's array types and a relpos::TensorView over them, shared by
// its source files (relpos_ext.cc, position_schemes_ext.cc).
#ifndef RELPOS_PYTHON_SRC_ARRAY_VIEW_H_
#define RELPOS_PYTHON_SRC_ARRAY_VIEW_H_

#include <cstdint>
#include <string>

#include <nanobind/ndarray.h>

#include "relpos/error.h"
#include "relpos/tensor_view.h"

namespace relpos {

// Read-only input and writable output arrays: C-contiguous, on the CPU.
template <typename T>
using InArray =
    nanobind::ndarray<const T, nanobind::c_contig, nanobind::device::cpu>;
template <typename T>
using OutArray = nanobind::ndarray<T, nanobind::c_contig, nanobind::device::cpu>;

// TensorView only has an initializer-list constructor (its rank is fixed at
// the call site in C++), so spell out the ranks relpos uses: 1 to 4. T is
// const for inputs; `name` is the argument named in the error.
template <typename T, typename Array>
TensorView<T> ToView(const Array& a, const char* name) {
  T* data = const_cast<T*>(a.data());
  int64_t s[4] = {0, 0, 0, 0};
  const size_t rank = a.ndim();
  for (size_t i = 0; i < rank && i < 4; ++i) s[i] = int64_t(a.shape(i));
  switch (rank) {
    case 1: return TensorView<T>(data, {s[0]});
    case 2: return TensorView<T>(data, {s[0], s[1]});
    case 3: return TensorView<T>(data, {s[0], s[1], s[2]});
    case 4: return TensorView<T>(data, {s[0], s[1], s[2], s[3]});
    default:
      throw InvalidArgument(std::string("relpos: ") + name +
                            " must have rank 1 to 4 (got rank " +
                            std::to_string(rank) + ")");
  }
}

}  // namespace relpos

#endif  // RELPOS_PYTHON_SRC_ARRAY_VIEW_H_
