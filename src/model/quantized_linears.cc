#include "model/quantized_linears.h"

#include <omp.h>

#include <algorithm>
#include <iterator>

#include "base/check.h"
#include "model/arch.h"
#include "model/transformer_block.h"
#include "model/nn/embedding.h"
#include "model/nn/linear.h"
#include "model/nn/multi_head_attention.h"

namespace relpos::model {

ComputeType ParseComputeType(const std::string& value, const char* option) {
  constexpr int kCount = static_cast<int>(std::size(kComputeTypeNames));
  static_assert(kCount == static_cast<int>(ComputeType::kInt8A8) + 1);
  for (int i = 0; i < kCount; ++i) {
    if (value == kComputeTypeNames[i]) return static_cast<ComputeType>(i);
  }
  RELPOS_THROW(InvalidArgument, option << " must be " << ComputeTypeList()
                                       << " (got \"" << value << "\")");
}

std::string ComputeTypeList() {
  std::string out;
  const size_t count = std::size(kComputeTypeNames);
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out += i + 1 == count ? " or " : ", ";
    out += kComputeTypeNames[i];
  }
  return out;
}

namespace {

// The parameter whose values `weight` points at.
int64_t ParameterOf(const BasicTransformer<float>& model, const float* weight) {
  const auto& params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].value.data() == weight) return static_cast<int64_t>(i);
  }
  RELPOS_THROW(Error, "int8: a weight that is no parameter's");
}

}  // namespace

std::vector<QuantizedLinears::Matrix> QuantizedLinears::Selected(
    const BasicTransformer<float>& model, ComputeType type) {
  RELPOS_CHECK_ARG(type != ComputeType::kFloat32,
                   "QuantizedLinears: compute type float32 has no int8 "
                   "layers");
  const ModelConfig& c = model.config();
  RELPOS_CHECK_ARG(Describe(c.arch).causal,
                   "int8 inference needs a decoder or seq2seq model; this "
                   "model's arch is "
                       << ToString(c.arch));
  const ModelConfig side = DecoderSide(c);
  const int64_t d = side.d_model, dff = side.d_ff;
  const DecoderWeights<float> dw = model.decoder_weights();
  std::vector<Matrix> out;
  for (const BlockWeights<float>& w : dw.blocks) {
    for (const nn::MhaWeights<float>* a : {&w.attn, &w.cross}) {
      if (a->wq == nullptr) continue;  // no cross-attention
      for (const float* m : {a->wq, a->wk, a->wv, a->wo}) out.push_back({m, d, d});
    }
    out.push_back({w.ff_in_w, dff, d});
    out.push_back({w.ff_out_w, d, dff});
  }
  // The output head writes the logits themselves: in int8 it cost more
  // greedy agreement with the float model than all the blocks together (a
  // d_model 256 x 4 byte LM, 200 prompts x 64 bytes: 70% identical with an
  // int8 head, 87% with a float one; docs/benchmarks.md, "Quantized
  // inference"). It stays float32 where that is cheap, when its float32
  // bytes are at most kFloatHeadShare of the blocks' int8 bytes (a byte
  // LM: 8% at d_model 256 x 4, 3% at 512 x 6), and is quantized where it
  // would dominate a step (a translation model's 8000-piece head is 2.6x
  // its decoder blocks' int8 bytes; BLEU moved by 0.09 with it in int8).
  const int64_t head_bytes =
      side.vocab_size * d * static_cast<int64_t>(sizeof(float));
  // The blocks' int8 bytes in row-major form (Int8Matrix::row_major_bytes
  // plus a scale and a row sum per row), whichever layout will hold them
  // (Int8Matrix::packed has rows rounded up to 16, and only some CPUs hold
  // it): the same choice on every CPU, and the one made before that
  // layout existed.
  int64_t block_bytes = 0;
  for (const Matrix& m : out) {
    const int64_t stride =
        (m.in + kInt8RowAlign - 1) / kInt8RowAlign * kInt8RowAlign;
    block_bytes += m.out * stride + m.out * 8;
  }
  if (head_bytes > block_bytes / kFloatHeadShare) {
    out.push_back({dw.head_w, side.vocab_size, d});
  }
  // A seq2seq model's encoder blocks (its self-attention and feed-forward).
  const ModelConfig enc = EncoderSide(c);
  for (const BlockWeights<float>& w : model.encoder_blocks()) {
    for (const float* m : {w.attn.wq, w.attn.wk, w.attn.wv, w.attn.wo}) {
      out.push_back({m, enc.d_model, enc.d_model});
    }
    out.push_back({w.ff_in_w, enc.d_ff, enc.d_model});
    out.push_back({w.ff_out_w, enc.d_model, enc.d_ff});
  }
  return out;
}

QuantizedLinears::QuantizedLinears(const BasicTransformer<float>& model,
                                   ComputeType type) {
  const std::vector<Matrix> selected = Selected(model, type);
  RELPOS_CHECK_ARG(!model.values_dropped(),
                   "QuantizedLinears: this model's float32 linear weights "
                   "were dropped; decode with the int8 copies that dropped "
                   "them");
  built_from_ = &model;
  activations_ = type == ComputeType::kInt8A8 ? Int8Activations::k8
                                              : Int8Activations::k16;
  for (const Matrix& m : selected) Add(m.weight, m.out, m.in);
}

std::vector<int64_t> QuantizedLinears::DroppedParameters(
    const BasicTransformer<float>& model, ComputeType type) {
  std::vector<int64_t> out;
  for (const Matrix& m : Selected(model, type)) {
    out.push_back(ParameterOf(model, m.weight));
  }
  return out;
}

