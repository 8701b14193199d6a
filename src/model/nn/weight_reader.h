// How an inference forward pass reads weights that may be held in another
// form than the float values the layers are given (int8 inference:
// model/quantized_linears.h implements it). The layers call LinearWith /
// EmbeddingWith; a null reader means the float weights themselves
// (LinearForward / EmbeddingForward), which is what training always uses.
#ifndef RELPOS_SRC_MODEL_NN_WEIGHT_READER_H_
#define RELPOS_SRC_MODEL_NN_WEIGHT_READER_H_

#include <cstdint>

#include "model/nn/embedding.h"
#include "model/nn/linear.h"

namespace relpos::nn {

template <typename T>
class WeightReader {
 public:
  virtual ~WeightReader() = default;
  // y = x W^T + b as LinearForward computes it, for the [out, in] weight
  // `weight` points at (possibly a placeholder whose values the reader
  // holds in another form).
  virtual void Linear(const T* x, const T* weight, const T* bias, T* y,
                      const LinearShape& shape) const = 0;
  // out[r] = table[tokens[r]] as EmbeddingForward looks it up.
  virtual void Embedding(const int32_t* tokens, const T* table, T* out,
                         const EmbeddingShape& shape) const = 0;
  // The model whose dropped float values this reader holds in their place,
  // or null: a model with dropped values may be read through that reader
  // only (anything else would read the one-value placeholders).
  virtual const void* holds_values_of() const = 0;
};

template <typename T>
void LinearWith(const WeightReader<T>* reader, const T* x, const T* weight,
                const T* bias, T* y, const LinearShape& shape) {
  if (reader == nullptr) {
    LinearForward<T>(x, weight, bias, y, shape);
  } else {
    reader->Linear(x, weight, bias, y, shape);
  }
}

template <typename T>
void EmbeddingWith(const WeightReader<T>* reader, const int32_t* tokens,
                   const T* table, T* out, const EmbeddingShape& shape) {
  if (reader == nullptr) {
    EmbeddingForward<T>(tokens, table, out, shape);
  } else {
    reader->Embedding(tokens, table, out, shape);
  }
}

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_WEIGHT_READER_H_
