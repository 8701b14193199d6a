// The model's position handling: this config's scheme of the registry
// (relpos/schemes.h, where every scheme is defined) as the model's layers
// run it (docs/model.md, "Position schemes"; the mathematics: docs/math.md
// section 8), one function per side:
//   input side      AddInputPositions   absolute tables added to x_0
//   attention side  AttentionOptionsFor the scheme as relpos::AttentionOptions
//                   MhaPositionsFor     what the attention layer does beyond
//                                       them (RoPE rotations, XL's table)
// Every code path that runs the model's attention (training, evaluation,
// decoding) takes its options from here; its tensors come from the
// registry's tables too (BuildSpecs, transformer.cc).
#ifndef RELPOS_SRC_MODEL_POSITIONS_H_
#define RELPOS_SRC_MODEL_POSITIONS_H_

#include <cstdint>
#include <vector>

#include "model/transformer.h"
#include "model/transformer_block.h"
#include "model/nn/multi_head_attention.h"
#include "relpos/attention.h"
#include "relpos/schemes.h"

namespace relpos::model {

// The registry's view of one attention block of this model: heads, head
// width d_model / heads, causal for decoders, the config's scheme settings.
SchemeLayer SchemeLayerOf(const ModelConfig& config);

// Attention options of the configured scheme for self-attention over at
// most `max_key_length` keys (>= 1): the registry's call (causal for
// decoders; the bucket map, score term, terms and table layout of the
// scheme; path kAuto, the fused kernel wherever
// AttentionProblem::FusedSupported allows). Transformer-XL's table is
// unclipped, so its max_distance is max_key_length - 1. The caller adds
// key_lengths (and a query_offset when queries are not all positions).
AttentionOptions AttentionOptionsFor(const ModelConfig& config,
                                     int64_t max_key_length);

// Whether the configured scheme adds a learned input table (SchemeInput::
// kLearnedTable, `learned`): it has no row beyond max_len, so no sequence
// (source, target, decoding cache) may be longer.
bool HasLearnedInputTable(const ModelConfig& config);

// The layer's RoPE / XL switches for the configured scheme.
nn::MhaPositions MhaPositionsFor(const ModelConfig& config);

// x0 [rows, d] (the valid positions of `shape`, packed) += the absolute
// position term of the configured scheme (its SchemeInput: the sinusoid or
// its learned table; nothing for the others). `learned_table` is
// embed.position ([max_len, d]) or null; `sinusoid` caches the sinusoidal
// table ([>= length, d], grown on demand).
template <typename T>
void AddInputPositions(const ModelConfig& config, const BlockShape& shape,
                       const T* learned_table, std::vector<T>* sinusoid, T* x0);

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_POSITIONS_H_
