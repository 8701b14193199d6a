// Bindings of relpos::Model and relpos::Training (include/relpos/lab/model.h,
// training.h) into relpos._relpos_ext, for relpos.ctranslate2 (export) and
// its tests: load or build a model, read its parameters by name, run the
// inference forward for hidden states and logits, train a few steps. Only
// the thin layer: python/relpos/ctranslate2.py validates and converts.
#include "model_ext.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "array_view.h"
#include "relpos/lab/config.h"
#include "relpos/error.h"
#include "relpos/lab/model.h"
#include "relpos/lab/training.h"

namespace nb = nanobind;

namespace relpos {
namespace {

// (section, key, value) triples, applied in order with ExperimentConfig::Set.
using Settings = std::vector<std::tuple<std::string, std::string, std::string>>;

ExperimentConfig ConfigOf(const Settings& settings) {
  ExperimentConfig c;
  for (const auto& [section, key, value] : settings) c.Set(section, key, value);
  return c;
}

// A numpy float32 array that owns a copy of `values` with `shape`.
nb::ndarray<nb::numpy, float> ToNumpy(std::vector<float> values,
                                      const std::vector<size_t>& shape) {
  auto* owned = new std::vector<float>(std::move(values));
  nb::capsule free(owned, [](void* p) noexcept {
    delete static_cast<std::vector<float>*>(p);
  });
  return nb::ndarray<nb::numpy, float>(owned->data(), shape.size(),
                                       shape.data(), free);
}

nb::ndarray<nb::numpy, float> ParameterArray(const Model& m,
                                             const std::string& name) {
  const ConstView<float> v = m.Parameter(name);
  std::vector<size_t> shape;
  for (int64_t i = 0; i < v.rank(); ++i) {
    shape.push_back(static_cast<size_t>(v.dim(i)));
  }
  return ToNumpy(std::vector<float>(v.data(), v.data() + v.numel()), shape);
}

// tokens int32 [B, N], lengths int64 [B] -> (hidden [B, N, d_model],
// logits [B, N, vocab]), zeros at padding.
std::pair<nb::ndarray<nb::numpy, float>, nb::ndarray<nb::numpy, float>>
Outputs(Model& m, const InArray<int32_t>& tokens,
        const InArray<int64_t>& lengths) {
  if (tokens.ndim() != 2) {
    throw InvalidArgument("relpos: tokens must be [batch, length] (got rank " +
                          std::to_string(tokens.ndim()) + ")");
  }
  TokenBatch b;
  b.batch = static_cast<int64_t>(tokens.shape(0));
  b.length = static_cast<int64_t>(tokens.shape(1));
  b.tokens.assign(tokens.data(), tokens.data() + tokens.size());
  b.lengths.assign(lengths.data(), lengths.data() + lengths.size());
  ModelOutputs o;
  {
    nb::gil_scoped_release release;
    o = m.Outputs(b);
  }
  const auto B = static_cast<size_t>(o.batch);
  const auto N = static_cast<size_t>(o.length);
  return {ToNumpy(std::move(o.hidden), {B, N, static_cast<size_t>(o.d_model)}),
          ToNumpy(std::move(o.logits),
                  {B, N, static_cast<size_t>(o.vocab_size)})};
}

// Trains a fresh run of `settings` to its configured steps, writes the
// checkpoint folder and returns the final loss.
double Train(const Settings& settings, const std::string& checkpoint_dir) {
  nb::gil_scoped_release release;
  Training run(ConfigOf(settings));
  TrainOptions options;
  options.checkpoint_dir = checkpoint_dir;
  options.progress.out = nullptr;  // no progress display
  const TrainSummary s = run.Run(options);
  run.Save(checkpoint_dir);
  return s.final_loss;
}

}  // namespace

void BindModel(nb::module_& m) {
  nb::class_<Model>(m, "Model",
                    "Internal: relpos::Model. Use relpos.ctranslate2.")
      .def_static("load", &Model::Load, nb::arg("checkpoint_dir"))
      .def_static(
          "create",
          [](const Settings& settings) {
            return new Model(ConfigOf(settings));
          },
          nb::arg("settings"), nb::rv_policy::take_ownership)
      .def("save", &Model::Save, nb::arg("dir"))
      .def("config_json",
           [](const Model& self) { return self.config().ToJson(); })
      .def("parameter_names", &Model::ParameterNames)
      .def("parameter", &ParameterArray, nb::arg("name"))
      .def("outputs", &Outputs, nb::arg("tokens"), nb::arg("lengths"));
  m.def("train", &Train, nb::arg("settings"), nb::arg("checkpoint_dir"),
        "Internal: trains a fresh relpos run and saves its checkpoint.");
}

}  // namespace relpos
