// A small transformer for relpos's sequence-task, byte-level LM and
// translation experiments: a bidirectional encoder or a causal decoder-only
// model with token embedding, pre-LayerNorm blocks (multi-head attention with
// a chosen position scheme, GELU feed-forward, residuals), a final LayerNorm
// and an untied output head; or an encoder-decoder (seq2seq) of the two
// stacks, the decoder's blocks with cross-attention over the encoder's
// output, and one embedding tied across the encoder input, the decoder input
// and the output projection. Forward and backward are written by hand
// (src/model/nn/); docs/model.md describes the architectures, initialisation and
// the names of the parameters (which are the checkpoint tensor names).
//
// The model is a class template on the number type: `Transformer` (float) is
// what training uses; BasicTransformer<double> runs the same code in double
// so that tests can check whole-model gradients against finite differences.
#ifndef RELPOS_SRC_MODEL_TRANSFORMER_H_
#define RELPOS_SRC_MODEL_TRANSFORMER_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/rng.h"
#include "model/nn/weight_reader.h"
#include "relpos/model/batch.h"
#include "relpos/schemes.h"

namespace relpos::model {

// How token positions enter the model: a scheme of the registry
// (relpos/schemes.h; docs/model.md, "Position schemes"; the mathematics of
// each relative scheme: docs/math.md section 8). The registry is the one
// place a scheme is defined: its name, settings, tables (BuildSpecs in
// transformer.cc adds them) and attention options (model/positions.h turns
// this config into its layer). Adding a scheme is an entry there, and so
// is a setting (a SchemeSettings field and its row: ModelConfig holds the
// SchemeSettings, its settings table is made from the rows); this model
// needs no change unless the scheme has a table of a new TableRole (the
// layer in src/model/nn must use it).
using PositionScheme = SchemeId;
// The scheme's registry name ("shaw"), and the scheme of a name or alias
// (InvalidArgument listing the accepted names).
inline std::string ToString(PositionScheme scheme) {
  return FindScheme(scheme).name;
}
inline PositionScheme ParsePositionScheme(const std::string& name) {
  return FindScheme(name).id;
}

enum class Arch {
  kEncoder,  // bidirectional self-attention
  kDecoder,  // decoder-only, causal self-attention
  // Encoder-decoder (Vaswani et al. 2017): a bidirectional encoder over the
  // source, a causal decoder over the target whose blocks also attend to the
  // encoder's output (cross-attention, no position term); tied embeddings.
  kSeq2seq,
};
std::string ToString(Arch arch);  // "encoder" / "decoder" / "seq2seq"
Arch ParseArch(const std::string& name);

struct ModelConfig {
  Arch arch = Arch::kEncoder;
  // layers: the blocks of the one stack (seq2seq: the encoder's).
  int64_t vocab_size = 0, d_model = 64, heads = 4, layers = 2, d_ff = 256;
  int64_t decoder_layers = -1;  // kSeq2seq: the decoder's blocks; -1: layers
  // The position scheme and its settings, held as the registry's
  // relpos::SchemeSettings (whose rows, SchemeSettingInfos, say which scheme
  // reads which and give their keys, help, ranges and the papers' defaults;
  // the config's JSON keys are theirs, flat: "max_distance", ...). T5's
  // buckets (t5, shaw-log) are bidirectional for encoders, causal for
  // decoders (seq2seq: per side, EncoderSide / DecoderSide).
  PositionScheme position = PositionScheme::kShaw;
  SchemeSettings scheme;
  double dropout = 0.0;         // in [0, 1); applied only in ForwardBackward
  uint64_t seed = 0;            // initialisation
};

// The decoder's blocks of a seq2seq model (decoder_layers, or layers when
// it is -1); layers for the other architectures.
int64_t DecoderLayers(const ModelConfig& config);
// One stack of a seq2seq model as the position functions (model/positions.h)
// and the blocks see it: the encoder side is an encoder of `layers` blocks,
// the decoder side a decoder of DecoderLayers blocks, so that every scheme
// gets its direction per side (T5's buckets bidirectional in the encoder
// and causal in the decoder, as T5 has them). For the other architectures,
// the config itself.
ModelConfig EncoderSide(const ModelConfig& config);
ModelConfig DecoderSide(const ModelConfig& config);

// JSON object with every field above; enums as their ToString names.
nlohmann::json ToJson(const ModelConfig& config);
// Missing fields keep their defaults. A field of the wrong JSON type, an
// unknown field or a non-object throws FormatError naming the field; values
// out of range throw InvalidArgument (from Validate) naming the field.
ModelConfig ModelConfigFromJson(const nlohmann::json& json);
// InvalidArgument naming the first bad field and its value. Also caps sizes so
// that an untrusted config cannot request absurd allocations.
void Validate(const ModelConfig& config);

// The name and shape of every parameter a model of `config` holds, in
// checkpoint order, without allocating any of them (what a checkpoint's
// tensor files are checked against, and what the memory planner counts).
// Validates `config` first.
struct ParameterShape {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }
};
std::vector<ParameterShape> ParameterShapes(const ModelConfig& config);

