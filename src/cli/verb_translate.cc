// `relpos translate DIR [--beam N] [--max-len-ratio R] [--max-length N]
// [--input FILE|-]
// [--json]`: one translation per input line with a checkpoint of task
// translate (docs/translation.md).
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "relpos/lab/files.h"
#include "relpos/lab/model.h"
#include "relpos/lab/translation.h"

namespace relpos::cli {
namespace {

struct TranslateFlags {
  std::string dir, input = "-", length_penalty = "wu";
  int64_t beam = 4, batch_size = 16, max_length = 1024;
  double max_len_ratio = 2.0, alpha = 0.6;
  int threads = 0;
  std::string compute_type = "float32";
  bool json = false;
};

nlohmann::ordered_json JsonOf(int64_t line, const std::string& source,
                              const TextTranslation& t, double seconds,
                              int64_t batch) {
  return {{"line", line},
          {"source", source},
          {"translation", t.text},
          {"tokens", t.best.tokens},
          {"source_tokens", t.source_tokens},
          {"log_prob", t.best.log_prob},
          {"score", t.best.score},
          {"ended_by_eos", t.best.ended_by_eos},
          {"batch", batch},
          {"batch_seconds", seconds}};
}

void RunTranslate(const TranslateFlags& f, std::ostream& out) {
  // int8: quantized once as it loads, without the float32 weights of those
  // layers.
  Translator translator = Translator::Load(f.dir, f.compute_type);
  const std::vector<std::string> lines = ReadInputLines(f.input, "--input");
  // Every line is checked before anything is printed: bad input gives one
  // error and no partial output.
  std::vector<std::vector<int32_t>> sources;
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      sources.push_back(translator.Encode(lines[i]));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("--input " + PathText(f.input) + " line " +
                            std::to_string(i + 1) + ": " + MessageBody(e));
    }
  }
  DecodeOptions options;
  options.beam_size = f.beam;
  options.length_penalty = f.length_penalty;
  options.alpha = f.alpha;
  options.max_length_ratio = f.max_len_ratio;
  options.max_length = f.max_length;
  options.threads = f.threads;
  options.compute_type = f.compute_type;
  const auto start = std::chrono::steady_clock::now();
  for (size_t b = 0; b < sources.size(); b += f.batch_size) {
    const size_t e = std::min(sources.size(), b + f.batch_size);
    const std::vector<std::vector<int32_t>> batch(sources.begin() + b,
                                                  sources.begin() + e);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<TextTranslation> results =
        translator.TranslateIds(batch, options);
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - t0)
                               .count();
    for (size_t i = 0; i < results.size(); ++i) {
      if (f.json) {
        out << JsonOf(static_cast<int64_t>(b + i + 1), lines[b + i],
                      results[i], seconds, static_cast<int64_t>(e - b))
                   .dump()
            << "\n";
      } else {
        out << results[i].text << "\n";
      }
    }
    out.flush();
  }
  const double total = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  std::cerr << "translate: " << lines.size() << " lines, beam " << f.beam
            << ", " << total << " s\n";
}

}  // namespace

void AddTranslateVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<TranslateFlags>();
  CLI::App* sub = app.add_subcommand(
      "translate",
      "Translate text, one line per line, with a checkpoint of task "
      "translate");
  sub->add_option("dir", flags->dir, "Checkpoint folder (from relpos train)")
      ->required();
  sub->add_option("--input", flags->input,
                  "File of source lines, or - for standard input")
      ->capture_default_str();
  sub->add_option("--beam", flags->beam, "Beam size (1: greedy)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  sub->add_option("--max-len-ratio", flags->max_len_ratio,
                  "At most ceil(R * source pieces) target pieces")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--max-length", flags->max_length,
                  "And at most this many target pieces")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--length-penalty", flags->length_penalty,
                  "wu ((5 + |y|) / 6)^alpha, power |y|^alpha, or none")
      ->check(CLI::IsMember({"wu", "power", "none"}))
      ->capture_default_str();
  sub->add_option("--alpha", flags->alpha, "Length penalty exponent")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  sub->add_option("--batch-size", flags->batch_size,
                  "Lines decoded together (each batch is printed when done)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  sub->add_option("--threads", flags->threads,
                  "OpenMP threads (0: the checkpoint's training threads)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  AddComputeTypeOption(sub, &flags->compute_type);
  sub->add_flag("--json", flags->json,
                "One JSON object per line: translation, tokens, scores, "
                "timings");
  sub->callback([flags, &out] { RunTranslate(*flags, out); });
}

}  // namespace relpos::cli
