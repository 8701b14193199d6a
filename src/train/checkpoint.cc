#include "train/checkpoint.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <system_error>

#include "base/check.h"
#include "base/io/file_io.h"
#include "base/io/json_reader.h"
#include "base/io/path_text.h"
#include "model/memory_plan.h"

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
    const nlohmann::json j = io::ReadJsonFile(
        (fs::path(dir) / kCheckpointConfigFile).string(), kMaxConfigBytes);
    for (const char* key : {"model", "optimizer", "signal", "vocabulary"}) {
      if (j.at("files").contains(key) && j["files"][key].is_string()) {
        names.insert(j["files"][key].get<std::string>());
      }
    }
  } catch (const std::exception&) {
  }
  return names;
}

using io::ThrowBadDocument;

// The names and shapes of `got` (NamedTensor or TensorEntry) are those of
// `want`, in order.
template <typename Tensor>
void CheckNamesAndShapes(const std::vector<Tensor>& got,
                         const std::vector<model::ParameterShape>& want,
                         const std::string& source) {
  if (got.size() != want.size()) {
    ThrowBadDocument(source, "holds " + std::to_string(got.size()) +
                    " tensors, the model config implies " +
                    std::to_string(want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].name != want[i].name) {
      ThrowBadDocument(source, "tensor #" + std::to_string(i) + " is '" + got[i].name +
                      "', expected '" + want[i].name + "'");
    }
    if (got[i].shape != want[i].shape) {
      auto fmt = [](const std::vector<int64_t>& s) {
        std::string r = "[";
        for (size_t k = 0; k < s.size(); ++k)
          r += (k ? ", " : "") + std::to_string(s[k]);
        return r + "]";
      };
      ThrowBadDocument(source, "tensor '" + got[i].name + "' has shape " +
                      fmt(got[i].shape) + ", the model config implies " +
                      fmt(want[i].shape));
    }
  }
}

void CheckFinite(const std::string& name, const std::vector<float>& values,
                 const std::string& source) {
  for (float x : values) {
    if (!std::isfinite(x))
      ThrowBadDocument(source, "tensor '" + name + "' holds NaN or Inf");
  }
}

void CheckTensors(const std::vector<io::NamedTensor>& got,
                  const std::vector<model::ParameterShape>& want,
                  const std::string& source) {
  CheckNamesAndShapes(got, want, source);
  for (const io::NamedTensor& t : got) CheckFinite(t.name, t.data, source);
}

