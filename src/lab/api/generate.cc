// relpos::Generate: byte-level generation with model::DecoderSession (the
// key/value cache) or by recomputing the prefix with the model's inference
// forward.
#include "relpos/lab/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "lab/api/internal.h"
#include "lab/api/sampling.h"
#include "base/check.h"
#include "base/rng.h"
#include "relpos/error.h"
#include "model/arch.h"
#include "model/decoder_session.h"
#include "model/positions.h"
#include "model/quantized_linears.h"
#include "base/threads.h"
#include "model/memory_plan.h"

namespace relpos {
namespace {

constexpr int64_t kByteVocab = 256;

void CheckRequest(const model::Transformer& t, const ExperimentConfig& config,
                  const std::string& prompt, const GenerateOptions& o) {
  const model::ModelConfig& c = t.config();
  const std::string task = config.Get("train", "task");
  RELPOS_CHECK_ARG(task == "lm",
                   "generation needs a byte-level language model (train.task "
                   "lm); this checkpoint's task is "
                       << task);
  const model::ArchInfo& arch = model::Describe(c.arch);
  RELPOS_CHECK_ARG(arch.causal && !arch.source,
                   "generation needs a decoder model (model.arch decoder); "
                   "this checkpoint's arch is "
                       << model::ToString(c.arch));
  RELPOS_CHECK_ARG(c.vocab_size == kByteVocab,
                   "generation needs a byte vocabulary (model.vocab_size 256); "
                   "this checkpoint's is "
                       << c.vocab_size);
  RELPOS_CHECK_ARG(o.max_new_tokens >= 0 &&
                       o.max_new_tokens <= kMaxGenerateTokens,
                   "max_new_tokens must be in [0, " << kMaxGenerateTokens
                                                    << "] (got "
                                                    << o.max_new_tokens << ")");
  RELPOS_CHECK_ARG(std::isfinite(o.temperature) && o.temperature >= 0 &&
                       o.temperature <= 100,
                   "temperature must be in [0, 100] (got " << o.temperature
                                                           << ")");
  RELPOS_CHECK_ARG(o.top_k >= 0, "top_k must be >= 0 (got " << o.top_k << ")");
  RELPOS_CHECK_ARG(o.threads >= 0 && o.threads <= 1024,
                   "threads must be in [0, 1024] (got " << o.threads << ")");
  RELPOS_CHECK_ARG(
      model::ParseComputeType(o.compute_type, "compute_type") ==
              model::ComputeType::kFloat32 ||
          o.use_cache,
      "compute_type " << o.compute_type
                      << " runs the cached decoder only (use_cache = true; "
                         "the uncached reference is float32)");
  const int64_t n = static_cast<int64_t>(prompt.size());
  RELPOS_CHECK_ARG(n > 0,
                   "prompt is empty: a byte-level LM has no "
                   "beginning-of-text token, so it needs at least one byte "
                   "to continue");
  RELPOS_CHECK_ARG(n <= kMaxGenerateTokens, "prompt is "
                                                << n << " bytes, beyond the "
                                                << kMaxGenerateTokens
                                                << " accepted");
  if (model::HasLearnedInputTable(c)) {
    RELPOS_CHECK_ARG(n <= c.scheme.max_len,
                     "prompt is " << n
                                  << " bytes, longer than the model allows: "
                                     "learned positions end at max_len = "
                                  << c.scheme.max_len);
    RELPOS_CHECK_ARG(n + o.max_new_tokens <= c.scheme.max_len,
                     "max_new_tokens "
                         << o.max_new_tokens << " with the prompt's " << n
                         << " bytes exceeds max_len = " << c.scheme.max_len
                         << " (learned positions); at most "
                         << c.scheme.max_len - n << " new bytes fit");
  }
}

int32_t ChooseByte(const float* logits, const GenerateOptions& o, Rng& r) {
  return SampleToken(logits, kByteVocab, o.temperature, o.top_k, r);
}

// The thread count of `options` (0: the checkpoint's), checked memory for
// `sequences` generations of up to `capacity` tokens beside the loaded
// model, and OpenMP set to it.
void PrepareThreadsAndMemory(const Model& model, int64_t sequences,
                             int64_t capacity, const GenerateOptions& o) {
  const model::Transformer& t = *Internals(model).transformer;
  const int threads = o.threads > 0
                          ? o.threads
                          : std::stoi(model.config().Get("train", "threads"));
  // The cache (or, without it, the longest prefix's forward pass) must fit
  // beside the loaded model.
  model::MemoryPlan plan = model::PlanGeneration(t.config(), sequences,
                                                 capacity, o.use_cache, threads);
  plan.resident = model::PlanModel(t.config()).total();
  model::CheckMemory(plan);
  base::SetThreads(threads);
}

}  // namespace

GenerateResult Generate(Model& model, const std::string& prompt,
                        const GenerateOptions& options) {
  model::Transformer& t = *Internals(model).transformer;
  CheckRequest(t, model.config(), prompt, options);
  const auto start = std::chrono::steady_clock::now();
  GenerateResult result;
  result.prompt = prompt;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> tokens;
  for (unsigned char ch : prompt) tokens.push_back(ch);
  Rng rng(options.seed);
  auto emit = [&](int32_t byte) {
    tokens.push_back(byte);
    result.text.push_back(static_cast<char>(byte));
    if (options.on_token) options.on_token(static_cast<char>(byte));
  };
  const int64_t total = result.prompt_tokens + options.max_new_tokens;
  PrepareThreadsAndMemory(model, 1, total, options);
  if (options.use_cache && options.max_new_tokens > 0) {
    std::optional<model::QuantizedLinears> made;
    const model::QuantizedLinears* quantized =
        QuantizedFor(model, options.compute_type, &made);
    model::DecoderSession session(t, 1, total,
                                  quantized);
    std::vector<float> logits;
    session.Append({tokens}, &logits);
    for (int64_t i = 0; i < options.max_new_tokens; ++i) {
      emit(ChooseByte(logits.data(), options, rng));
      if (i + 1 < options.max_new_tokens) session.Step({tokens.back()}, &logits);
    }
  } else {
    model::Batch batch;
    batch.batch = 1;
    for (int64_t i = 0; i < options.max_new_tokens; ++i) {
      batch.length = static_cast<int64_t>(tokens.size());
      batch.tokens = tokens;
      batch.targets.assign(tokens.size(), -1);
      batch.lengths = {batch.length};
      t.Forward(batch, model::ForwardMode::kInference, nullptr);
      emit(ChooseByte(t.LastLogits().data() + (batch.length - 1) * kByteVocab,
                  options, rng));
    }
  }
  result.tokens = static_cast<int64_t>(result.text.size());
  result.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  result.tokens_per_second =
      result.seconds > 0 ? static_cast<double>(result.tokens) / result.seconds
                         : 0;
  return result;
}

std::vector<GenerateResult> GenerateBatch(
    Model& model, const std::vector<std::string>& prompts,
    const GenerateOptions& options) {
  model::Transformer& t = *Internals(model).transformer;
  const int64_t B = static_cast<int64_t>(prompts.size());
  RELPOS_CHECK_ARG(B >= 1 && B <= kMaxGenerateBatch,
                   "prompts must hold 1 to " << kMaxGenerateBatch
                                             << " prompts (got " << B << ")");
  RELPOS_CHECK_ARG(!options.on_token,
                   "on_token streams a single generation; a batch returns "
                   "its results when they are complete");
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    try {
      CheckRequest(t, model.config(), prompts[static_cast<size_t>(b)],
                   options);
    } catch (const InvalidArgument& e) {
      const std::string body = MessageBody(e);
      // Prompt problems name the prompt; the rest are the batch's.
      if (body.rfind("prompt", 0) != 0) throw;
      throw InvalidArgument("prompt " + std::to_string(b + 1) + " of " +
                            std::to_string(B) + ": " + body);
    }
    longest = std::max<int64_t>(
        longest, static_cast<int64_t>(prompts[static_cast<size_t>(b)].size()));
  }
  if (!options.use_cache) {  // the reference: each prompt on its own
    std::vector<GenerateResult> out;
    for (const std::string& p : prompts) out.push_back(Generate(model, p, options));
    return out;
  }
  const auto start = std::chrono::steady_clock::now();
  const int64_t total = longest + options.max_new_tokens;
  PrepareThreadsAndMemory(model, B, total, options);
  std::vector<GenerateResult> results(static_cast<size_t>(B));
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(B));
  // Each prompt draws from its own stream, seeded as Generate seeds it, so
  // its bytes do not depend on the other prompts of the batch.
  std::vector<Rng> rngs(static_cast<size_t>(B), Rng(options.seed));
  for (int64_t b = 0; b < B; ++b) {
    GenerateResult& r = results[static_cast<size_t>(b)];
    r.prompt = prompts[static_cast<size_t>(b)];
    r.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    for (unsigned char ch : r.prompt) {
      tokens[static_cast<size_t>(b)].push_back(ch);
    }
  }
  if (options.max_new_tokens > 0) {
    std::optional<model::QuantizedLinears> made;
    const model::QuantizedLinears* quantized =
        QuantizedFor(model, options.compute_type, &made);
    model::DecoderSession session(t, B, total,
                                  quantized);
    std::vector<float> logits;
    session.Append(tokens, &logits);
    std::vector<int32_t> last(static_cast<size_t>(B));
    for (int64_t i = 0; i < options.max_new_tokens; ++i) {
      for (int64_t b = 0; b < B; ++b) {
        const int32_t byte =
            ChooseByte(logits.data() + b * kByteVocab, options,
                       rngs[static_cast<size_t>(b)]);
        last[static_cast<size_t>(b)] = byte;
        results[static_cast<size_t>(b)].text.push_back(
            static_cast<char>(byte));
      }
      if (i + 1 < options.max_new_tokens) session.Step(last, &logits);
    }
  }
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  for (GenerateResult& r : results) {
    r.tokens = static_cast<int64_t>(r.text.size());
    r.seconds = seconds;
    r.tokens_per_second =
        seconds > 0 ? static_cast<double>(r.tokens) / seconds : 0;
  }
  return results;
}

}  // namespace relpos
