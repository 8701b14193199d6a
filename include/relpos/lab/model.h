// relpos's small transformer (docs/model.md): token embedding, pre-LayerNorm
// blocks of multi-head attention (with the configured position scheme) and a
// GELU feed-forward, a final LayerNorm and an output head. Built from an
// ExperimentConfig or loaded from a checkpoint folder (docs/training.md).
#ifndef RELPOS_LAB_MODEL_H_
#define RELPOS_LAB_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "relpos/model/batch.h"
#include "relpos/lab/config.h"
#include "relpos/tensor_view.h"

namespace relpos {

// What Forward counts over a batch (BatchCounts: relpos/model/batch.h), the
// mean loss and the predictions.
struct ForwardResult : BatchCounts {
  double loss = 0;  // mean cross-entropy (nats) over targets != -1
  std::vector<int32_t> predictions;  // [batch, length] argmax, -1 at padding
};

// Inference outputs of a batch, in the batch's padded layout (zeros at
// padded positions).
struct ModelOutputs {
  int64_t batch = 0, length = 0, d_model = 0, vocab_size = 0;
  // Final hidden states LayerNormF(x_L): what an encoder hands on.
  std::vector<float> hidden;  // [batch, length, d_model]
  // Output head on them: a decoder's next-token logits.
  std::vector<float> logits;  // [batch, length, vocab_size]
};

// How a seq2seq model decodes (docs/model.md, "Decoding").
struct DecodeOptions {
  int64_t beam_size = 4;  // 1: greedy
  // "wu": ((5 + |y|) / 6)^alpha, |y| with EOS (Wu et al. 2016, OpenNMT-py);
  // "power": |y|^alpha with the EOS (CTranslate2); "none".
  std::string length_penalty = "wu";
  double alpha = 0.6;
  // At most max(1, ceil(max_length_ratio * source tokens)) tokens, and at
  // most max_length.
  double max_length_ratio = 2.0;
  int64_t max_length = 1024;
  // The vocabulary's BOS and EOS; -1: those of the model's training data.
  int32_t bos = -1, eos = -1;
  // Threads of the search; 0: the model's training thread count. With
  // several batches (max_batch_size) the threads take them in turn, as
  // CTranslate2's inter_threads do; one batch of several sentences is cut
  // into a share per thread; one sentence gets every thread inside its
  // matrix products. The output does not depend on it.
  int threads = 0;
  // More sentences than this are sorted by source length and searched in
  // batches of at most this many (as CTranslate2's translate_batch with
  // max_batch_size); 0: all as one batch. The output does not depend on it.
  int64_t max_batch_size = 0;
  // "float32", "int8" or "int8_a8" (ComputeTypeNames()): with int8 the
  // linear layers of the decoder's (and a seq2seq encoder's) blocks
  // (attention projections, FFN) and a large output head (above 1/8 of the
  // decoder blocks' int8 bytes; an embedding tied to it is then looked up
  // from its int8 rows) run as int8 x int16 products with
  // per-output-channel weight scales and per-row activation scales
  // (docs/generate.md, "Quantized inference"); int8_a8 quantizes those
  // activations to 8 bits instead (faster where the CPU has AVX-512 VNNI,
  // less accurate). The relative tables and attention stay float32. The
  // weights are quantized once per call, or once for all by Load(dir,
  // type) / Quantize (which then require their compute type here).
  std::string compute_type = "float32";
};

// One decoded sentence.
struct Translation {
  std::vector<int32_t> tokens;  // without BOS and EOS
  double log_prob = 0;          // log P(tokens, EOS | source)
  double score = 0;             // log_prob / length penalty
  bool ended_by_eos = false;    // false: stopped at the length limit
};

class Model {
 public:
  // A freshly initialised model; `config` is resolved first (the vocabulary
  // comes from its data) and its model.seed initialises every parameter.
  explicit Model(const ExperimentConfig& config);
  // The model of a checkpoint folder (written by Training or Save); IoError /
  // FormatError for a missing or damaged one. With compute_type "int8" or
  // "int8_a8" it comes quantized, as Quantize leaves it, without the whole
  // float32 model ever in memory: the matrices that get int8 copies are
  // read and quantized one at a time (the same model, bit for bit, as
  // Load + Quantize; InvalidArgument for another name or a model without a
  // decoder).
  static Model Load(const std::string& checkpoint_dir,
                    const std::string& compute_type = "float32");
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  // Writes a checkpoint folder (parameters, the config, the step, fresh
  // optimiser moments) that Load, Training::Resume and `relpos eval` read.
  void Save(const std::string& dir) const;

  const ExperimentConfig& config() const;
  int64_t step() const;  // updates it was trained for (0 if fresh)
  int64_t NumParameters() const;
  // Tensor names in the model's order (docs/model.md), and their values.
  std::vector<std::string> ParameterNames() const;
  ConstView<float> Parameter(const std::string& name) const;
  // Overwrites parameter `name` with `values` (row-major, exactly its
  // numel); InvalidArgument for an unknown name or another size. For
  // importers of weights trained elsewhere (relpos.opennmt).
  void SetParameter(const std::string& name, std::span<const float> values);
  // Gradient of the last ForwardBackward, same shape as Parameter(name);
  // zeros before the first (the model allocates its gradients then).
  ConstView<float> Gradient(const std::string& name) const;

  // Evaluation: no dropout, no gradients. InvalidArgument for an
  // inconsistent batch (sizes, ids out of range, targets at padding).
  ForwardResult Forward(const TokenBatch& batch);
  // The inference forward (no dropout) of `batch`, returning its hidden
  // states and logits; targets are ignored (may be empty). InvalidArgument
  // for an inconsistent batch.
  ModelOutputs Outputs(const TokenBatch& batch);
  // Forward, mean loss, backward: every gradient is overwritten. Dropout (if
  // configured) draws from `dropout_seed`. Returns the mean loss.
  double ForwardBackward(const TokenBatch& batch, uint64_t dropout_seed = 0);
  // Seq2seq models: the best decoding of each source sentence (token ids),
  // greedy or by beam search, the sentences batched. InvalidArgument for
  // another architecture, bad options, ids out of range.
  std::vector<Translation> Translate(
      const std::vector<std::vector<int32_t>>& sources,
      const DecodeOptions& options = {});
  // For deployment: quantizes the linear layers once for `compute_type`
  // ("int8" or "int8_a8", as DecodeOptions::compute_type says) and frees
  // their float32 weights. Translate and Generate then run with that
  // compute type only; what reads float32 weights (Save, Parameter,
  // SetParameter, Gradient, Forward, Outputs, ForwardBackward, Evaluate,
  // Inspect) throws InvalidArgument. InvalidArgument for another name, a
  // model without a decoder, a model borrowed from a Training, or a second
  // call.
  void Quantize(const std::string& compute_type);
  // "float32", or the compute type Quantize kept.
  const std::string& compute_type() const;

  // Seq2seq models: the BOS and EOS ids of the model's training data (what
  // Translate uses when the options give none); InvalidArgument otherwise.
  std::pair<int32_t, int32_t> BosEos() const;

 private:
  struct Impl;  // the transformer it wraps (src/lab/api/internal.h)
  friend struct ApiAccess;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True if `dir` holds a checkpoint (valid or not): its config.json exists.
bool HasCheckpoint(const std::string& dir);

// The compute types every compute_type option takes, in order: "float32",
// "int8", "int8_a8".
const std::vector<std::string>& ComputeTypeNames();

}  // namespace relpos

#endif  // RELPOS_LAB_MODEL_H_
