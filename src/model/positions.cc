// The position schemes of model/positions.h: the registry's entries
// (src/op/schemes/registry.cc) applied to this model's config.
#include "model/positions.h"

#include "model/nn/position_encoding.h"
#include "relpos/position_schemes.h"

namespace relpos::model {

SchemeLayer SchemeLayerOf(const ModelConfig& c) {
  SchemeLayer l;
  l.heads = c.heads;
  l.head_dim = c.d_model / c.heads;
  l.causal = c.arch == Arch::kDecoder;
  l.settings = c.scheme;
  return l;
}

AttentionOptions AttentionOptionsFor(const ModelConfig& c,
                                     int64_t max_key_length) {
  return FindScheme(c.position)
      .Call(SchemeLayerOf(c), max_key_length)
      .attention;
}

bool HasLearnedInputTable(const ModelConfig& c) {
  return FindScheme(c.position).input == SchemeInput::kLearnedTable;
}

nn::MhaPositions MhaPositionsFor(const ModelConfig& c) {
  const SchemeCall call = FindScheme(c.position).Call(SchemeLayerOf(c), 1);
  nn::MhaPositions p;
  p.rope = call.rope.has_value();
  if (call.rope) {
    p.rope_base = call.rope->base;
    p.rope_layout = call.rope->layout;
  }
  p.xl = call.xl_table;
  return p;
}

template <typename T>
void AddInputPositions(const ModelConfig& c, const BlockShape& shape,
                       const T* learned_table, std::vector<T>* sinusoid,
                       T* x0) {
  const int64_t d = shape.d_model, n = shape.length * d;
  // Each sequence's valid prefix gets the table's first rows.
  auto add = [&](const T* table) {
    int64_t row = 0;
    for (int64_t b = 0; b < shape.batch; ++b) {
      nn::AddPositionForward<T>(table, x0 + row * d, {1, shape.lengths[b], d});
      row += shape.lengths[b];
    }
  };
  switch (FindScheme(c.position).input) {
    case SchemeInput::kSinusoid:
      if (static_cast<int64_t>(sinusoid->size()) < n) {
        Resize(sinusoid, n);
        SinusoidalTable(shape.length, d, sinusoid->data());
      }
      add(sinusoid->data());
      break;
    case SchemeInput::kLearnedTable:
      add(learned_table);
      break;
    case SchemeInput::kNone:
      break;
  }
}

template void AddInputPositions<float>(const ModelConfig&, const BlockShape&,
                                       const float*, std::vector<float>*,
                                       float*);
template void AddInputPositions<double>(const ModelConfig&, const BlockShape&,
                                        const double*, std::vector<double>*,
                                        double*);

}  // namespace relpos::model
