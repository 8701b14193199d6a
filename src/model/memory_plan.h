// The one allocation planner: what a configuration will allocate, worked out
// from its settings before anything is allocated, and the check every verb
// makes against the memory this process may use (docs/robustness.md,
// "Memory"). A 1 KB config.json declaring max_distance 2^20 and 7 layers is
// refused in milliseconds with a message naming the largest parts, instead
// of building a 7.5 GB model for 40 s and ending in std::bad_alloc.
//
// The plans count what the code allocates (model/transformer.cc's
// activations and scratch, the fused kernel's per-thread accumulators, the
// checkpoint writer's copies, the decoder's cache), in bytes, as doubles (an
// absurd config may exceed 2^63). They are estimates that err on the large
// side by design; small allocations (names, indices, a few KiB per thread)
// are not counted.
#ifndef RELPOS_SRC_MODEL_MEMORY_PLAN_H_
#define RELPOS_SRC_MODEL_MEMORY_PLAN_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/transformer.h"

namespace relpos::model {

struct MemoryPlan {
  std::string what;  // "training", "evaluation", ... (for the message)
  // (part, bytes), e.g. ("parameters and gradients", 3.7e9).
  std::vector<std::pair<std::string, double>> parts;
  // Address space the process reserves without using it (thread stacks and
  // allocator arenas): counted against RLIMIT_AS only.
  double reserved = 0;
  // Bytes of the parts already allocated (the model of a loaded checkpoint,
  // when inference is planned): counted against the machine's memory, not
  // against the limits that are measured from the memory in use.
  double resident = 0;
  // What to reduce, named in the refusal ("max_distance, layers, ...").
  std::string reduce;
  double total() const;
  void Add(const MemoryPlan& other);  // its parts, reserve and advice
};

// Parameters and their gradients (every model holds both).
MemoryPlan PlanModel(const model::ModelConfig& config);
// Reading a checkpoint and building its model: the file contents, the
// parsed tensors, the model (and the optimizer file's moments).
MemoryPlan PlanCheckpointLoad(const model::ModelConfig& config,
                              bool with_optimizer);
// One training run: model, AdamW moments, the checkpoint writer's copies,
// one batch of `batch` sequences of `tokens` tokens kept for backward, and
// `threads` workers.
MemoryPlan PlanTraining(const model::ModelConfig& config, int64_t batch,
                        int64_t tokens, int threads);
// Evaluation or inference of a loaded model on batches of `batch` sequences
// of `tokens` tokens (activations of one block at a time).
MemoryPlan PlanInference(const model::ModelConfig& config, int64_t batch,
                         int64_t tokens, int threads);
// Incremental decoding of `sequences` sequences of up to `capacity` tokens
// each (key/value cache) of a loaded model; without the cache, every step
// is inference over the prefix.
MemoryPlan PlanGeneration(const model::ModelConfig& config, int64_t sequences,
                          int64_t capacity, bool use_cache, int threads);
// Beam search of a loaded seq2seq model over `sources` sentences of at most
// `longest_source` tokens, `beam` hypotheses each, up to `steps` decoding
// steps: the encoder's pass, every layer's cross-attention keys and values
// per source, and the self-attention cache of every hypothesis (twice:
// reordering copies it) and its logits.
MemoryPlan PlanTranslation(const model::ModelConfig& config, int64_t sources,
                           int64_t longest_source, int64_t beam, int64_t steps,
                           int threads);

// The memory this process may use, limit by limit.
struct MemoryLimit {
  double bytes = 0;    // <= 0: no such limit
  std::string source;  // "RELPOS_MEMORY_LIMIT=8G", "RLIMIT_AS (ulimit -v)"
};
struct MemoryBudget {
  // For the whole plan: RELPOS_MEMORY_LIMIT if set, else the machine's
  // MemTotal.
  MemoryLimit total;
  // For the plan minus its resident part: the smallest of the machine's
  // MemAvailable, the cgroup's limit minus its use and RLIMIT_DATA minus the
  // data in use.
  MemoryLimit headroom;
  // For the plan minus resident, plus reserved: RLIMIT_AS minus the
  // address space in use.
  MemoryLimit address_space;
};
// InvalidArgument for a malformed RELPOS_MEMORY_LIMIT.
MemoryBudget AvailableMemory();

// ResourceError unless `plan` fits AvailableMemory(): "training needs about
// 7.6 GiB (parameters and gradients 3.5 GiB, AdamW moments 3.5 GiB, ...),
// more than the 3.8 GiB this process may use (RLIMIT_AS); reduce ... or
// raise the limit (docs/robustness.md)".
void CheckMemory(const MemoryPlan& plan);

// "7.6 GiB", "512.0 MiB", "12.0 KiB".
std::string FormatBytes(double bytes);

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_MEMORY_PLAN_H_