void CheckStepMetadata(const std::map<std::string, std::string>& metadata,
                       const char* format, int64_t step,
                       const std::string& source) {
  auto it = metadata.find("format");
  if (it == metadata.end() || it->second != format) {
    ThrowBadDocument(source, std::string("metadata 'format' must be '") + format + "'");
  }
  it = metadata.find("step");
  if (it == metadata.end() || it->second != std::to_string(step)) {
    ThrowBadDocument(source, "metadata 'step' does not match config.json's step " +
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

// The first lowest held-out loss of the curve (-1 for none).
int64_t BestPoint(const std::vector<ValidationPoint>& curve) {
  int64_t best = -1;
  for (size_t i = 0; i < curve.size(); ++i) {
    if (best < 0 || curve[i].loss < curve[static_cast<size_t>(best)].loss) {
      best = static_cast<int64_t>(i);
    }
  }
  return best;
}

// config.json's "validation": the curve, its best point (derived, for
// readers) and, when the patience rule stopped the run, where.
nlohmann::json ValidationJson(const TrainState& state) {
  nlohmann::json points = nlohmann::json::array();
  for (const ValidationPoint& p : state.validation) {
    nlohmann::json point = {{"step", p.step}, {"loss", p.loss},
                            {"pairs", p.pairs}};
    if (p.bleu_sentences > 0) {
      point["bleu"] = p.bleu;
      point["bleu_sentences"] = p.bleu_sentences;
    }
    points.push_back(std::move(point));
  }
  nlohmann::json j = {{"points", std::move(points)}};
  if (const int64_t best = BestPoint(state.validation); best >= 0) {
    const ValidationPoint& b = state.validation[static_cast<size_t>(best)];
    j["best_step"] = b.step;
    j["best_loss"] = b.loss;
  }
  j["stopped_early"] = state.stopped_early_step >= 0;
  if (state.stopped_early_step >= 0) {
    j["stopped_at_step"] = state.stopped_early_step;
  }
  return j;
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
  std::vector<model::ParameterShape> want;
  for (const model::Parameter& p : model.parameters()) {
    want.push_back({p.name, p.shape});
  }
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
      RELPOS_THROW(IoError, "cannot create checkpoint folder "
                                << io::QuotedPath(dir) << ": " << ec.message());
    }
  } else if (!fs::is_directory(d, ec)) {
    RELPOS_THROW(IoError,
                 io::QuotedPath(dir) << " exists and is not a folder");
  }
  // One writer per folder (reentrant: a training run holds it already).
  // Under the lock, no other writer's temporary file can exist, so any in
  // the folder are leftovers of a killed save: removed here.
  const io::FolderLock lock(dir);
  io::RemoveTemporaryFiles(dir, [](const std::string& target) {
    return target == kCheckpointConfigFile ||
           std::regex_match(target, FileNamePattern());
  });

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
  if (!ck.state.validation.empty() || ck.state.stopped_early_step >= 0) {
    j["validation"] = ValidationJson(ck.state);
  }
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

namespace {

// config.json of a checkpoint folder, validated, with the names of the files
// it refers to.
struct CheckpointHead {
  Checkpoint ck;  // configs and state; no tensors
  std::string model_file, optimizer_file, signal_file;  // signal: optional
  std::string source;                                   // config.json's path
};

// A file name of files.<kind>: a plain name of our own pattern (a crafted
// config cannot point outside the folder: "../x", "/etc/...").
std::string FileEntry(const nlohmann::json& files, const char* kind,
                      const std::string& source) {
  const std::string prefix = std::string(kind) + "-";
  if (!files.contains(kind) || !files[kind].is_string() ||
      !std::regex_match(files[kind].get<std::string>(), FileNamePattern()) ||
      files[kind].get<std::string>().rfind(prefix, 0) != 0) {
    ThrowBadDocument(source, std::string("files.") + kind +
                                 " must be a checkpoint file name (" + prefix +
                                 "<step>...)");
  }
  return files[kind].get<std::string>();
}

void ReadState(const nlohmann::json& st, const std::string& source,
               Checkpoint* ck) {
  if (!st.contains("step") || !st["step"].is_number_integer() ||
      st["step"].get<int64_t>() < 0 ||
      st["step"].get<int64_t>() > ck->train_config.steps) {
    ThrowBadDocument(source,
                     "state.step must be an integer in [0, train.steps]");
  }
  ck->state.step = st["step"].get<int64_t>();
  for (const auto& [key, out] :
       {std::pair{"data_rng", &ck->state.data_rng},
        std::pair{"dropout_rng", &ck->state.dropout_rng}}) {
    if (!st.contains(key) || !st[key].is_string() ||
        !ParseHex(st[key].get<std::string>(), out)) {
      ThrowBadDocument(source,
                       std::string("state.") + key +
                           " must be a string \"0x\" + 16 lowercase hex digits");
    }
  }
  if (st.size() != 3) ThrowBadDocument(source, "field 'state' has unknown members");
}

// "validation" (optional: checkpoints of runs without the curve, and those
// written before it existed, have none), read strictly.
void ReadValidation(const nlohmann::json& v, const std::string& source,
                    Checkpoint* ck) {
  auto bad = [&](const std::string& what) {
    ThrowBadDocument(source, "validation." + what);
  };
  if (!v.is_object()) bad("must be an object");
  for (const auto& [key, value] : v.items()) {
    static const std::set<std::string> known = {
        "points", "best_step", "best_loss", "stopped_early",
        "stopped_at_step"};
    if (!known.count(key)) bad(key + " is an unknown member");
  }
  if (!v.contains("points") || !v["points"].is_array() ||
      v["points"].size() > static_cast<size_t>(kMaxValidationPoints)) {
    bad("points must be an array of at most " +
        std::to_string(kMaxValidationPoints) + " points");
  }
  auto integer = [](const nlohmann::json& x, int64_t lo, int64_t hi) {
    return x.is_number_integer() && x.get<int64_t>() >= lo &&
           x.get<int64_t>() <= hi;
  };
  auto number = [](const nlohmann::json& x, double lo, double hi) {
    return x.is_number() && std::isfinite(x.get<double>()) &&
           x.get<double>() >= lo && x.get<double>() <= hi;
  };
  std::vector<ValidationPoint>& curve = ck->state.validation;
  for (const nlohmann::json& p : v["points"]) {
    const int64_t previous = curve.empty() ? 0 : curve.back().step;
    if (!p.is_object() || !p.contains("step") ||
        !integer(p["step"], previous + 1, ck->state.step) ||
        !p.contains("loss") || !number(p["loss"], 0, 1e30) ||
        !p.contains("pairs") || !integer(p["pairs"], 1, INT64_MAX) ||
        p.contains("bleu") != p.contains("bleu_sentences") ||
        (p.contains("bleu") &&
         (!number(p["bleu"], 0, 100) ||
          !integer(p["bleu_sentences"], 1, INT64_MAX))) ||
        p.size() != (p.contains("bleu") ? 5u : 3u)) {
      bad("points[" + std::to_string(curve.size()) +
          "] must be {\"step\", \"loss\", \"pairs\"[, \"bleu\", "
          "\"bleu_sentences\"]} with steps increasing up to state.step, a "
          "finite loss >= 0, pairs >= 1 and BLEU in [0, 100]");
    }
    ValidationPoint point;
    point.step = p["step"].get<int64_t>();
    point.loss = p["loss"].get<double>();
    point.pairs = p["pairs"].get<int64_t>();
    if (p.contains("bleu")) {
      point.bleu = p["bleu"].get<double>();
      point.bleu_sentences = p["bleu_sentences"].get<int64_t>();
    }
    curve.push_back(point);
  }
  // The best point is derived: it must be the curve's.
  const int64_t best = BestPoint(curve);
  if (best < 0 ? v.contains("best_step") || v.contains("best_loss")
               : !v.contains("best_step") || !v.contains("best_loss") ||
                     v["best_step"] != curve[static_cast<size_t>(best)].step ||
                     v["best_loss"] != curve[static_cast<size_t>(best)].loss) {
    bad("best_step and best_loss must name the point of the lowest loss");
  }
  if (!v.contains("stopped_early") || !v["stopped_early"].is_boolean()) {
    bad("stopped_early must be true or false");
  }
  if (v["stopped_early"].get<bool>()) {
    // The run stopped, and was saved, at that step.
    if (!v.contains("stopped_at_step") ||
        v["stopped_at_step"] != ck->state.step) {
      bad("stopped_at_step must be state.step when stopped_early is true");
    }
    ck->state.stopped_early_step = ck->state.step;
  } else if (v.contains("stopped_at_step")) {
    bad("stopped_at_step is only for a run that stopped early");
  }
}

CheckpointHead ReadHead(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::exists(d, ec)) {
    RELPOS_THROW(IoError, "checkpoint folder " << io::QuotedPath(dir)
                                               << " does not exist");
  }
  if (!fs::is_directory(d, ec)) {
    RELPOS_THROW(IoError,
                 "checkpoint " << io::QuotedPath(dir) << " is not a folder");
  }
  CheckpointHead h;
  h.source = (d / kCheckpointConfigFile).string();
  if (!fs::exists(fs::symlink_status(h.source, ec))) {
    RELPOS_THROW(IoError, io::QuotedPath(dir) << " holds no checkpoint (no "
                                              << kCheckpointConfigFile << ")");
  }
  const std::string& source = h.source;
  const nlohmann::json j = io::ReadJsonFile(source, kMaxConfigBytes);
  io::CheckFormatAndVersion(j, source, kCheckpointFormat, kCheckpointVersion,
                            "checkpoint");
  for (const auto& [key, value] : j.items()) {
    static const std::set<std::string> known = {
        "format", "version", "model", "train", "state", "files", "validation"};
    if (!known.count(key)) {
      ThrowBadDocument(source, "unknown field " + io::QuotedPath(key));
    }
  }
  for (const char* key : {"model", "train", "state", "files"}) {
    if (!j.contains(key) || !j[key].is_object()) {
      ThrowBadDocument(source, std::string("field '") + key +
                                   "' must be an object");
    }
  }
  try {
    h.ck.model_config = model::ModelConfigFromJson(j["model"]);
    h.ck.train_config = TrainConfigFromJson(j["train"]);
  } catch (const Error& e) {
    ThrowBadDocument(source, MessageBody(e));
  }
  ReadState(j["state"], source, &h.ck);
  if (j.contains("validation")) ReadValidation(j["validation"], source, &h.ck);
  const nlohmann::json& files = j["files"];
  h.model_file = FileEntry(files, "model", source);
  h.optimizer_file = FileEntry(files, "optimizer", source);
  // Optional (older checkpoints have none): the training signal.
  if (files.contains("signal")) h.signal_file = FileEntry(files, "signal", source);
  // Task translate: the vocabulary (checked by the data when it is used).
  if (files.contains("vocabulary")) {
    if (files["vocabulary"] != kVocabularyFile) {
      ThrowBadDocument(source, std::string("files.vocabulary must be \"") +
                                   kVocabularyFile + "\"");
    }
    const std::string path = (d / kVocabularyFile).string();
    h.ck.train_config.data.vocabulary =
        io::ReadFileBounded(path, kMaxVocabularyBytes);
    if (h.ck.train_config.data.vocabulary.empty()) {
      ThrowBadDocument(path, "is empty");
    }
  } else if (h.ck.train_config.data.task == "translate") {
    ThrowBadDocument(source,
                     std::string("a translation checkpoint without its "
                                 "vocabulary (files.vocabulary, ") +
                         kVocabularyFile + ")");
  }
  return h;
}

// Reads the tensor file `name` of `dir` after checking that its size can
// hold what `want` implies (the header is checked against the config before
// any tensor is read or any model built).
// FormatError unless the file at `path` can hold the tensors of `want`
// (checked on its size before its header is read).
void CheckFileCanHold(const std::string& path,
                      const std::vector<model::ParameterShape>& want) {
  double data_bytes = 0;
  for (const model::ParameterShape& p : want) {
    data_bytes += 4.0 * static_cast<double>(p.numel());
  }
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (!ec && static_cast<double>(size) < data_bytes + 8) {
    ThrowBadDocument(path, "holds " + std::to_string(size) +
                               " bytes, fewer than the " +
                               std::to_string(static_cast<int64_t>(data_bytes)) +
                               " bytes of tensors the model config implies");
  }
}

std::vector<io::NamedTensor> ReadTensorFile(
    const fs::path& dir, const std::string& name, const char* format,
    const std::vector<model::ParameterShape>& want, int64_t step) {
  const std::string path = (dir / name).string();
  CheckFileCanHold(path, want);
  io::SafetensorsFile f = io::ReadSafetensors(path);
  CheckStepMetadata(f.metadata, format, step, path);
  CheckTensors(f.tensors, want, path);
  return std::move(f.tensors);
}

}  // namespace

Checkpoint ReadCheckpointConfig(const std::string& dir) {
  return ReadHead(dir).ck;
}

Checkpoint ReadCheckpoint(const std::string& dir, bool with_optimizer,
                          bool with_signal) {
  CheckpointHead h = ReadHead(dir);
  Checkpoint& ck = h.ck;
  // What a model of this config holds, and whether reading it fits, before
  // anything of it is read or allocated.
  CheckMemory(PlanCheckpointLoad(ck.model_config, with_optimizer));
  const std::vector<model::ParameterShape> want =
      model::ParameterShapes(ck.model_config);
  const fs::path d(dir);
  ck.parameters = ReadTensorFile(d, h.model_file, "relpos-model", want,
                                 ck.state.step);
  if (with_optimizer) {
    std::vector<model::ParameterShape> want_opt;
    for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
      for (const model::ParameterShape& p : want) {
        want_opt.push_back({prefix + p.name, p.shape});
      }
    }
    ck.optimizer = ReadTensorFile(d, h.optimizer_file, "relpos-adamw",
                                  want_opt, ck.state.step);
    const std::string opt_path = (d / h.optimizer_file).string();
    for (size_t i = want.size(); i < ck.optimizer.size(); ++i) {
      for (float x : ck.optimizer[i].data) {
        if (x < 0) {
          ThrowBadDocument(opt_path, "tensor '" + ck.optimizer[i].name +
                                         "' holds a negative second moment");
        }
      }
    }
  }
  if (with_signal && !h.signal_file.empty()) {
    const std::string path = (d / h.signal_file).string();
    const SignalStats layout = MakeSignalStats(ck.model_config, 0);
    ck.signal = DecodeSignalStats(
        io::ReadFileBounded(path, MaxSignalFileBytes(layout)), path, layout,
        ck.state.step);
  }
  return std::move(ck);
}

