// Non-owning views of contiguous, row-major tensors.
//
// relpos's public functions take and return data through these views so that
// callers keep ownership of their buffers (a PyTorch tensor, a numpy array, a
// std::vector). A view never allocates and never checks more than it must;
// the functions that receive views validate their shapes.
#ifndef RELPOS_TENSOR_VIEW_H_
#define RELPOS_TENSOR_VIEW_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "relpos/error.h"

namespace relpos {

template <typename T>
class TensorView {
 public:
  static constexpr int kMaxRank = 4;

  // An empty view: data() == nullptr, rank 0. Used for optional arguments.
  TensorView() = default;

  // `shape` lists the extents, outermost first; every extent must be >= 0.
  TensorView(T* data, std::initializer_list<int64_t> shape) : data_(data) {
    if (shape.size() > kMaxRank) {
      throw InvalidArgument("relpos: TensorView rank must be <= 4 (got " +
                            std::to_string(shape.size()) + ")");
    }
    for (int64_t extent : shape) {
      if (extent < 0) {
        throw InvalidArgument("relpos: TensorView extents must be >= 0 (got " +
                              std::to_string(extent) + ")");
      }
      shape_[rank_++] = extent;
    }
  }

  // A mutable view converts implicitly to a const one.
  template <typename U,
            typename = std::enable_if_t<std::is_same_v<const U, T> &&
                                        !std::is_same_v<U, T>>>
  TensorView(const TensorView<U>& other)  // NOLINT(runtime/explicit)
      : data_(other.data()), rank_(other.rank()) {
    for (int i = 0; i < rank_; ++i) shape_[i] = other.dim(i);
  }

  T* data() const { return data_; }
  int rank() const { return rank_; }
  int64_t dim(int i) const { return shape_[i]; }
  bool empty() const { return data_ == nullptr; }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= shape_[i];
    return n;
  }

  // "[2, 8, 128, 64]"; "(empty)" for an empty view.
  std::string ShapeString() const {
    if (empty()) return "(empty)";
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) {
      if (i) s += ", ";
      s += std::to_string(shape_[i]);
    }
    return s + "]";
  }

 private:
  T* data_ = nullptr;
  int rank_ = 0;
  std::array<int64_t, kMaxRank> shape_{};
};

template <typename T>
using ConstView = TensorView<const T>;

}  // namespace relpos

#endif  // RELPOS_TENSOR_VIEW_H_
