// Int8 copies of the linear layers inference runs, for quantized inference
// (`--compute-type int8` or `int8_a8`; docs/generate.md, "Quantized
// inference"): every decoder block's attention projections (and, for
// seq2seq, the cross-attention's) and its feed-forward layers, a seq2seq
// model's encoder blocks alike, each quantized per output channel
// (kernels/int8_linear.h), and the output head when it is large (its
// float32 bytes above 1/kFloatHeadShare of the decoder blocks' int8 bytes:
// a translation model's vocabulary, not a byte LM's). A head tied to the
// token embedding (seq2seq) is one int8 matrix for both: the input lookups
// read its rows as scale x int8 values. The LayerNorms, the biases, the
// position tables, attention itself and an untied token embedding stay
// float32.
//
// A decoder session given one (DecoderSession's `quantized` argument), and
// the encoder through it (BasicTransformer::Encode's nn::WeightReader),
// look each layer's weight up here and run Int8Linear instead of the float
// product, with the activations quantized as its compute type says (int8:
// int16, int8_a8: 8 bits; Int8Activations).
// The copies are made from the model's weights when this object is built:
// it must be rebuilt after they change. For deployment, DropFloatWeights
// then frees the float32 weights they replace (an int8-only model), or the
// model is loaded without them (train::LoadModelFor).
#ifndef RELPOS_SRC_MODEL_QUANTIZED_LINEARS_H_
#define RELPOS_SRC_MODEL_QUANTIZED_LINEARS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/int8_linear.h"
#include "model/nn/weight_reader.h"
#include "model/transformer.h"

namespace relpos::model {

// float32; int8: int8 weights x int16 activations (W8A16); int8_a8: int8
// weights x 8-bit activations (W8A8).
enum class ComputeType { kFloat32, kInt8, kInt8A8 };

// Their names, in ComputeType's order: the one list every option that
// takes a compute type accepts (relpos::ComputeTypeNames(),
// relpos/lab/model.h, gives it to the command line and Python).
inline constexpr const char* kComputeTypeNames[] = {"float32", "int8",
                                                    "int8_a8"};

// The output head stays float32 when its float32 bytes are at most
// 1/kFloatHeadShare of the decoder blocks' int8 bytes.
inline constexpr int64_t kFloatHeadShare = 8;

// A name of kComputeTypeNames; InvalidArgument naming `option` and the
// names otherwise.
ComputeType ParseComputeType(const std::string& value, const char* option);
// kComputeTypeNames joined: "float32, int8 or int8_a8".
std::string ComputeTypeList();

class QuantizedLinears : public nn::WeightReader<float> {
 public:
  // Quantizes the decoder side of `model` (a decoder or seq2seq model),
  // for `type` (kInt8 or kInt8A8; InvalidArgument for kFloat32).
  explicit QuantizedLinears(const BasicTransformer<float>& model,
                            ComputeType type = ComputeType::kInt8);

  // The same copies for a model loaded without the float32 values of the
  // matrices they replace (an int8-only model straight from a checkpoint,
  // train::LoadModelFor): `model` was built with Fill::kNone and every
  // parameter but DroppedParameters(model, type) allocated and filled;
  // `read(index, values)` then fills `values` (sized to the parameter)
  // with parameter `index`'s float32 values, one matrix at a time, each
  // quantized before the next is read. dropped_from() is `model`.
  QuantizedLinears(
      const BasicTransformer<float>& model, ComputeType type,
      const std::function<void(int64_t, std::vector<float>*)>& read);
  // The parameters (indices) whose float32 values an int8-only model of
  // `type` does not hold: the matrices quantized.
  static std::vector<int64_t> DroppedParameters(
      const BasicTransformer<float>& model, ComputeType type);

  // The int8 copy of the [out, in] weight `weight` points at, or nullptr
  // for a weight that was not quantized.
  const Int8Matrix* Find(const float* weight) const;
  // Frees `model`'s float32 values of the matrices held here (all of them
  // are read through the int8 copies only). `model` must be the one this
  // was built from (InvalidArgument otherwise); it is int8-only afterwards
  // (BasicTransformer::DropValues) and its sessions need this object.
  // Returns the float32 bytes freed.
  int64_t DropFloatWeights(BasicTransformer<float>* model);
  // The model whose float weights DropFloatWeights freed, or nullptr.
  const BasicTransformer<float>* dropped_from() const { return dropped_from_; }
  // Matrices held and their bytes.
  int64_t size() const { return static_cast<int64_t>(matrices_.size()); }
  int64_t bytes() const;
  // How Int8Linear quantizes the activations for this compute type.
  Int8Activations activations() const { return activations_; }

  // nn::WeightReader: LinearMaybeInt8 through these copies; the rows of a
  // token embedding held here as scale x int8 values (every other table
  // from its float values). InvalidArgument for a token out of range.
  void Linear(const float* x, const float* weight, const float* bias,
              float* y, const nn::LinearShape& shape) const override;
  void Embedding(const int32_t* tokens, const float* table, float* out,
                 const nn::EmbeddingShape& shape) const override;
  const void* holds_values_of() const override { return dropped_from_; }

 private:
  struct Matrix {
    const float* weight;
    int64_t out, in;
  };
  // The matrices quantized for `type` (InvalidArgument for float32 and
  // for a model without a decoder), from the model's shapes alone.
  static std::vector<Matrix> Selected(const BasicTransformer<float>& model,
                                      ComputeType type);
  void Add(const float* weight, int64_t out, int64_t in);
  std::vector<std::pair<const float*, Int8Matrix>> matrices_;
  Int8Activations activations_ = Int8Activations::k16;
  const BasicTransformer<float>* built_from_ = nullptr;
  const BasicTransformer<float>* dropped_from_ = nullptr;
};

// y [rows, out] = x W^T + b through `quantized`'s copy of w when it has
// one (with its activations()), through the float product otherwise
// (quantized may be nullptr).
void LinearMaybeInt8(const QuantizedLinears* quantized, const float* x,
                     const float* w, const float* b, float* y, int64_t rows,
                     int64_t in, int64_t out);
// Doubles have no int8 path (the reference of the tests).
void LinearMaybeInt8(const QuantizedLinears* quantized, const double* x,
                     const double* w, const double* b, double* y, int64_t rows,
                     int64_t in, int64_t out);

// `quantized` as the reader of a float model's weights; none for doubles.
template <typename T>
const nn::WeightReader<T>* WeightsOf(const QuantizedLinears* quantized);
template <>
inline const nn::WeightReader<float>* WeightsOf<float>(
    const QuantizedLinears* quantized) {
  return quantized;
}
template <>
inline const nn::WeightReader<double>* WeightsOf<double>(
    const QuantizedLinears* /*quantized*/) {
  return nullptr;
}

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_QUANTIZED_LINEARS_H_
