// What the public objects of include/relpos/ hold: the internal configs,
// model and trainer they wrap. Shared by the files of src/lab/api/ only.
#ifndef RELPOS_SRC_LAB_API_INTERNAL_H_
#define RELPOS_SRC_LAB_API_INTERNAL_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/quantized_linears.h"
#include "model/transformer.h"
#include "relpos/lab/config.h"
#include "relpos/lab/model.h"
#include "relpos/tensor_view.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace relpos {

struct ExperimentConfig::Impl {
  model::ModelConfig model;
  train::TrainConfig train;
  std::set<std::string> given;  // "model.d_model", "train.--train-lengths"
};

// A config holding exactly these (every setting counts as given: it comes
// from a checkpoint or a resolved run).
ExperimentConfig MakeConfig(const model::ModelConfig& model,
                            const train::TrainConfig& train);

struct Model::Impl {
  ExperimentConfig config;
  int64_t step = 0;
  // Owned here, or borrowed from a Training (which then outlives its use;
  // `state` is then the training's, so step() follows it).
  std::shared_ptr<model::Transformer> transformer;
  const train::TrainState* state = nullptr;
  // A training's signal statistics (train/signal_stats.h), when borrowed.
  const train::SignalStats* signal = nullptr;
  // After Model::Quantize: the int8 copies every decoding call runs, and
  // their compute type ("float32" before); the transformer's float32
  // weights of those layers are gone.
  std::shared_ptr<const model::QuantizedLinears> quantized;
  std::string compute_type = "float32";
};

// The api files' way into the public objects they implement (a friend of
// ExperimentConfig and Model): Internals(config).model,
// Internals(model).transformer.
struct ApiAccess {
  using ConfigImpl = ExperimentConfig::Impl;
  using ModelImpl = Model::Impl;
  static ExperimentConfig::Impl& Of(ExperimentConfig& c) { return *c.impl_; }
  static const ExperimentConfig::Impl& Of(const ExperimentConfig& c) {
    return *c.impl_;
  }
  static Model::Impl& Of(Model& m) { return *m.impl_; }
  static const Model::Impl& Of(const Model& m) { return *m.impl_; }
  static Model Make(std::unique_ptr<Model::Impl> impl) {
    return Model(std::move(impl));
  }
};
template <typename T>
decltype(auto) Internals(T& object) {
  return ApiAccess::Of(object);
}

// A view of a tensor of rank 1 to 4 held as data + shape (parameters).
template <typename T>
TensorView<T> ViewOf(T* data, const std::vector<int64_t>& shape) {
  switch (shape.size()) {
    case 1:
      return {data, {shape[0]}};
    case 2:
      return {data, {shape[0], shape[1]}};
    case 3:
      return {data, {shape[0], shape[1], shape[2]}};
    default:
      return {data, {shape.at(0), shape.at(1), shape.at(2), shape.at(3)}};
  }
}

// The transformer of `model` for `what`, an entry point that reads its
// float32 weights: InvalidArgument naming `what` after Model::Quantize.
model::Transformer& FloatTransformer(const Model& model, const char* what);

// The int8 copies a decoding call with `compute_type` runs: the model's own
// after Model::Quantize (InvalidArgument unless compute_type is the one it
// kept), else new ones made in *made (nullptr for float32).
const model::QuantizedLinears* QuantizedFor(
    const Model& model, const std::string& compute_type,
    std::optional<model::QuantizedLinears>* made);

// A non-owning Model of a trainer's transformer.
Model BorrowModel(train::Trainer& trainer);

// ProgressOptions::mode as the trainer's mode (InvalidArgument for another
// word).
train::ProgressMode ProgressModeOf(const std::string& mode);

}  // namespace relpos

#endif  // RELPOS_SRC_LAB_API_INTERNAL_H_
