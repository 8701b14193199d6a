// relpos._relpos_ext, inspection: relpos::Inspect of a checkpoint folder as
// a dict of plain values and numpy arrays (python/relpos/_inspect.py
// documents the keys and checks the arguments; docs/inspect.md the
// meaning). The arrays own copies of the data.
#include "inspect_ext.h"

#include <cstdint>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "relpos/lab/config.h"
#include "relpos/lab/inspect.h"

namespace nb = nanobind;

namespace relpos {
namespace {

// A numpy array of `shape` that owns (a move of) `values`.
template <typename T>
nb::object ToNumpy(std::vector<T> values, std::vector<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept {
    delete static_cast<std::vector<T>*>(p);
  });
  return nb::cast(nb::ndarray<nb::numpy, T>(owned->data(), shape.size(),
                                            shape.data(), owner));
}

nb::dict TableDict(const TableInspection& t) {
  const size_t rows = static_cast<size_t>(t.rows);
  nb::dict d;
  d["parameter"] = t.parameter;
  d["layer"] = t.layer;
  d["role"] = t.role;
  d["heads"] = t.heads;
  d["rows"] = t.rows;
  d["width"] = t.width;
  d["bucket_map"] = t.bucket_map;
  d["distance"] = ToNumpy(t.distance, {rows});
  d["distance_min"] = ToNumpy(t.distance_min, {rows});
  d["distance_max"] = ToNumpy(t.distance_max, {rows});
  d["open_below"] = ToNumpy(t.open_below, {rows});  // 0 / 1
  d["open_above"] = ToNumpy(t.open_above, {rows});
  nb::list labels;
  for (int64_t b = 0; b < t.rows; ++b) labels.append(DistanceLabel(t, b));
  d["distance_label"] = labels;
  d["row_norm"] = ToNumpy(t.row_norm, {rows});
  d["movement"] = ToNumpy(t.movement, {rows});
  if (t.signal.empty()) {
    for (const char* key : {"pair_count", "signal", "signal_per_head",
                            "untrained", "untrained_rows", "threshold",
                            "share_k", "verdict"}) {
      d[key] = nb::none();
    }
    return d;
  }
  d["pair_count"] = ToNumpy(t.pair_count, {rows});
  d["signal"] = ToNumpy(t.signal, {rows});
  d["signal_per_head"] =
      t.signal_per_head.empty()
          ? nb::none()
          : ToNumpy(t.signal_per_head, {static_cast<size_t>(t.heads), rows});
  d["untrained"] = ToNumpy(t.untrained, {rows});
  d["untrained_rows"] = t.untrained_rows;
  d["threshold"] = t.threshold;
  d["share_k"] = t.share_k;
  d["verdict"] = Verdict(t);
  return d;
}

nb::dict InspectCheckpoint(const std::string& dir, double untrained_fraction,
                           double share) {
  Inspection in;
  {
    nb::gil_scoped_release release;
    in = Inspect(dir, {.untrained_fraction = untrained_fraction,
                       .share = share});
  }
  nb::dict d;
  d["checkpoint"] = dir;
  d["position"] = in.config.Get("model", "position");
  d["arch"] = in.config.Get("model", "arch");
  d["step"] = in.step;
  d["train_max_tokens"] = in.train_max_tokens;
  d["has_signal"] = in.has_signal;
  d["no_signal"] = in.has_signal ? nb::none() : nb::cast(in.no_signal);
  d["first_step"] = in.first_step;
  d["steps"] = in.steps;
  nb::list tables;
  for (const TableInspection& t : in.tables) tables.append(TableDict(t));
  d["tables"] = tables;
  return d;
}

}  // namespace

void BindInspect(nb::module_& m) {
  m.def("inspect_checkpoint", &InspectCheckpoint, nb::arg("path"),
        nb::arg("untrained_fraction"), nb::arg("share"),
        "Internal: relpos::Inspect of a checkpoint. Use relpos.inspect.");
}

}  // namespace relpos
