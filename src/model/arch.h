// The architectures (model::Arch), one description each: what a model of
// each holds and runs. The model (its tensors and passes, transformer.cc),
// its config (names, checks, parameter count: model_config.cc), the memory
// planner (model/memory_plan.cc), the relative-table statistics
// (train/signal_stats.cc) and incremental decoding (model/decoder_session.h)
// read these rather than compare Arch values. Adding an architecture is its
// Arch value (model/transformer.h) and its row in Arches() (model_config.cc),
// plus the model's code for whatever it combines that no row has yet.
#ifndef RELPOS_SRC_MODEL_ARCH_H_
#define RELPOS_SRC_MODEL_ARCH_H_

#include <string>
#include <vector>

#include "model/transformer.h"

namespace relpos::model {

struct ArchInfo {
  Arch arch;
  const char* name;  // ToString / ParseArch: "encoder", "decoder", "seq2seq"
  // The main stack's self-attention (the stack the output head reads) is
  // causal (a decoder's, which incremental decoding can run) or
  // bidirectional (an encoder's).
  bool causal;
  // Batches carry a source sentence: a second, bidirectional stack encodes
  // it ("encoder.", `layers` blocks) and the main stack's blocks
  // cross-attend to its output ("decoder.", DecoderLayers blocks).
  bool source;
  // One token embedding serves the inputs and the output head (no
  // head.weight), N(0, 1/d_model), scaled by sqrt(d_model) at the inputs;
  // otherwise the head has its own weight and the embedding is N(0, 1).
  bool tied_embedding;
};
// Every architecture, in Arch order.
const std::vector<ArchInfo>& Arches();
const ArchInfo& Describe(Arch arch);

// One stack of blocks of a model, in checkpoint order (the main stack, the
// one the output head reads, last): its config as its blocks and the
// position functions see it (EncoderSide / DecoderSide for a model with a
// source, else the config), the prefix of its tensors' names, whether it
// runs over the batch's sources and whether its blocks cross-attend to the
// sources' encoding.
struct StackInfo {
  ModelConfig side;
  std::string prefix;  // "", "encoder." or "decoder."
  bool over_source = false;
  bool cross = false;
};
std::vector<StackInfo> Stacks(const ModelConfig& config);

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_ARCH_H_
