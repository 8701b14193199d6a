// The position schemes of model/positions.h.
#include "model/positions.h"

#include <algorithm>

#include "nn/position_encoding.h"

namespace relpos::model {

AttentionOptions AttentionOptionsFor(const ModelConfig& c,
                                     int64_t max_key_length) {
  AttentionOptions o;
  o.causal = c.arch == Arch::kDecoder;
  o.path = AttentionPath::kAuto;
  o.max_distance = 0;
  o.per_head_tables = false;
  o.key_term = false;
  o.value_term = false;
  // T5's buckets: bidirectional for encoders, causal for decoders (as
  // Hugging Face T5's encoder and decoder self-attention).
  T5Buckets t5;
  t5.num_buckets = c.num_buckets;
  t5.max_distance = c.bucket_max_distance;
  t5.bidirectional = c.arch == Arch::kEncoder;
  auto shaw_tables = [&] {
    o.per_head_tables = c.per_head_tables;
    o.key_term = c.key_term;
    o.value_term = c.value_term;
  };
  switch (c.position) {
    case PositionScheme::kNone:
    case PositionScheme::kSinusoidal:
    case PositionScheme::kLearned:
    case PositionScheme::kRope:  // plain attention on rotated q, k
      break;
    case PositionScheme::kShaw:
      o.max_distance = c.max_distance;
      shaw_tables();
      break;
    case PositionScheme::kShawAsym:
      o.buckets.kind = BucketKind::kClip;
      o.buckets.clip = {c.k_left, c.k_right};
      shaw_tables();
      break;
    case PositionScheme::kShawLog:
      o.buckets.kind = BucketKind::kT5;
      o.buckets.t5 = t5;
      shaw_tables();
      break;
    case PositionScheme::kT5:
      o.buckets.kind = BucketKind::kT5;
      o.buckets.t5 = t5;
      o.score_term = ScoreTerm::kScalarTable;
      o.key_term = true;
      break;
    case PositionScheme::kAlibi:
      o.score_term = ScoreTerm::kAlibi;  // slopes: AlibiSlopes(H)
      o.key_term = true;
      break;
    case PositionScheme::kXl:
      o.max_distance = std::max<int64_t>(max_key_length - 1, 0);
      o.per_head_tables = true;
      o.key_term = true;
      o.position_query_bias = true;
      break;
  }
  return o;
}

nn::MhaPositions MhaPositionsFor(const ModelConfig& c) {
  nn::MhaPositions p;
  p.rope = c.position == PositionScheme::kRope;
  p.rope_base = c.rope_base;
  p.rope_layout =
      c.rope_interleaved ? RopeLayout::kInterleaved : RopeLayout::kSplitHalves;
  p.xl = c.position == PositionScheme::kXl;
  return p;
}

int64_t RelativeTableRows(const ModelConfig& c) {
  if (!HasShawTables(c.position) && c.position != PositionScheme::kT5) {
    return 0;
  }
  return nn::AttentionTableRows(AttentionOptionsFor(c, 1));
}

std::vector<int64_t> RelativeTableShape(const ModelConfig& c) {
  const int64_t rows = RelativeTableRows(c), dh = c.d_model / c.heads;
  if (c.per_head_tables) return {c.heads, rows, dh};
  return {rows, dh};
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
  switch (c.position) {
    case PositionScheme::kSinusoidal:
      if (static_cast<int64_t>(sinusoid->size()) < n) {
        Resize(sinusoid, n);
        nn::SinusoidalTable<T>(shape.length, d, sinusoid->data());
      }
      add(sinusoid->data());
      break;
    case PositionScheme::kLearned:
      add(learned_table);
      break;
    case PositionScheme::kNone:
    case PositionScheme::kShaw:
    case PositionScheme::kShawAsym:
    case PositionScheme::kShawLog:
    case PositionScheme::kT5:
    case PositionScheme::kAlibi:
    case PositionScheme::kRope:
    case PositionScheme::kXl:
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
