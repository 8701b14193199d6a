#include "train/checkpoint.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <system_error>

#include "core/check.h"
#include "io/file_io.h"

namespace relpos::train {

namespace fs = std::filesystem;

namespace {

// config.json is a few kilobytes; anything far larger is not ours.
constexpr int64_t kMaxConfigBytes = int64_t{1} << 20;

// model-00000123.safetensors, optimizer-00000123.2.safetensors,
// signal-00000123.json
const std::regex& FileNamePattern() {
  static const std::regex re(
      R"(((model|optimizer)-[0-9]{8}(\.[0-9]{1,6})?\.safetensors)|)"
      R"((signal-[0-9]{8}(\.[0-9]{1,6})?\.json))");
  return re;
}

// The signal file is small next to the model; far larger is not ours.
constexpr int64_t kMaxSignalBytes = int64_t{1} << 30;

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx",
                static_cast<unsigned long long>(v));
  return buf;
}

bool ParseHex(const std::string& s, uint64_t* v) {
  if (s.size() != 18 || s[0] != '0' || s[1] != 'x') return false;
  uint64_t x = 0;
  for (size_t i = 2; i < s.size(); ++i) {
    const char c = s[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return false;
    x = (x << 4) | static_cast<uint64_t>(d);
  }
  *v = x;
  return true;
}

std::string FileName(const char* kind, int64_t step, int suffix,
                     const char* extension = "safetensors") {
  char buf[64];
  if (suffix == 0) {
    std::snprintf(buf, sizeof buf, "%s-%08lld.%s", kind,
                  static_cast<long long>(step), extension);
  } else {
    std::snprintf(buf, sizeof buf, "%s-%08lld.%d.%s", kind,
                  static_cast<long long>(step), suffix, extension);
  }
  return buf;
}

// Files the current config.json of `dir` refers to (best effort: an
// unreadable or malformed config refers to nothing).
std::set<std::string> ReferencedFiles(const std::string& dir) {
  std::set<std::string> names;
  try {
    const std::string text = io::ReadFileBounded(
        (fs::path(dir) / kCheckpointConfigFile).string(), kMaxConfigBytes);
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const char* key : {"model", "optimizer", "signal", "vocabulary"}) {
      if (j.at("files").contains(key) && j["files"][key].is_string()) {
        names.insert(j["files"][key].get<std::string>());
      }
    }
  } catch (const std::exception&) {
  }
  return names;
}

[[noreturn]] void Bad(const std::string& source, const std::string& problem) {
  RELPOS_THROW(FormatError, source << ": " << problem);
}

void CheckTensors(
    const std::vector<io::NamedTensor>& got,
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& want,
    const std::string& source) {
  if (got.size() != want.size()) {
    Bad(source, "holds " + std::to_string(got.size()) +
                    " tensors, the model config implies " +
                    std::to_string(want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].name != want[i].first) {
      Bad(source, "tensor #" + std::to_string(i) + " is '" + got[i].name +
                      "', expected '" + want[i].first + "'");
    }
    if (got[i].shape != want[i].second) {
      auto fmt = [](const std::vector<int64_t>& s) {
        std::string r = "[";
        for (size_t k = 0; k < s.size(); ++k)
          r += (k ? ", " : "") + std::to_string(s[k]);
        return r + "]";
      };
      Bad(source, "tensor '" + got[i].name + "' has shape " +
                      fmt(got[i].shape) + ", the model config implies " +
                      fmt(want[i].second));
    }
    for (float x : got[i].data) {
      if (!std::isfinite(x))
        Bad(source, "tensor '" + got[i].name + "' holds NaN or Inf");
    }
  }
}