namespace {

// The checkpoint `dir`'s model file, checked against its config (names,
// shapes, step, size) before anything of the model is allocated.
struct ModelFile {
  CheckpointHead head;
  std::string path;
  std::unique_ptr<io::SafetensorsReader> reader;
};

ModelFile OpenModelFile(const std::string& dir) {
  ModelFile f{ReadHead(dir), {}, nullptr};
  const Checkpoint& ck = f.head.ck;
  CheckMemory(PlanCheckpointLoad(ck.model_config, /*with_optimizer=*/false));
  // ReadTensorFile's checks, all before the model is built; then each tensor
  // is read straight into its parameter's values (one copy of the weights in
  // memory, not three).
  const std::vector<model::ParameterShape> want =
      model::ParameterShapes(ck.model_config);
  f.path = (fs::path(dir) / f.head.model_file).string();
  CheckFileCanHold(f.path, want);
  f.reader = std::make_unique<io::SafetensorsReader>(f.path);
  CheckStepMetadata(f.reader->layout().metadata, "relpos-model",
                    ck.state.step, f.path);
  CheckNamesAndShapes(f.reader->layout().tensors, want, f.path);
  return f;
}

}  // namespace

model::Transformer LoadModel(const std::string& dir, TrainConfig* train_config,
                             TrainState* state) {
  ModelFile f = OpenModelFile(dir);
  const Checkpoint& ck = f.head.ck;
  // Every parameter is read below: no random draws first.
  model::Transformer model(ck.model_config, model::Transformer::Fill::kZeros);
  auto& params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    f.reader->Read(i, params[i].value.data());
    CheckFinite(params[i].name, params[i].value, f.path);
  }
  if (train_config) *train_config = ck.train_config;
  if (state) *state = ck.state;
  return model;
}