// A batch of token sequences, padded to `length`. For a seq2seq model the
// sequences are the decoder's (the target side: tokens = BOS y_1 .. y_m,
// targets = y_1 .. y_m EOS under teacher forcing) and each has a source
// sentence; the other architectures take no source. It is the public
// TokenBatch (relpos/model/batch.h), with every sequence's lengths and
// targets given (the model has no empty defaults).
using Batch = TokenBatch;

// One named tensor of the model. `grad` is empty until the model's first
// Backward (or AllocateGradients), then has value's size and is overwritten
// by every Backward (and so every ForwardBackward): a model that only
// evaluates or decodes holds one copy of its weights, not two.
template <typename T>
struct BasicParameter {
  std::string name;  // e.g. "blocks.0.attn.q.weight" (docs/model.md)
  std::vector<int64_t> shape;
  std::vector<T> value, grad;
  // Whether decoupled weight decay applies, declared with the tensor: true
  // for the weight matrices of the linear layers, the output head and the
  // token embedding; false for biases, LayerNorm gains and every position
  // table (absolute or relative).
  bool decay = false;
  int64_t numel() const { return static_cast<int64_t>(value.size()); }
};
using Parameter = BasicParameter<float>;

// Counts accumulate over calls (the caller zeroes them); loss_sum is the sum
// of per-token cross-entropies (natural log).
using Metrics = BatchCounts;  // relpos/model/batch.h

// What Forward keeps: kTraining applies dropout and keeps every block's
// activations for Backward; kInference applies no dropout and reuses one set
// of block buffers for all blocks (so no Backward can follow it).
enum class ForwardMode { kTraining, kInference };

struct BlockShape;  // model/transformer_block.h
template <typename T>
struct BlockWeights;  // model/transformer_block.h

// What incremental decoding (model/decoder_session.h) runs: the decoder
// stack's weights (the only stack of a decoder-only model) and the output
// head. The input is x = embed_scale * token[id] + the side's absolute
// position term; a tied head reads head_w == token.
template <typename T>
struct DecoderWeights {
  const T* token = nullptr;     // [vocab_size, d_model]
  T embed_scale = T(1);         // sqrt(d_model) for seq2seq, else 1
  const T* position = nullptr;  // learned table [max_len, d_model] or null
  std::vector<BlockWeights<T>> blocks;  // cross-attention: seq2seq only
  const T *final_gamma = nullptr, *final_beta = nullptr;
  const T *head_w = nullptr, *head_b = nullptr;  // [V, d_model], [V]
};

// Holds its activations between the forward and backward pass, so one object
// serves one call at a time (use one model per thread).
template <typename T>
class BasicTransformer {
 public:
  // How the constructor fills the parameters: kRandom as training starts
  // (below); kZeros for a loader that overwrites every one of them (a
  // checkpoint's), which then skips the random draws; kNone allocates no
  // values at all (each parameter holds the one-NaN placeholder of
  // DropValues, and values_dropped() is true), for a loader that allocates
  // (AllocateValue) and reads only the parameters it keeps in float (int8
  // inference loading straight from a checkpoint, train::LoadModelFor).
  enum class Fill { kRandom, kZeros, kNone };
  // Validates `config` and initialises every parameter deterministically from
  // config.seed (each tensor from its own stream keyed by its name, so adding
  // a tensor never changes the others).
  explicit BasicTransformer(const ModelConfig& config,
                            Fill fill = Fill::kRandom);
  ~BasicTransformer();
  BasicTransformer(BasicTransformer&&) noexcept;
  BasicTransformer& operator=(BasicTransformer&&) noexcept;

  const ModelConfig& config() const { return config_; }

  // ---- The passes (llm.c's gpt2_forward / gpt2_backward split) ----

  // Forward pass over `batch`: logits [batch * length, vocab_size] and the
  // mean cross-entropy over targets != -1, returned (0 when there is no
  // target; kTraining with label smoothing: the smoothed loss, which
  // Backward differentiates). kTraining with config.dropout > 0 draws one
  // value from *rng per dropout site (the masks themselves come from a
  // counter-based hash, so they do not depend on the thread count); rng
  // must not be null for kTraining and is unused for kInference. Throws
  // InvalidArgument for an inconsistent batch (sizes, token ids out of
  // range, targets at padded positions, length > max_len for kLearned, a
  // source given to another model or missing from a seq2seq one) and
  // changes nothing then.
  T Forward(const Batch& batch, ForwardMode mode, Rng* rng);
  // Label smoothing eps of the training loss (nn/cross_entropy.h: PyTorch's
  // CrossEntropyLoss(label_smoothing=eps) over the whole vocabulary, rows
  // without a target excluded), applied by Forward(kTraining) and Backward
  // only; the metrics' loss_sum and kInference stay plain cross-entropy.
  // InvalidArgument unless 0 <= eps < 1. Default 0.
  void set_label_smoothing(double eps);
  double label_smoothing() const { return label_smoothing_; }