void CheckStepMetadata(const io::SafetensorsFile& f, const char* format,
                       int64_t step, const std::string& source) {
  auto it = f.metadata.find("format");
  if (it == f.metadata.end() || it->second != format) {
    Bad(source, std::string("metadata 'format' must be '") + format + "'");
  }
  it = f.metadata.find("step");
  if (it == f.metadata.end() || it->second != std::to_string(step)) {
    Bad(source, "metadata 'step' does not match config.json's step " +
                    std::to_string(step) + " (files from different saves?)");
  }
}

// The vocabulary never changes during a run, so it keeps one name; it is
// rewritten (atomically, before config.json) only when the folder holds
// other bytes, for example a run started over in the same folder.
void WriteVocabulary(const fs::path& d, const std::string& bytes) {
  const std::string path = (d / kVocabularyFile).string();
  std::error_code ec;
  if (fs::is_regular_file(path, ec) &&
      fs::file_size(path, ec) == bytes.size()) {
    try {
      if (io::ReadFileBounded(path, kMaxVocabularyBytes) == bytes) return;
    } catch (const Error&) {
    }
  }
  io::AtomicWriteFile(path, bytes);
}

}  // namespace

bool HasCheckpoint(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / kCheckpointConfigFile, ec);
}

std::vector<io::NamedTensor> GetParameters(const model::Transformer& model) {
  std::vector<io::NamedTensor> out;
  for (const model::Parameter& p : model.parameters()) {
    out.push_back({p.name, p.shape, p.value});
  }
  return out;
}

void SetParameters(const std::vector<io::NamedTensor>& tensors,
                   const std::string& source, model::Transformer& model) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> want;
  for (const model::Parameter& p : model.parameters())
    want.emplace_back(p.name, p.shape);
  CheckTensors(tensors, want, source);
  auto& params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    std::copy(tensors[i].data.begin(), tensors[i].data.end(),
              params[i].value.begin());
  }
}

void WriteCheckpoint(const std::string& dir, const Checkpoint& ck) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::exists(d, ec)) {
    if (!fs::create_directory(d, ec) || ec) {
      RELPOS_THROW(IoError, "cannot create checkpoint folder '"
                                << dir << "': " << ec.message());
    }
  } else if (!fs::is_directory(d, ec)) {
    RELPOS_THROW(IoError, "'" << dir << "' exists and is not a folder");
  }

  // New names that the current config.json does not refer to, so the
  // complete old set survives until config.json points at the new one.
  const std::set<std::string> referenced = ReferencedFiles(dir);
  int suffix = 0;
  while (referenced.count(FileName("model", ck.state.step, suffix)) ||
         referenced.count(FileName("optimizer", ck.state.step, suffix)) ||
         referenced.count(FileName("signal", ck.state.step, suffix, "json"))) {
    ++suffix;
  }
  const std::string model_file = FileName("model", ck.state.step, suffix);
  const std::string opt_file = FileName("optimizer", ck.state.step, suffix);
  const std::string signal_file =
      ck.signal ? FileName("signal", ck.state.step, suffix, "json") : "";
  const std::string step = std::to_string(ck.state.step);

  io::WriteSafetensors((d / model_file).string(), ck.parameters,
                       {{"format", "relpos-model"}, {"step", step}});
  io::WriteSafetensors((d / opt_file).string(), ck.optimizer,
                       {{"format", "relpos-adamw"}, {"step", step}});
  if (ck.signal) {
    io::AtomicWriteFile((d / signal_file).string(),
                        EncodeSignalStats(*ck.signal, ck.state.step));
  }
  const std::string& vocabulary = ck.train_config.data.vocabulary;
  if (!vocabulary.empty()) WriteVocabulary(d, vocabulary);

  nlohmann::json j = {
      {"format", kCheckpointFormat},
      {"version", kCheckpointVersion},
      {"model", model::ToJson(ck.model_config)},
      {"train", ToJson(ck.train_config)},
      {"state",
       {{"step", ck.state.step},
        {"data_rng", Hex(ck.state.data_rng)},
        {"dropout_rng", Hex(ck.state.dropout_rng)}}},
      {"files", {{"model", model_file}, {"optimizer", opt_file}}},
  };
  if (ck.signal) j["files"]["signal"] = signal_file;
  if (!vocabulary.empty()) j["files"]["vocabulary"] = kVocabularyFile;
  // The commit point: from here on the new set is the checkpoint.
  io::AtomicWriteFile((d / kCheckpointConfigFile).string(), j.dump(2) + "\n");

  // Garbage-collect older tensor files (only names this module writes).
  for (const auto& entry : fs::directory_iterator(d, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == model_file || name == opt_file || name == signal_file) {
      continue;
    }
    if (std::regex_match(name, FileNamePattern())) fs::remove(entry.path(), ec);
  }
}