LoadedModel LoadModelFor(const std::string& dir, model::ComputeType type,
                         TrainConfig* train_config, TrainState* state) {
  LoadedModel out;
  if (type == model::ComputeType::kFloat32) {
    out.model = std::make_unique<model::Transformer>(
        LoadModel(dir, train_config, state));
    return out;
  }
  ModelFile f = OpenModelFile(dir);
  const Checkpoint& ck = f.head.ck;
  out.model = std::make_unique<model::Transformer>(
      ck.model_config, model::Transformer::Fill::kNone);
  model::Transformer& model = *out.model;
  auto& params = model.parameters();
  // Refuses an encoder (no decoder to quantize) before anything is read.
  const std::vector<int64_t> dropped =
      model::QuantizedLinears::DroppedParameters(model, type);
  const std::set<int64_t> skip(dropped.begin(), dropped.end());
  for (size_t i = 0; i < params.size(); ++i) {
    if (skip.count(static_cast<int64_t>(i)) != 0) continue;
    model.AllocateValue(static_cast<int64_t>(i));
    f.reader->Read(i, params[i].value.data());
    CheckFinite(params[i].name, params[i].value, f.path);
  }
  out.quantized = std::make_unique<const model::QuantizedLinears>(
      model, type, [&](int64_t i, std::vector<float>* values) {
        f.reader->Read(static_cast<size_t>(i), values->data());
        CheckFinite(params[static_cast<size_t>(i)].name, *values, f.path);
      });
  if (train_config) *train_config = ck.train_config;
  if (state) *state = ck.state;
  return out;
}

}  // namespace relpos::train
