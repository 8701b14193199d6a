// relpos._relpos_ext, position schemes: the thin layer between
// python/relpos/position_schemes.py and the public C++ API. As in
// relpos_ext.cc, the Python layer validates types and allocates outputs;
// this file turns C-contiguous CPU arrays into pointers or views, releases
// the GIL while relpos computes, and leaves every value check to the C++
// library (whose InvalidArgument the module maps to ValueError).
#include "position_schemes_ext.h"
#include "array_view.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "relpos/error.h"
#include "relpos/position_schemes.h"
#include "relpos/rope.h"

namespace nb = nanobind;

namespace relpos {
namespace {

void CheckSameSize(size_t in, size_t out, const char* what) {
  if (in != out)
    throw InvalidArgument(std::string("relpos: ") + what +
                          ": out must have as many entries as the input (" +
                          std::to_string(in) + " vs " + std::to_string(out) +
                          ")");
}

// out[i] = T5 bucket of r[i], any shape (flattened).
void T5BucketArray(InArray<int64_t> r, OutArray<int64_t> out,
                   int64_t num_buckets, int64_t max_distance,
                   bool bidirectional) {
  const T5Buckets b{num_buckets, max_distance, bidirectional};
  ValidateT5Buckets(b);
  CheckSameSize(r.size(), out.size(), "t5_bucket");
  const int64_t* rp = r.data();
  int64_t* op = out.data();
  const size_t n = r.size();
  nb::gil_scoped_release release;
  for (size_t i = 0; i < n; ++i) op[i] = T5Bucket(rp[i], b);
}

int64_t T5Reach(int64_t num_buckets, int64_t max_distance,
                bool bidirectional) {
  return T5BucketReach({num_buckets, max_distance, bidirectional});
}

void ClipBucketArray(InArray<int64_t> r, OutArray<int64_t> out, int64_t left,
                     int64_t right) {
  const ClipBuckets b{left, right};
  ValidateClipBuckets(b);
  CheckSameSize(r.size(), out.size(), "clip_bucket");
  const int64_t* rp = r.data();
  int64_t* op = out.data();
  const size_t n = r.size();
  nb::gil_scoped_release release;
  for (size_t i = 0; i < n; ++i) op[i] = ClipBucket(rp[i], b);
}

// backward = false: out = RoPE(x); true: out = RoPE backward of x (= dy).
// float32 takes the fast path, float64 the reference.
template <typename T>
void Rope(InArray<T> x, OutArray<T> out, int64_t position_offset, double base,
          const std::string& layout, bool backward,
          std::vector<int64_t> position_offsets) {
  RopeOptions o;
  o.base = base;
  o.layout = ParseRopeLayout(layout);
  o.position_offset = position_offset;
  o.position_offsets = std::move(position_offsets);
  o.path = std::is_same_v<T, float> ? RopePath::kAuto : RopePath::kReference;
  const char* in_name = backward ? "dy" : "x";
  const char* out_name = backward ? "dx" : "out";
  const ConstView<T> in_view = ToView<const T>(x, in_name);
  const TensorView<T> out_view = ToView<T>(out, out_name);
  nb::gil_scoped_release release;
  if (backward) {
    RopeBackward<T>(in_view, out_view, o);
  } else {
    RopeForward<T>(in_view, out_view, o);
  }
}

// out [rows, dim]: its rows and width, or ValueError naming `what` unless
// it has rank 2.
template <typename T>
std::pair<int64_t, int64_t> TableShape(const OutArray<T>& out,
                                       const char* what) {
  if (out.ndim() != 2) {
    throw InvalidArgument(std::string("relpos: ") + what +
                          ": out must have rank 2 (got rank " +
                          std::to_string(out.ndim()) + ")");
  }
  return {int64_t(out.shape(0)), int64_t(out.shape(1))};
}

// out [length, dim] = the sinusoidal absolute encoding.
template <typename T>
void SinusoidalArray(OutArray<T> out) {
  const auto [length, dim] = TableShape(out, "sinusoidal_table");
  T* data = out.data();
  nb::gil_scoped_release release;
  SinusoidalTable(length, dim, data);
}

// out [2k+1, dim] = Transformer-XL's sinusoids R of the distances -k .. k.
template <typename T>
void XlSinusoidArray(int64_t k, OutArray<T> out) {
  const auto [rows, dim] = TableShape(out, "xl_sinusoid_table");
  if (k < 0 || k > rows || rows != 2 * k + 1) {
    throw InvalidArgument(
        "relpos: xl_sinusoid_table: k must be >= 0 and out must have 2k+1 "
        "rows (got k = " +
        std::to_string(k) + ", " + std::to_string(rows) + " rows)");
  }
  T* data = out.data();
  nb::gil_scoped_release release;
  XlSinusoidTable(k, dim, data);
}

template <typename T>
void BindFixedTables(nb::module_& m, const std::string& suffix) {
  using namespace nb::literals;
  m.def(("sinusoidal_table_" + suffix).c_str(), &SinusoidalArray<T>, "out"_a,
        "Internal: fills out [length, dim] with the sinusoidal absolute "
        "encoding (relpos::SinusoidalTable).");
  m.def(("xl_sinusoid_table_" + suffix).c_str(), &XlSinusoidArray<T>, "k"_a,
        "out"_a,
        "Internal: fills out [2k+1, dim] with Transformer-XL's sinusoids R "
        "of the distances -k .. k (relpos::XlSinusoidTable).");
}

template <typename T>
void BindRope(nb::module_& m, const std::string& suffix) {
  using namespace nb::literals;
  m.def(("rope_" + suffix).c_str(), &Rope<T>, "x"_a, "out"_a,
        "position_offset"_a, "base"_a, "layout"_a, "backward"_a,
        "position_offsets"_a = std::vector<int64_t>(),
        "Internal: fills out. Use relpos.rope / relpos.rope_backward.");
}

}  // namespace

void BindPositionSchemes(nb::module_& m) {
  using namespace nb::literals;
  m.def("t5_bucket", &T5BucketArray, "r"_a, "out"_a, "num_buckets"_a,
        "max_distance"_a, "bidirectional"_a,
        "Internal: fills out. Use relpos.t5_bucket.");
  m.def("t5_bucket_reach", &T5Reach, "num_buckets"_a, "max_distance"_a,
        "bidirectional"_a, "Internal. Use relpos.t5_bucket_reach.");
  m.def("clip_bucket", &ClipBucketArray, "r"_a, "out"_a, "left"_a, "right"_a,
        "Internal: fills out. Use relpos.clip_bucket.");
  m.def("alibi_slopes", &AlibiSlopes, "num_heads"_a,
        "Internal. Use relpos.alibi_slopes.");
  BindRope<float>(m, "f32");
  BindRope<double>(m, "f64");
  BindFixedTables<float>(m, "f32");
  BindFixedTables<double>(m, "f64");
}

}  // namespace relpos