QuantizedLinears::QuantizedLinears(
    const BasicTransformer<float>& model, ComputeType type,
    const std::function<void(int64_t, std::vector<float>*)>& read) {
  const std::vector<Matrix> selected = Selected(model, type);
  built_from_ = dropped_from_ = &model;
  activations_ = type == ComputeType::kInt8A8 ? Int8Activations::k8
                                              : Int8Activations::k16;
  const auto& params = model.parameters();
  std::vector<float> values;  // one matrix at a time
  for (const Matrix& m : selected) {
    if (Find(m.weight) != nullptr) continue;  // a shared (tied) matrix
    const int64_t i = ParameterOf(model, m.weight);
    RELPOS_CHECK_ARG(params[static_cast<size_t>(i)].value.size() == 1,
                     "QuantizedLinears: parameter "
                         << params[static_cast<size_t>(i)].name
                         << " holds its float32 values; quantize that model "
                            "with the other constructor");
    values.assign(static_cast<size_t>(m.out * m.in), 0.0f);
    read(i, &values);
    RELPOS_CHECK_ARG(values.size() == static_cast<size_t>(m.out * m.in),
                     "QuantizedLinears: the values read for "
                         << params[static_cast<size_t>(i)].name
                         << " have the wrong size");
    matrices_.emplace_back(m.weight,
                           QuantizeRows(values.data(), m.out, m.in, m.in));
  }
  RELPOS_CHECK_ARG(model.values_dropped(),
                   "QuantizedLinears: the model holds every float32 value; "
                   "quantize it with the other constructor");
}

void QuantizedLinears::Add(const float* weight, int64_t out, int64_t in) {
  if (Find(weight) != nullptr) return;  // a shared (tied) matrix
  matrices_.emplace_back(weight, QuantizeRows(weight, out, in, in));
}

int64_t QuantizedLinears::DropFloatWeights(BasicTransformer<float>* model) {
  RELPOS_CHECK_ARG(model != nullptr && model == built_from_,
                   "DropFloatWeights: not the model these int8 copies were "
                   "made from");
  std::vector<const float*> values;
  std::vector<size_t> entries;
  int64_t bytes = 0;
  for (size_t i = 0; i < matrices_.size(); ++i) {
    const auto& [w, q] = matrices_[i];
    values.push_back(w);
    entries.push_back(i);
    bytes += q.rows * q.cols * static_cast<int64_t>(sizeof(float));
  }
  const std::vector<const float*> kept = model->DropValues(values);
  for (size_t e = 0; e < entries.size(); ++e) {
    matrices_[entries[e]].first = kept[e];
  }
  dropped_from_ = model;
  return bytes;
}

const Int8Matrix* QuantizedLinears::Find(const float* weight) const {
  for (const auto& [w, q] : matrices_) {
    if (w == weight) return &q;
  }
  return nullptr;
}

int64_t QuantizedLinears::bytes() const {
  int64_t total = 0;
  for (const auto& entry : matrices_) total += entry.second.bytes();
  return total;
}

void LinearMaybeInt8(const QuantizedLinears* quantized, const float* x,
                     const float* w, const float* b, float* y, int64_t rows,
                     int64_t in, int64_t out) {
  const Int8Matrix* q = quantized == nullptr ? nullptr : quantized->Find(w);
  if (q == nullptr) {
    nn::LinearForward<float>(x, w, b, y, {rows, in, out});
    return;
  }
  if (q->rows != out || q->cols != in) {
    RELPOS_THROW(Error, "int8 weight " << q->rows << " x " << q->cols
                                       << " used as " << out << " x " << in);
  }
  Int8Linear(rows, x, in, *q, b, y, out, omp_get_max_threads(),
             quantized->activations());
}

void QuantizedLinears::Linear(const float* x, const float* weight,
                              const float* bias, float* y,
                              const nn::LinearShape& shape) const {
  LinearMaybeInt8(this, x, weight, bias, y, shape.rows, shape.in, shape.out);
}

void QuantizedLinears::Embedding(const int32_t* tokens, const float* table,
                                 float* out,
                                 const nn::EmbeddingShape& shape) const {
  const Int8Matrix* q = Find(table);
  if (q == nullptr) {
    nn::EmbeddingForward<float>(tokens, table, out, shape);
    return;
  }
  if (q->rows != shape.vocab || q->cols != shape.dim) {
    RELPOS_THROW(Error, "int8 embedding " << q->rows << " x " << q->cols
                                          << " used as " << shape.vocab
                                          << " x " << shape.dim);
  }
  for (int64_t r = 0; r < shape.rows; ++r) {
    const int32_t t = tokens[r];
    float* row = out + r * shape.dim;
    RELPOS_CHECK_ARG(t >= -1 && t < shape.vocab,
                     "int8 embedding: token " << t << " out of range");
    if (t < 0) {  // a padding slot, as EmbeddingForward writes it
      std::fill(row, row + shape.dim, 0.0f);
      continue;
    }
    const float scale = q->scales[static_cast<size_t>(t)];
    for (int64_t c = 0; c < shape.dim; ++c) {
      row[c] = scale * static_cast<float>(q->Value(t, c));
    }
  }
}

void LinearMaybeInt8(const QuantizedLinears* /*quantized*/, const double* x,
                     const double* w, const double* b, double* y, int64_t rows,
                     int64_t in, int64_t out) {
  nn::LinearForward<double>(x, w, b, y, {rows, in, out});
}

}  // namespace relpos::model
