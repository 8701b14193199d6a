// `relpos generate DIR (--prompt TEXT | --batch FILE) [--max-new N]
// [--temperature T] [--top-k K] [--seed S] [--no-cache] [--json]`:
// continues a prompt with a byte-level LM checkpoint, streaming each byte to
// stdout as it is drawn, or every line of FILE as one prompt, a batch of
// --batch-size prompts decoded together (docs/generate.md).
#include <algorithm>
#include <cstddef>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "relpos/error.h"
#include "relpos/lab/files.h"
#include "relpos/lab/generate.h"
#include "relpos/lab/model.h"

namespace relpos::cli {
namespace {

struct GenerateFlags {
  std::string dir, prompt, batch;
  int64_t max_new = 256, top_k = 0, batch_size = 16;
  double temperature = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  std::string compute_type = "float32";
  bool no_cache = false, json = false;
};

// The library names GenerateOptions' fields; the user typed flags.
template <typename Call>
auto AsFlags(const GenerateFlags& f, Call call) {
  try {
    return call();
  } catch (const InvalidArgument& e) {
    std::string message = MessageBody(e);
    for (const auto& [field, flag] :
         {std::pair<std::string, std::string>{"max_new_tokens", "--max-new"},
          {"temperature", "--temperature"},
          {"top_k", "--top-k"},
          {"compute_type", "--compute-type"},
          {"prompt", "--prompt"}}) {
      if (message.rfind(field, 0) == 0) {
        message.replace(0, field.size(), flag);
        throw InvalidArgument(message);
      }
    }
    throw InvalidArgument(PathText(f.dir) + ": " + message);
  }
}

nlohmann::ordered_json JsonOf(const GenerateResult& r,
                              const GenerateOptions& options,
                              const GenerateFlags& f) {
  return {
      {"prompt", r.prompt},
      {"text", r.text},
      {"prompt_tokens", r.prompt_tokens},
      {"tokens", r.tokens},
      {"seconds", r.seconds},
      {"tokens_per_second", r.tokens_per_second},
      {"cache", options.use_cache},
      {"temperature", f.temperature},
      {"top_k", f.top_k},
      {"seed", f.seed},
  };
}

// Bytes that are not UTF-8 become U+FFFD in the JSON strings.
std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// --batch: every line a prompt (all checked before anything is printed), a
// batch of --batch-size at a time, each batch's results printed when it is
// done: the prompt and its continuation on one line, or one JSON object per
// prompt with its line number and batch.
void RunBatch(Model& model, const GenerateFlags& f,
              const GenerateOptions& options, std::ostream& out) {
  const std::vector<std::string> lines = ReadInputLines(f.batch, "--batch");
  // Every prompt is checked (as a batch of one that generates nothing)
  // before anything is printed.
  GenerateOptions check = options;
  check.max_new_tokens = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where =
        "--batch " + PathText(f.batch) + " line " + std::to_string(i + 1);
    RELPOS_CLI_CHECK(!lines[i].empty(), where << ": empty prompt");
    try {
      GenerateBatch(model, {lines[i]}, check);
    } catch (const InvalidArgument& e) {
      const std::string body = MessageBody(e);
      const std::string prefix = "prompt 1 of 1: ";
      if (body.rfind(prefix, 0) != 0) throw;
      throw InvalidArgument(where + ": " + body.substr(prefix.size()));
    }
  }
  const size_t step = static_cast<size_t>(f.batch_size);
  for (size_t b = 0; b < lines.size(); b += step) {
    const std::vector<std::string> batch(
        lines.begin() + static_cast<std::ptrdiff_t>(b),
        lines.begin() +
            static_cast<std::ptrdiff_t>(std::min(lines.size(), b + step)));
    const std::vector<GenerateResult> results =
        AsFlags(f, [&] { return GenerateBatch(model, batch, options); });
    for (size_t i = 0; i < results.size(); ++i) {
      if (f.json) {
        nlohmann::ordered_json j = JsonOf(results[i], options, f);
        j["line"] = b + i + 1;
        j["batch"] = results.size();
        out << Dump(j) << "\n";
      } else {
        out << results[i].prompt << results[i].text << "\n";
      }
    }
    CheckOutput(out);
  }
}

void RunGenerate(const GenerateFlags& f, std::ostream& out) {
  RELPOS_CLI_CHECK(HasCheckpoint(f.dir),
                   Quoted(f.dir) << " holds no checkpoint (no config.json; expected "
                            "a folder written by relpos train --task lm)");
  // int8: quantized once as it loads, without the float32 weights of those
  // layers (uncached decoding has no int8 path: its refusal comes below).
  Model model =
      Model::Load(f.dir, f.no_cache ? std::string("float32") : f.compute_type);
  GenerateOptions options;
  options.max_new_tokens = f.max_new;
  options.temperature = f.temperature;
  options.top_k = f.top_k;
  options.seed = f.seed;
  options.use_cache = !f.no_cache;
  options.threads = f.threads;
  options.compute_type = f.compute_type;
  if (!f.batch.empty()) {
    RunBatch(model, f, options, out);
    return;
  }
  if (!f.json) {
    // Stream: the prompt, then each new byte as soon as it is drawn. The
    // prompt goes out with the first byte (Generate has checked everything
    // by then), so an error leaves stdout empty.
    bool echoed = false;
    auto echo = [&] {
      if (!echoed) out << f.prompt;
      echoed = true;
    };
    options.on_token = [&](char byte) {
      echo();
      out.put(byte);
      CheckOutput(out);  // stops generating at the first write error
    };
    AsFlags(f, [&] { return Generate(model, f.prompt, options); });
    echo();
    out << "\n";
    return;
  }
  const GenerateResult r =
      AsFlags(f, [&] { return Generate(model, f.prompt, options); });
  out << Dump(JsonOf(r, options, f)) << "\n";
}

}  // namespace

void AddGenerateVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* sub = app.add_subcommand(
      "generate", "Continue a prompt with a byte-level LM checkpoint");
  sub->add_option("dir", flags->dir,
                  "Checkpoint folder (from relpos train --task lm)")
      ->required();
  CLI::Option* prompt = sub->add_option(
      "--prompt", flags->prompt, "Text to continue (at least one byte)");
  CLI::Option* batch = sub->add_option(
      "--batch", flags->batch,
      "File of prompts, one per line (- for standard input), generated "
      "--batch-size at a time; prints each prompt and its continuation on "
      "one line");
  prompt->excludes(batch);
  batch->excludes(prompt);
  sub->add_option("--batch-size", flags->batch_size,
                  "With --batch: prompts decoded together")
      ->check(CLI::Range(int64_t{1}, kMaxGenerateBatch))
      ->capture_default_str();
  sub->add_option("--max-new", flags->max_new, "Bytes to generate")
      ->check(CLI::Range(int64_t{0}, kMaxGenerateTokens));
  sub->add_option("--temperature", flags->temperature,
                  "Sampling temperature; 0 = greedy (the most likely byte)")
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option("--top-k", flags->top_k,
                  "Sample among the K most likely bytes (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{256}));
  AddSeedOption(sub, "--seed", &flags->seed,
                "Seed of the sampling stream (same seed, same text)");
  sub->add_option("--threads", flags->threads,
                  "OpenMP threads (one is fastest for small models)")
      ->check(CLI::Range(1, 1024))
      ->default_str("the checkpoint's, 1 unless it was trained with more");
  AddComputeTypeOption(sub, &flags->compute_type);
  sub->add_flag("--no-cache", flags->no_cache,
                "Recompute the whole prefix for every byte (no key/value "
                "cache; slow, for comparison)");
  sub->add_flag("--json", flags->json,
                "Print one JSON object (prompt, text, tokens, seconds, "
                "tokens_per_second; with --batch one per prompt, with its "
                "line and batch) instead of streaming the text");
  sub->callback([flags, prompt, batch, &out] {
    RELPOS_CLI_CHECK(prompt->count() + batch->count() == 1,
                     "give --prompt TEXT or --batch FILE");
    RunGenerate(*flags, out);
  });
}

}  // namespace relpos::cli
