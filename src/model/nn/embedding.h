// Token embedding lookup: out[r] = table[tokens[r]].
#ifndef RELPOS_SRC_MODEL_NN_EMBEDDING_H_
#define RELPOS_SRC_MODEL_NN_EMBEDDING_H_

#include <cstdint>

namespace relpos::nn {

struct EmbeddingShape {
  int64_t rows = 0;   // looked-up tokens
  int64_t vocab = 0;  // table rows
  int64_t dim = 0;
};

// tokens [rows] in [0, vocab) or -1 (a padding slot: its row is zero),
// table [vocab, dim] -> out [rows, dim]. The caller validates the ids.
template <typename T>
void EmbeddingForward(const int32_t* tokens, const T* table, T* out,
                      const EmbeddingShape& shape);

struct EmbeddingBackwardOptions {
  // true: dtable += the gradient (a table read at several places, such as
  // a tied embedding); false: dtable = the gradient.
  bool accumulate = false;
};

// Differentiates `out[r] = table[tokens[r]]`:
//   dtable[v] = sum over rows r with tokens[r] == v of dout[r]
// dtable [vocab, dim] is overwritten (or added to). Rows are added in order
// (each thread owns a block of columns), so the result is independent of
// thread count.
template <typename T>
void EmbeddingBackward(const int32_t* tokens, const T* dout, T* dtable,
                       const EmbeddingShape& shape,
                       const EmbeddingBackwardOptions& options = {});

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_EMBEDDING_H_