// Over 100 lines on purpose: one straight sequence of checks of an untrusted
// folder (config.json, state, file names, tensors), each failing with its own
// message; split up, the order of the checks would be harder to audit.
Checkpoint ReadCheckpoint(const std::string& dir, bool with_optimizer,
                          bool with_signal) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::exists(d, ec)) {
    RELPOS_THROW(IoError, "checkpoint folder '" << dir << "' does not exist");
  }
  if (!fs::is_directory(d, ec)) {
    RELPOS_THROW(IoError, "checkpoint '" << dir << "' is not a folder");
  }
  const fs::path config_path = d / kCheckpointConfigFile;
  if (!fs::exists(config_path, ec)) {
    RELPOS_THROW(IoError, "'" << dir << "' holds no checkpoint (no "
                              << kCheckpointConfigFile << ")");
  }
  const std::string source = config_path.string();
  const std::string text = io::ReadFileBounded(source, kMaxConfigBytes);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Bad(source, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) Bad(source, "must hold a JSON object");
  for (const auto& [key, value] : j.items()) {
    static const std::set<std::string> known = {"format", "version", "model",
                                                "train",  "state",   "files"};
    if (!known.count(key)) Bad(source, "unknown field '" + key + "'");
  }
  if (!j.contains("format") || j["format"] != kCheckpointFormat) {
    Bad(source,
        std::string("field 'format' must be \"") + kCheckpointFormat + "\"");
  }
  if (!j.contains("version") || j["version"] != kCheckpointVersion) {
    Bad(source, "unsupported checkpoint version (this relpos reads version " +
                    std::to_string(kCheckpointVersion) + ")");
  }
  for (const char* key : {"model", "train", "state", "files"}) {
    if (!j.contains(key) || !j[key].is_object()) {
      Bad(source, std::string("field '") + key + "' must be an object");
    }
  }

  Checkpoint ck;
  try {
    ck.model_config = model::ModelConfigFromJson(j["model"]);
    ck.train_config = TrainConfigFromJson(j["train"]);
  } catch (const Error& e) {
    Bad(source, MessageBody(e));
  }

  const nlohmann::json& st = j["state"];
  if (!st.contains("step") || !st["step"].is_number_integer() ||
      st["step"].get<int64_t>() < 0 ||
      st["step"].get<int64_t>() > ck.train_config.steps) {
    Bad(source, "state.step must be an integer in [0, train.steps]");
  }
  ck.state.step = st["step"].get<int64_t>();
  for (const auto& [key, out] :
       {std::pair{"data_rng", &ck.state.data_rng},
        std::pair{"dropout_rng", &ck.state.dropout_rng}}) {
    if (!st.contains(key) || !st[key].is_string() ||
        !ParseHex(st[key].get<std::string>(), out)) {
      Bad(source, std::string("state.") + key +
                      " must be a string \"0x\" + 16 lowercase hex digits");
    }
  }
  if (st.size() != 3) Bad(source, "field 'state' has unknown members");

  const nlohmann::json& files = j["files"];
  std::string names[2];
  const char* kinds[2] = {"model", "optimizer"};
  for (int k = 0; k < 2; ++k) {
    if (!files.contains(kinds[k]) || !files[kinds[k]].is_string()) {
      Bad(source, std::string("files.") + kinds[k] + " must be a file name");
    }
    names[k] = files[kinds[k]].get<std::string>();
    // Plain names of our own pattern only: a crafted config cannot point
    // outside the folder ("../x", "/etc/...").
    if (!std::regex_match(names[k], FileNamePattern()) ||
        names[k].rfind(kinds[k], 0) != 0) {
      Bad(source, std::string("files.") + kinds[k] + " '" + names[k] +
                      "' is not a checkpoint file name");
    }
  }

  // Expected names and shapes: what a model with this config holds.
  const model::Transformer reference(ck.model_config);
  std::vector<std::pair<std::string, std::vector<int64_t>>> want;
  for (const model::Parameter& p : reference.parameters())
    want.emplace_back(p.name, p.shape);

  const std::string model_path = (d / names[0]).string();
  io::SafetensorsFile mf = io::ReadSafetensors(model_path);
  CheckStepMetadata(mf, "relpos-model", ck.state.step, model_path);
  CheckTensors(mf.tensors, want, model_path);
  ck.parameters = std::move(mf.tensors);

  if (with_optimizer) {
    const std::string opt_path = (d / names[1]).string();
    io::SafetensorsFile of = io::ReadSafetensors(opt_path);
    CheckStepMetadata(of, "relpos-adamw", ck.state.step, opt_path);
    std::vector<std::pair<std::string, std::vector<int64_t>>> want_opt;
    for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
      for (const auto& [name, shape] : want)
        want_opt.emplace_back(prefix + name, shape);
    }
    CheckTensors(of.tensors, want_opt, opt_path);
    for (size_t i = want.size(); i < of.tensors.size(); ++i) {
      for (float x : of.tensors[i].data) {
        if (x < 0)
          Bad(opt_path, "tensor '" + of.tensors[i].name +
                            "' holds a negative second moment");
      }
    }
    ck.optimizer = std::move(of.tensors);
  }

  // Optional (older checkpoints have none): the training signal.
  if (files.contains("signal")) {
    if (!files["signal"].is_string() ||
        !std::regex_match(files["signal"].get<std::string>(),
                          FileNamePattern()) ||
        files["signal"].get<std::string>().rfind("signal-", 0) != 0) {
      Bad(source, "files.signal is not a checkpoint signal file name");
    }
    if (with_signal) {
      const std::string path =
          (d / files["signal"].get<std::string>()).string();
      ck.signal = DecodeSignalStats(io::ReadFileBounded(path, kMaxSignalBytes),
                                    path, ck.model_config, ck.state.step);
    }
  }
  // Task translate: the vocabulary (checked by the data when it is used).
  if (files.contains("vocabulary")) {
    if (files["vocabulary"] != kVocabularyFile) {
      Bad(source, std::string("files.vocabulary must be \"") +
                      kVocabularyFile + "\"");
    }
    ck.train_config.data.vocabulary = io::ReadFileBounded(
        (d / kVocabularyFile).string(), kMaxVocabularyBytes);
    if (ck.train_config.data.vocabulary.empty()) {
      Bad((d / kVocabularyFile).string(), "is empty");
    }
  } else if (ck.train_config.data.task == "translate") {
    Bad(source, std::string("a translation checkpoint without its "
                            "vocabulary (files.vocabulary, ") +
                    kVocabularyFile + ")");
  }
  return ck;
}

model::Transformer LoadModel(const std::string& dir, TrainConfig* train_config,
                             TrainState* state) {
  Checkpoint ck = ReadCheckpoint(dir, /*with_optimizer=*/false);
  model::Transformer model(ck.model_config);
  SetParameters(ck.parameters, dir, model);
  if (train_config) *train_config = ck.train_config;
  if (state) *state = ck.state;
  return model;
}

}  // namespace relpos::train