  // Adds the last Forward's counts to *metrics.
  void AddMetrics(Metrics* metrics) const;
  // The last Forward's argmax per position [batch, length] (ties to the
  // lowest id), -1 at padded positions.
  void Predictions(std::vector<int32_t>* predictions) const;
  // The last Forward's final hidden states LayerNormF(x_L) [rows, d_model]
  // (seq2seq: the decoder's) and logits [rows, vocab_size], rows = the valid
  // positions packed sequence after sequence (relpos::Model::Outputs unpacks
  // them).
  const std::vector<T>& LastHidden() const;
  const std::vector<T>& LastLogits() const;
  // Gradients of the last Forward's loss, OVERWRITING every parameter's grad
  // (all zero when that batch had no target). InvalidArgument unless the
  // last Forward was kTraining.
  void Backward();
  // Gives every parameter a zeroed grad of its value's size where it has
  // none yet (Backward does this first).
  void AllocateGradients();

  // ---- The passes composed ----

  // Forward(kTraining) + AddMetrics (if metrics is given) + Backward.
  // Returns the mean loss.
  T ForwardBackward(const Batch& batch, Rng& rng, Metrics* metrics);

  // Evaluation: Forward(kInference) + AddMetrics + Predictions, each output
  // optional. No dropout, no grads.
  T Evaluate(const Batch& batch, Metrics* metrics,
             std::vector<int32_t>* predictions);

  // Stable order and names (the checkpoint tensor names). The model reads the
  // values from here on every call, so an optimizer updates them in place;
  // do not resize the vector or the tensors.
  std::vector<BasicParameter<T>>& parameters() { return params_; }
  const std::vector<BasicParameter<T>>& parameters() const { return params_; }
  // Index of the parameter called `name`, or -1.
  int64_t FindParameter(const std::string& name) const;
  int64_t NumParameters() const;

  // ---- For int8 inference (model/quantized_linears.h) ----
  // Frees the values of the parameters whose data() is in `values`: each
  // keeps one NaN (so its data() stays a distinct live pointer, which the
  // int8 copies are looked up by, never read). Returns those pointers in
  // the order of `values`; InvalidArgument for a pointer that is no
  // parameter's (nothing freed then). From then on the model is
  // int8-only: Forward (so Evaluate and ForwardBackward) throws
  // InvalidArgument, and so does a DecoderSession without the int8
  // copies, since the float passes would read the freed weights.
  std::vector<const T*> DropValues(const std::vector<const T*>& values);
  bool values_dropped() const { return values_dropped_; }
  // Gives parameter `index` (a placeholder of Fill::kNone or DropValues)
  // zero values of its shape again, for a loader to overwrite; its data()
  // changes. InvalidArgument for an index out of range.
  void AllocateValue(int64_t index);

  // ---- For incremental decoding (model/decoder_session.h) ----
  // The weights block `layer` of the decoder stack (the only stack of the
  // other architectures) runs with: the parameters' current values.
  BlockWeights<T> block_weights(int64_t layer) const;
  // The decoder stack and output head (the parameters' current values).
  DecoderWeights<T> decoder_weights() const;
  // The encoder stack's blocks (seq2seq; empty for the others).
  std::vector<BlockWeights<T>> encoder_blocks() const;
  // Seq2seq only: the encoder's output LayerNormE(x_L) of `sources` (one
  // token list each, possibly empty), [rows, d_model] with the rows packed
  // source after source, as the training forward computes it (no dropout).
  // `weights`: how the embedding lookup and the blocks' products read
  // their matrices (int8 inference, model/quantized_linears.h; required
  // once values_dropped()). Keeps no state: the model may be const and
  // shared. InvalidArgument for another architecture, no source, an id out
  // of range or a source longer than max_len with learned positions.
  void Encode(const std::vector<std::vector<int32_t>>& sources,
              std::vector<T>* memory,
              const nn::WeightReader<T>* weights = nullptr) const;

 private:
  struct State;  // activations and scratch, defined in transformer.cc

  ModelConfig config_;
  std::vector<BasicParameter<T>> params_;
  std::unique_ptr<State> state_;
  double label_smoothing_ = 0.0;
  bool values_dropped_ = false;
};

// The float model used for training; double is for gradient checks.
class Transformer : public BasicTransformer<float> {
 public:
  using BasicTransformer<float>::BasicTransformer;
};

extern template class BasicTransformer<float>;
extern template class BasicTransformer<double>;

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_TRANSFORMER_H_
