#include "cli/experiment_flags.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "io/file_io.h"
#include "train/checkpoint.h"

namespace relpos::cli {

using model::ModelConfig;
using train::TrainConfig;

void ApplyTerms(const std::string& terms, ModelConfig* c) {
  if (terms == "both") {
    c->key_term = c->value_term = true;
  } else if (terms == "key") {
    c->key_term = true;
    c->value_term = false;
  } else if (terms == "value") {
    c->key_term = false;
    c->value_term = true;
  } else if (terms == "neither") {
    c->key_term = c->value_term = false;
  } else {
    RELPOS_THROW(
        InvalidArgument,
        "--terms must be both, key, value or neither (got '" << terms << "')");
  }
}

std::string TermsName(const ModelConfig& c) {
  if (c.key_term && c.value_term) return "both";
  if (c.key_term) return "key";
  if (c.value_term) return "value";
  return "neither";
}

std::string PositionLabel(const ModelConfig& c) {
  std::string s = model::ToString(c.position);
  if (c.position == model::PositionScheme::kRelative) {
    s += " (k=" + std::to_string(c.max_distance);
    if (TermsName(c) != "both") s += ", " + TermsName(c) + " term";
    if (TermsName(c) == "neither") s += "s";
    s += ")";
  }
  return s;
}

template <typename T>
CLI::Option* ExperimentFlags::Bind(
    CLI::App* sub, const std::string& name, T* storage, const std::string& help,
    std::function<void(ModelConfig&, TrainConfig&)> apply) {
  CLI::Option* opt = sub->add_option(name, *storage, help);
  appliers_.push_back({opt, std::move(apply)});
  return opt;
}

void ExperimentFlags::Add(CLI::App* sub, FlagGroups groups) {
  const auto i64 = [](int64_t lo, int64_t hi) { return CLI::Range(lo, hi); };
  Bind(sub, "--task", &task_,
       "Task: a synthetic task (see docs/tasks.md) or 'lm' (byte-level "
       "language modelling)",
       [this](ModelConfig&, TrainConfig& t) { t.data.task = task_; });
  Bind(sub, "--train-lengths", &train_lengths_,
       "Range A-B of training lengths (task size parameter)",
       [this](ModelConfig&, TrainConfig& t) {
         const auto [lo, hi] =
             train::ParseLengthRange(train_lengths_, "--train-lengths");
         t.train_min_length = lo;
         t.train_max_length = hi;
       });
  if (groups.position) {
    Bind(sub, "--position", &position_, "none|sinusoidal|learned|relative",
         [this](ModelConfig& m, TrainConfig&) {
           m.position = model::ParsePositionScheme(position_);
         });
    Bind(sub, "--max-distance,-k", &max_distance_,
         "Clipping distance k of relative positions",
         [this](ModelConfig& m, TrainConfig&) {
           m.max_distance = max_distance_;
         })
        ->check(i64(0, int64_t{1} << 16));
    Bind(sub, "--terms", &terms_,
         "Relative terms: both|key|value|neither (Shaw et al.'s ablation)",
         [this](ModelConfig& m, TrainConfig&) { ApplyTerms(terms_, &m); });
    sub->add_flag(
        "--per-head-tables", per_head_,
        "One relative table pair per head (default: shared per layer)");
    appliers_.push_back({sub->get_option("--per-head-tables"),
                         [this](ModelConfig& m, TrainConfig&) {
                           m.per_head_tables = per_head_;
                         }});
    Bind(sub, "--rel-init-scale", &rel_init_scale_,
         "Multiplier on the Xavier std of the relative tables",
         [this](ModelConfig& m, TrainConfig&) {
           m.rel_init_scale = rel_init_scale_;
         });
  }
  arch_option_ =
      Bind(sub, "--arch", &arch_,
           "encoder|decoder (default: encoder for tasks, decoder for lm)",
           [this](ModelConfig& m, TrainConfig&) {
             m.arch = model::ParseArch(arch_);
           });
  Bind(sub, "--d-model", &d_model_, "Model width",
       [this](ModelConfig& m, TrainConfig&) { m.d_model = d_model_; })
      ->check(i64(1, 1 << 16));
  Bind(sub, "--heads", &heads_, "Attention heads",
       [this](ModelConfig& m, TrainConfig&) { m.heads = heads_; })
      ->check(i64(1, 1 << 12));
  Bind(sub, "--layers", &layers_, "Transformer blocks",
       [this](ModelConfig& m, TrainConfig&) { m.layers = layers_; })
      ->check(i64(1, 256));
  Bind(sub, "--d-ff", &d_ff_, "Feed-forward width",
       [this](ModelConfig& m, TrainConfig&) { m.d_ff = d_ff_; })
      ->check(i64(1, 1 << 18));
  Bind(sub, "--max-len", &max_len_,
       "Rows of the learned absolute position table",
       [this](ModelConfig& m, TrainConfig&) { m.max_len = max_len_; })
      ->check(i64(1, 1 << 20));
  Bind(sub, "--dropout", &dropout_, "Dropout probability in [0, 1)",
       [this](ModelConfig& m, TrainConfig&) { m.dropout = dropout_; })
      ->check(CLI::Range(0.0, 0.99));
  Bind(sub, "--steps", &steps_, "Optimiser updates",
       [this](ModelConfig&, TrainConfig& t) { t.steps = steps_; })
      ->check(i64(1, 1'000'000'000));
  Bind(sub, "--batch-size", &batch_size_, "Sequences per update",
       [this](ModelConfig&, TrainConfig& t) { t.batch_size = batch_size_; })
      ->check(i64(1, 65536));
  Bind(sub, "--lr", &lr_, "Peak learning rate",
       [this](ModelConfig&, TrainConfig& t) { t.lr = lr_; })
      ->check(CLI::Range(1e-12, 10.0));
  Bind(sub, "--warmup-steps", &warmup_, "Linear warm-up updates",
       [this](ModelConfig&, TrainConfig& t) { t.warmup_steps = warmup_; })
      ->check(i64(0, 1'000'000'000));
  Bind(sub, "--min-lr-ratio", &min_lr_ratio_,
       "Final learning rate as a fraction of the peak (cosine floor)",
       [this](ModelConfig&, TrainConfig& t) { t.min_lr_ratio = min_lr_ratio_; })
      ->check(CLI::Range(0.0, 1.0));
  Bind(sub, "--beta1", &beta1_, "AdamW beta1",
       [this](ModelConfig&, TrainConfig& t) { t.adamw.beta1 = beta1_; });
  Bind(sub, "--beta2", &beta2_, "AdamW beta2",
       [this](ModelConfig&, TrainConfig& t) { t.adamw.beta2 = beta2_; });
  Bind(sub, "--eps", &eps_, "AdamW epsilon",
       [this](ModelConfig&, TrainConfig& t) { t.adamw.eps = eps_; });
  Bind(sub, "--weight-decay", &weight_decay_, "AdamW decoupled weight decay",
       [this](ModelConfig&, TrainConfig& t) {
         t.adamw.weight_decay = weight_decay_;
       });
  Bind(sub, "--clip-norm", &clip_norm_, "Global gradient-norm clip (0: off)",
       [this](ModelConfig&, TrainConfig& t) { t.clip_norm = clip_norm_; })
      ->check(CLI::Range(0.0, 1e30));
  Bind(sub, "--seed", &seed_, "Seed of initialisation, data order and dropout",
       [this](ModelConfig&, TrainConfig& t) { t.seed = seed_; });
  Bind(sub, "--threads", &threads_,
       "OpenMP threads (results are reproducible per seed and thread count)",
       [this](ModelConfig&, TrainConfig& t) { t.threads = threads_; })
      ->check(CLI::Range(1, 1024));
  Bind(sub, "--checkpoint-every", &checkpoint_every_,
       "Updates between checkpoints (0: only at the end)",
       [this](ModelConfig&, TrainConfig& t) {
         t.checkpoint_every = checkpoint_every_;
       })
      ->check(i64(0, 1'000'000'000));
  Bind(sub, "--corpus", &corpus_,
       "Task lm: a text file (default: generated text)",
       [this](ModelConfig&, TrainConfig& t) { t.data.corpus_path = corpus_; });
  Bind(sub, "--corpus-bytes", &corpus_bytes_,
       "Task lm: size of the generated text",
       [this](ModelConfig&, TrainConfig& t) {
         t.data.corpus_bytes = corpus_bytes_;
       })
      ->check(i64(100, int64_t{1} << 30));
  Bind(sub, "--corpus-seed", &corpus_seed_,
       "Task lm: seed of the generated text",
       [this](ModelConfig&, TrainConfig& t) {
         t.data.corpus_seed = corpus_seed_;
       });
  if (groups.config_file) {
    config_option_ = sub->add_option(
        "--config", config_file_,
        "JSON file {\"model\": {...}, \"train\": {...}} (a checkpoint's "
        "config.json works); flags given on the command line win");
  }
  sub->add_option("--progress", progress_,
                  "Progress display: auto (bar on a terminal, log lines "
                  "otherwise), bar, lines or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
}

train::ProgressMode ExperimentFlags::progress_mode() const {
  if (progress_ == "bar") return train::ProgressMode::kTerminal;
  if (progress_ == "lines") return train::ProgressMode::kLines;
  if (progress_ == "none") return train::ProgressMode::kQuiet;
  return train::ProgressMode::kAuto;
}

bool ExperimentFlags::AnyGiven() const {
  if (config_option_ && config_option_->count() > 0) return true;
  for (const Applier& a : appliers_) {
    if (a.option->count() > 0) return true;
  }
  return false;
}

std::vector<std::string> ExperimentFlags::GivenNames() const {
  std::vector<std::string> names;
  auto add = [&](const CLI::Option* o) {
    if (o && o->count() > 0) names.push_back(o->get_name());
  };
  add(config_option_);
  for (const Applier& a : appliers_) add(a.option);
  return names;
}

void ExperimentFlags::Build(const ModelConfig& model_defaults,
                            const TrainConfig& train_defaults,
                            ModelConfig* model, TrainConfig* train) const {
  ModelConfig m = model_defaults;
  TrainConfig t = train_defaults;
  bool arch_set = arch_option_ && arch_option_->count() > 0;
  bool config_warmup_set = false;
  const int64_t default_warmup = t.warmup_steps;
  if (config_option_ && config_option_->count() > 0) {
    // Untrusted file: size-capped read, strict parse; unknown sections and
    // fields are errors (a typo must not be silently ignored).
    const std::string text =
        io::ReadFileBounded(config_file_, int64_t{1} << 20);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      RELPOS_THROW(FormatError, "--config " << config_file_
                                            << ": not valid JSON (" << e.what()
                                            << ")");
    }
    if (!j.is_object()) {
      RELPOS_THROW(FormatError,
                   "--config " << config_file_ << ": must hold a JSON object");
    }
    static const std::set<std::string> known = {"model",   "train", "format",
                                                "version", "state", "files"};
    for (const auto& [key, value] : j.items()) {
      if (!known.count(key)) {
        RELPOS_THROW(FormatError, "--config " << config_file_
                                              << ": unknown section '" << key
                                              << "' (expected model, train)");
      }
    }
    try {
      if (j.contains("model")) {
        if (!j["model"].is_object()) {
          RELPOS_THROW(FormatError, "section 'model' must be an object");
        }
        nlohmann::json merged = model::ToJson(m);
        merged["vocab_size"] = 1;  // placeholder: the task decides it below
        merged.update(j["model"]);
        arch_set = arch_set || j["model"].contains("arch");
        m = model::ModelConfigFromJson(merged);
      }
      if (j.contains("train")) {
        if (!j["train"].is_object()) {
          RELPOS_THROW(FormatError, "section 'train' must be an object");
        }
        nlohmann::json merged = train::ToJson(t);
        merged.update(j["train"]);
        config_warmup_set = j["train"].contains("warmup_steps");
        // An unset warm-up is resolved below (after the flags), so the
        // default must not fail validation against a short `steps` here.
        if (!config_warmup_set) merged["warmup_steps"] = 0;
        t = train::TrainConfigFromJson(merged);
      }
    } catch (const FormatError& e) {
      std::string msg = e.what();
      if (msg.rfind("relpos: ", 0) == 0) msg.erase(0, 8);
      RELPOS_THROW(FormatError, "--config " << config_file_ << ": " << msg);
    }
  }
  bool warmup_set = false;
  for (const Applier& a : appliers_) {
    if (a.option->count() > 0) a.apply(m, t);
  }
  for (const std::string& name : GivenNames())
    warmup_set |= name == "--warmup-steps";
  warmup_set |= config_warmup_set;
  // Unless set, the warm-up is the default's (100 updates) but at most a
  // tenth of the run, so that `--steps 50` works without more flags.
  if (!warmup_set) t.warmup_steps = std::min(default_warmup, t.steps / 10);
  train::Validate(t);
  // The data decides the vocabulary and, unless set, the architecture.
  const std::unique_ptr<train::DataSource> data = train::MakeDataSource(t.data);
  m.vocab_size = data->vocab_size();
  if (!arch_set) m.arch = data->default_arch();
  model::Validate(m);
  train::CheckModelAndData(m, t, *data);
  *model = m;
  *train = t;
}

void CheckOutDir(const std::string& out, bool refuse_checkpoint) {
  namespace fs = std::filesystem;
  RELPOS_CHECK_ARG(!out.empty(), "--out must not be empty");
  std::error_code ec;
  const fs::path p(out);
  if (fs::exists(p, ec)) {
    RELPOS_CHECK_ARG(fs::is_directory(p, ec),
                     "--out '" << out << "' exists and is not a folder");
    RELPOS_CHECK_ARG(!refuse_checkpoint || !train::HasCheckpoint(out),
                     "--out '"
                         << out
                         << "' already holds a checkpoint (continue it with "
                            "--resume, or choose another folder)");
    RELPOS_CHECK_ARG(access(out.c_str(), W_OK | X_OK) == 0,
                     "--out '" << out << "' is not writable");
    return;
  }
  fs::path parent = p.parent_path();
  if (parent.empty()) parent = ".";
  RELPOS_CHECK_ARG(fs::is_directory(parent, ec),
                   "--out '" << out << "': parent folder '" << parent.string()
                             << "' does not exist");
  RELPOS_CHECK_ARG(access(parent.c_str(), W_OK | X_OK) == 0,
                   "--out '" << out << "': parent folder '" << parent.string()
                             << "' is not writable");
}

}  // namespace relpos::cli
