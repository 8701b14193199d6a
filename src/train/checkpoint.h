// Training checkpoints: a folder holding
//
//   config.json                        the commit point, written last:
//     {"format": "relpos-checkpoint", "version": 1,
//      "model": <ModelConfig>, "train": <TrainConfig>,
//      "state": {"step": N, "data_rng": "0x..", "dropout_rng": "0x.."},
//      "files": {"model": "model-<N>.safetensors",
//                "optimizer": "optimizer-<N>.safetensors"},
//      "validation": {"points": [{"step": S, "loss": L, "pairs": P,
//                                 "bleu": B, "bleu_sentences": K}, ...],
//                     "best_step": S, "best_loss": L,
//                     "stopped_early": false}}
//     ("validation" only for a run with TrainConfig::eval_every; a point's
//     "bleu" and "bleu_sentences" only when BLEU was measured;
//     "stopped_at_step": N beside "stopped_early": true when the patience
//     rule stopped the run at step N)
//   model-<N>.safetensors              parameters, named as the model names
//                                      them (docs/model.md), F32
//   optimizer-<N>.safetensors          AdamW moments: "exp_avg.<param>" and
//                                      "exp_avg_sq.<param>", F32
//   signal-<N>.json                    optional: the relative tables' training
//                                      signal (signal_stats.h), referenced as
//                                      "files": {..., "signal": ...}; JSON, not
//                                      safetensors, because its int64 counts
//                                      and double sums must come back bit for
//                                      bit and safetensors here is F32 only
//   sentencepiece.model                task translate only: the SentencePiece
//                                      vocabulary (DataConfig::vocabulary),
//                                      referenced as "files": {...,
//                                      "vocabulary": "sentencepiece.model"};
//                                      one name for the whole run (the
//                                      vocabulary never changes), written
//                                      before config.json when it differs
//
// Checkpoints written before the signal statistics existed have no
// "signal" entry; they still load (Checkpoint::signal is then empty), and
// older readers ignore the entry.
//
// N is the step, zero-padded to 8 digits (".1", ".2", ... is appended in the
// rare case that name is still referenced by the current config.json).
//
// Write protocol (crash safety): each file is written with
// io::AtomicWriteFile (temp file, fsync, rename, fsync dir). The two tensor
// files go first under new names, then config.json is replaced atomically;
// only then are files no longer referenced deleted. A crash (even kill -9)
// at any moment therefore leaves config.json pointing at a complete,
// consistent set: the old one or the new one, never a mix.
//
// Reading treats the folder as untrusted: config.json is size-capped and
// parsed strictly (io/json_reader.h); file names must be plain names of the
// form above; whether the model fits in memory is checked (memory_plan.h)
// and each tensor file's size against the config before it is read; tensor
// names, order and shapes must match what the model config implies
// (model::ParameterShapes, no model is built for it); every value must be
// finite (second moments also >= 0); the safetensors metadata must carry
// the same step.
//
// Writing holds the folder's io::FolderLock (one writer per folder) and
// first removes the temporary files a killed save left behind.
#ifndef RELPOS_SRC_TRAIN_CHECKPOINT_H_
#define RELPOS_SRC_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/io/safetensors.h"
#include "model/quantized_linears.h"
#include "model/transformer.h"
#include "train/signal_stats.h"
#include "train/train_config.h"

namespace relpos::train {

inline constexpr const char* kCheckpointFormat = "relpos-checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kCheckpointConfigFile = "config.json";
inline constexpr const char* kVocabularyFile = "sentencepiece.model";
inline constexpr int64_t kMaxVocabularyBytes = int64_t{64} << 20;
// Points of a validation curve a checkpoint may hold (config.json stays
// under its 1 MiB cap): TrainConfig allows steps / eval_every up to half,
// the rest leaves room for the last step's point of each resumed length.
inline constexpr int64_t kMaxValidationPoints = 2 * kMaxValidationEvaluations;

struct Checkpoint {
  model::ModelConfig model_config;
  TrainConfig train_config;
  TrainState state;
  std::vector<io::NamedTensor> parameters;  // model order
  // exp_avg.<name> for every parameter, then exp_avg_sq.<name>; empty when
  // read with with_optimizer = false.
  std::vector<io::NamedTensor> optimizer;
  // The relative tables' training signal (signal_stats.h); empty when the
  // checkpoint has none (written before relpos recorded it, or by
  // Model::Save of a model that was not trained here) or when read with
  // with_signal = false.
  std::optional<SignalStats> signal;
};

// Writes `checkpoint` into `dir` (created if missing, parent must exist)
// with the protocol above. IoError when the folder cannot be written.
void WriteCheckpoint(const std::string& dir, const Checkpoint& checkpoint);

// Reads and validates. IoError if `dir` or a file is missing or unreadable,
// FormatError (naming the file and the problem) if anything is malformed or
// does not match the config. The signal file, when referenced, is read and
// validated only with with_signal.
Checkpoint ReadCheckpoint(const std::string& dir, bool with_optimizer,
                          bool with_signal = false);
// Only config.json, validated as ReadCheckpoint does: the configs and the
// state (no tensors), e.g. to plan memory before reading the tensors.
Checkpoint ReadCheckpointConfig(const std::string& dir);

// True if `dir/config.json` exists (a checkpoint folder, valid or not).
bool HasCheckpoint(const std::string& dir);

// The model's parameters as named tensors (copies), and back. SetParameters
// checks names, order and shapes (FormatError naming `source`).
std::vector<io::NamedTensor> GetParameters(const model::Transformer& model);
void SetParameters(const std::vector<io::NamedTensor>& tensors,
                   const std::string& source, model::Transformer& model);

// Loads only the model of a checkpoint (for evaluation).
model::Transformer LoadModel(const std::string& dir, TrainConfig* train_config,
                             TrainState* state);

// A model loaded for inference with one compute type: for int8 / int8_a8
// its int8 copies too (the model then int8-only: `quantized` dropped its
// float32 matrices; docs/generate.md, "Memory").
struct LoadedModel {
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<const model::QuantizedLinears> quantized;  // float32: null
};
// LoadModel for `type`. For int8 / int8_a8 the float32 values of the
// matrices int8 inference quantizes are never all held: each is read,
// checked (as LoadModel checks it) and quantized before the next, so the
// peak is the float32 values kept, the int8 copies and one matrix, not the
// whole float32 model beside its int8 copies. The same model, bit for bit,
// as LoadModel + QuantizedLinears + DropFloatWeights.
LoadedModel LoadModelFor(const std::string& dir, model::ComputeType type,
                         TrainConfig* train_config, TrainState* state);

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_CHECKPOINT_H_
