// relpos::Generate: byte-level generation with model::DecoderSession (the
// key/value cache) or by recomputing the prefix with the model's inference
// forward.
#include "relpos/lab/generate.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "api/internal.h"
#include "api/sampling.h"
#include "core/check.h"
#include "core/rng.h"
#include "model/decoder_session.h"
#include "model/positions.h"
#include "train/determinism.h"
#include "train/memory_plan.h"

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
  RELPOS_CHECK_ARG(c.arch == model::Arch::kDecoder,
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
    RELPOS_CHECK_ARG(n <= c.max_len,
                     "prompt is " << n
                                  << " bytes, longer than the model allows: "
                                     "learned positions end at max_len = "
                                  << c.max_len);
    RELPOS_CHECK_ARG(n + o.max_new_tokens <= c.max_len,
                     "max_new_tokens "
                         << o.max_new_tokens << " with the prompt's " << n
                         << " bytes exceeds max_len = " << c.max_len
                         << " (learned positions); at most "
                         << c.max_len - n << " new bytes fit");
  }
}

}  // namespace

GenerateResult Generate(Model& model, const std::string& prompt,
                        const GenerateOptions& options) {
  model::Transformer& t = *model.impl().transformer;
  CheckRequest(t, model.config(), prompt, options);
  const auto start = std::chrono::steady_clock::now();
  GenerateResult result;
  result.prompt = prompt;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> tokens;
  for (unsigned char ch : prompt) tokens.push_back(ch);
  Rng rng(options.seed);
  auto choose = [](const float* logits, const GenerateOptions& o, Rng& r) {
    return SampleToken(logits, kByteVocab, o.temperature, o.top_k, r);
  };
  auto emit = [&](int32_t byte) {
    tokens.push_back(byte);
    result.text.push_back(static_cast<char>(byte));
    if (options.on_token) options.on_token(static_cast<char>(byte));
  };
  const int64_t total = result.prompt_tokens + options.max_new_tokens;
  const int threads = options.threads > 0
                          ? options.threads
                          : std::stoi(model.config().Get("train", "threads"));
  // The cache (or, without it, the longest prefix's forward pass) must fit
  // beside the loaded model.
  train::MemoryPlan plan =
      train::PlanGeneration(t.config(), total, options.use_cache, threads);
  plan.resident = train::PlanModel(t.config()).total();
  train::CheckMemory(plan);
  train::SetThreads(threads);
  if (options.use_cache && options.max_new_tokens > 0) {
    model::DecoderSession session(t, 1, total);
    std::vector<float> logits;
    session.Append({tokens}, &logits);
    for (int64_t i = 0; i < options.max_new_tokens; ++i) {
      emit(choose(logits.data(), options, rng));
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
      emit(choose(t.LastLogits().data() + (batch.length - 1) * kByteVocab,
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

}  // namespace relpos
