// Public RoPE entry points (include/relpos/rope.h): validate once, then run
// exactly one implementation. This file is the single place where the path
// is chosen.
#include "relpos/rope.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <type_traits>

#include "base/check.h"
#include "kernels/rope.h"
#include "reference/rope_reference.h"

namespace relpos {
namespace {

constexpr int64_t kMaxPosition = int64_t{1} << 40;

// Checks `in` / `out` (named for the messages) and the options, and returns
// the flattened problem.
template <typename T>
RopeProblem MakeRopeProblem(const char* in_name, ConstView<T> in,
                            const char* out_name, TensorView<T> out,
                            const RopeOptions& o) {
  RELPOS_CHECK_ARG(in.rank() >= 1 && in.rank() <= 4,
                   in_name << " must have rank 1 to 4 ([d], [N, d], [H, N, d] "
                              "or [B, H, N, d]; got "
                           << in.ShapeString() << ")");
  RELPOS_CHECK_ARG(out.rank() == in.rank(),
                   out_name << " must have the shape of " << in_name << " "
                            << in.ShapeString() << " (got " << out.ShapeString()
                            << ")");
  for (int i = 0; i < in.rank(); ++i)
    RELPOS_CHECK_ARG(out.dim(i) == in.dim(i),
                     out_name << " must have the shape of " << in_name << " "
                              << in.ShapeString() << " (got "
                              << out.ShapeString() << ")");
  RopeProblem p;
  p.d = in.dim(in.rank() - 1);
  RELPOS_CHECK_ARG(p.d >= 2 && p.d % 2 == 0,
                   "d (the last extent of "
                       << in_name << ") must be even and >= 2 (got " << p.d
                       << ")");
  p.n = in.rank() >= 2 ? in.dim(in.rank() - 2) : 1;
  p.outer = 1;
  for (int i = 0; i + 2 < in.rank(); ++i) p.outer *= in.dim(i);
  RELPOS_CHECK_ARG(std::isfinite(o.base) && o.base > 0,
                   "base must be finite and > 0 (got " << o.base << ")");
  RELPOS_CHECK_ARG(
      o.position_offset >= -kMaxPosition && o.position_offset <= kMaxPosition,
      "position_offset must be in [-2^40, 2^40] (got " << o.position_offset
                                                       << ")");
  RELPOS_CHECK_ARG(
      p.n == 0 || p.n - 1 <= kMaxPosition - o.position_offset,
      "the last position position_offset + N - 1 must be <= 2^40 (got "
          << o.position_offset << " + " << p.n - 1 << ")");
  if (!o.position_offsets.empty()) {
    RELPOS_CHECK_ARG(in.rank() == 4,
                     "position_offsets (one per batch item) needs "
                         << in_name << " of rank 4 [B, H, N, d] (got "
                         << in.ShapeString() << ")");
    RELPOS_CHECK_ARG(static_cast<int64_t>(o.position_offsets.size()) ==
                         in.dim(0),
                     "position_offsets must have one entry per batch item ("
                         << in.dim(0) << ", got "
                         << o.position_offsets.size() << ")");
    RELPOS_CHECK_ARG(o.position_offset == 0,
                     "position_offset and position_offsets are exclusive "
                     "(got position_offset "
                         << o.position_offset << " with position_offsets)");
    for (size_t b = 0; b < o.position_offsets.size(); ++b) {
      const int64_t off = o.position_offsets[b];
      RELPOS_CHECK_ARG(
          off >= -kMaxPosition && off <= kMaxPosition &&
              (p.n == 0 || p.n - 1 <= kMaxPosition - off),
          "position_offsets[" << b << "] + N - 1 must lie in [-2^40, 2^40] "
                                     "(got "
                              << off << " + " << p.n - 1 << ")");
    }
  }
  RELPOS_CHECK_ARG(o.layout == RopeLayout::kSplitHalves ||
                       o.layout == RopeLayout::kInterleaved,
                   "layout must be kSplitHalves or kInterleaved (got "
                       << static_cast<int>(o.layout) << ")");
  RELPOS_CHECK_ARG(o.path == RopePath::kAuto || o.path == RopePath::kFast ||
                       o.path == RopePath::kReference,
                   "path must be kAuto, kFast or kReference (got "
                       << static_cast<int>(o.path) << ")");
  RELPOS_CHECK_ARG(o.num_threads >= 0,
                   "num_threads must be >= 0 (got " << o.num_threads << ")");
  const int64_t numel = in.numel();
  if (numel > 0) {
    RELPOS_CHECK_ARG(in.data() != nullptr && out.data() != nullptr,
                     in_name << " and " << out_name
                             << " must not be null for shape "
                             << in.ShapeString());
    // Exactly the same buffer (in place) or disjoint buffers: a partial
    // overlap would read rows already rotated.
    const std::less<const T*> before;
    const T* a = in.data();
    const T* b = out.data();
    RELPOS_CHECK_ARG(
        a == b || !before(b, a + numel) || !before(a, b + numel),
        out_name << " overlaps " << in_name << " without being the same array");
  }
  p.first_position = o.position_offset;
  p.base = o.base;
  p.layout = o.layout;
  return p;
}

template <typename T>
void Rope(const char* in_name, ConstView<T> in, const char* out_name,
          TensorView<T> out, const RopeOptions& o, int sign) {
  const RopeProblem p = MakeRopeProblem<T>(in_name, in, out_name, out, o);
  if constexpr (!std::is_same_v<T, float>) {
    RELPOS_CHECK_ARG(o.path != RopePath::kFast,
                     "path: the fast RoPE supports float only (use kAuto or "
                     "kReference for double)");
  }
  const auto run = [&](const RopeProblem& part, const T* x, T* y) {
    if constexpr (std::is_same_v<T, float>) {
      if (o.path != RopePath::kReference) {
        RopeFast(part, x, y, sign, o.num_threads);
        return;
      }
    }
    if (part.outer * part.n > 0) RopeReference<T>(part, x, y, sign);
  };
  if (o.position_offsets.empty()) {
    run(p, in.data(), out.data());
    return;
  }
  // Per-row positions: batch item b is the [H, N, d] problem starting at
  // position_offsets[b].
  const int64_t batch = in.dim(0);
  RopeProblem part = p;
  part.outer = p.outer / batch;
  const int64_t stride = part.outer * p.n * p.d;
  for (int64_t b = 0; b < batch; ++b) {
    part.first_position = o.position_offsets[b];
    run(part, in.data() + b * stride, out.data() + b * stride);
  }
}

}  // namespace

template <typename T>
void RopeForward(ConstView<T> x, TensorView<T> y, const RopeOptions& options) {
  Rope<T>("x", x, "y", y, options, +1);
}

template <typename T>
void RopeBackward(ConstView<T> dy, TensorView<T> dx,
                  const RopeOptions& options) {
  // Forward: y = R(p theta) x, R orthogonal -> dx = R(p theta)^T dy
  // = R(-p theta) dy.
  Rope<T>("dy", dy, "dx", dx, options, -1);
}

template void RopeForward<float>(ConstView<float>, TensorView<float>,
                                 const RopeOptions&);
template void RopeForward<double>(ConstView<double>, TensorView<double>,
                                  const RopeOptions&);
template void RopeBackward<float>(ConstView<float>, TensorView<float>,
                                  const RopeOptions&);
template void RopeBackward<double>(ConstView<double>, TensorView<double>,
                                   const RopeOptions&);

}  // namespace relpos
