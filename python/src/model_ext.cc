// Bindings of relpos::Model and relpos::Training (include/relpos/lab/model.h,
// training.h) into relpos._relpos_ext, for relpos.ctranslate2 (export) and
// its tests: load or build a model, read its parameters by name, run the
// inference forward for hidden states and logits, train a few steps. Only
// the thin layer: python/relpos/ctranslate2.py validates and converts.
#include "model_ext.h"

#include <algorithm>
#include <cstdint>
#include <span>
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

void SetParameter(Model& m, const std::string& name,
                  const InArray<float>& values) {
  m.SetParameter(name, std::span<const float>(values.data(), values.size()));
}

// sources: lists of token ids -> [(tokens, log_prob, score, ended_by_eos)],
// Model::Translate with the given options (bos / eos -1: the model's own;
// compute_type a name of ComputeTypeNames()).
std::vector<std::tuple<std::vector<int32_t>, double, double, bool>> Translate(
    Model& m, const std::vector<std::vector<int32_t>>& sources,
    int64_t beam_size, const std::string& length_penalty, double alpha,
    double max_length_ratio, int64_t max_length, int32_t bos, int32_t eos,
    const std::string& compute_type) {
  const DecodeOptions o = MakeDecodeOptions(
      beam_size, length_penalty, alpha, max_length_ratio, max_length, bos, eos,
      /*threads=*/0, compute_type);
  std::vector<Translation> t;
  {
    nb::gil_scoped_release release;
    t = m.Translate(sources, o);
  }
  std::vector<std::tuple<std::vector<int32_t>, double, double, bool>> out;
  for (Translation& x : t) {
    out.emplace_back(std::move(x.tokens), x.log_prob, x.score, x.ended_by_eos);
  }
  return out;
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

DecodeOptions MakeDecodeOptions(int64_t beam_size,
                                const std::string& length_penalty,
                                double alpha, double max_length_ratio,
                                int64_t max_length, int32_t bos, int32_t eos,
                                int threads, const std::string& compute_type) {
  const std::vector<std::string>& names = ComputeTypeNames();
  if (std::find(names.begin(), names.end(), compute_type) == names.end()) {
    std::string list;
    for (const std::string& name : names) {
      list += (list.empty() ? "'" : ", '") + name + "'";
    }
    throw InvalidArgument("relpos: compute_type must be one of " + list +
                          " (got '" + compute_type + "')");
  }
  DecodeOptions o;
  o.beam_size = beam_size;
  o.length_penalty = length_penalty;
  o.alpha = alpha;
  o.max_length_ratio = max_length_ratio;
  o.max_length = max_length;
  o.bos = bos;
  o.eos = eos;
  o.threads = threads;
  o.compute_type = compute_type;
  return o;
}

void BindModel(nb::module_& m) {
  nb::class_<Model>(m, "Model",
                    "Internal: relpos::Model. Use relpos.ctranslate2.")
      .def_static("load", &Model::Load, nb::arg("checkpoint_dir"),
                  nb::arg("compute_type") = "float32")
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
      .def("set_parameter", &SetParameter, nb::arg("name"), nb::arg("values"))
      .def("outputs", &Outputs, nb::arg("tokens"), nb::arg("lengths"))
      .def("bos_eos", &Model::BosEos)
      .def("translate", &Translate, nb::arg("sources"),
           nb::arg("beam_size") = 4, nb::arg("length_penalty") = "wu",
           nb::arg("alpha") = 0.6, nb::arg("max_length_ratio") = 2.0,
           nb::arg("max_length") = 1024, nb::arg("bos") = -1,
           nb::arg("eos") = -1, nb::arg("compute_type") = "float32");
  m.def("compute_type_names", &ComputeTypeNames,
        "The compute types decoding takes: float32, int8, int8_a8.");
  m.def("train", &Train, nb::arg("settings"), nb::arg("checkpoint_dir"),
        "Internal: trains a fresh relpos run and saves its checkpoint.");
}

}  // namespace relpos
