// ModelConfig's settings table and what derives from it: JSON, validation.
#include "model/model_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "core/check.h"

namespace relpos::model {
namespace {

// Size caps: a config may come from an untrusted checkpoint, and these keep
// every size product far from int64 overflow and allocations sane.
constexpr double kMaxVocab = double(int64_t{1} << 24);
constexpr double kMaxDModel = 65536;
constexpr double kMaxLayers = 1024;
constexpr double kMaxDff = double(int64_t{1} << 20);
constexpr double kMaxLen = double(int64_t{1} << 24);
constexpr double kMaxDistance = double(int64_t{1} << 20);
constexpr double kMaxParams = 2147483648.0;  // 2^31 floats = 8 GiB

constexpr const char* kWhat = "model config";

using io::Field;
using io::Range;
using io::Setting;
using io::Words;

std::vector<Setting<ModelConfig>> MakeModelSettings() {
  using C = ModelConfig;
  const std::string pos = kPositionGroup;
  return {
      io::WithDefaultNote(
          Words<C>("arch", "--arch",
                   "Bidirectional encoder or causal decoder-only model",
                   {"encoder", "decoder"},
                   [](const C& c) { return ToString(c.arch); },
                   [](C& c, const std::string& s, const std::string&) {
                     c.arch = ParseArch(s);
                   }),
          "encoder for tasks, decoder for lm"),
      io::WithDefaultNote(
          Field<C>("vocab_size", "", "Token ids (the data decides)",
                   &C::vocab_size, Range{1, kMaxVocab}),
          "from the data"),
      Field<C>("d_model", "--d-model", "Model width", &C::d_model,
               Range{1, kMaxDModel}),
      Field<C>("heads", "--heads", "Attention heads (must divide d_model)",
               &C::heads, Range{1, kMaxDModel}),
      Field<C>("layers", "--layers", "Transformer blocks", &C::layers,
               Range{0, kMaxLayers}),
      Field<C>("d_ff", "--d-ff", "Feed-forward width", &C::d_ff,
               Range{1, kMaxDff}),
      Field<C>("max_len", "--max-len",
               "Rows of the learned absolute position table", &C::max_len,
               Range{1, kMaxLen}),
      io::InGroup(
          Words<C>("position", "--position", "How positions enter the model",
                   {"none", "sinusoidal", "learned", "relative"},
                   [](const C& c) { return ToString(c.position); },
                   [](C& c, const std::string& s, const std::string&) {
                     c.position = ParsePositionScheme(s);
                   }),
          pos),
      io::InGroup(Field<C>("max_distance", "--max-distance,-k",
                           "Clipping distance k of relative positions",
                           &C::max_distance, Range{0, kMaxDistance}),
                  pos),
      io::InGroup(Field<C>("key_term", "",
                           "Relative term inside the attention score",
                           &C::key_term),
                  pos),
      io::InGroup(Field<C>("value_term", "",
                           "Relative term inside the attention output",
                           &C::value_term),
                  pos),
      io::InGroup(
          Words<C>("", "--terms",
                   "Relative terms: both|key|value|neither (Shaw et al.'s "
                   "ablation); sets key_term and value_term",
                   {"both", "key", "value", "neither"}, TermsName,
                   [](C& c, const std::string& s, const std::string&) {
                     ApplyTerms(s, &c);
                   }),
          pos),
      io::InGroup(Field<C>("per_head_tables", "--per-head-tables",
                           "One relative table pair per head (default: "
                           "shared per layer)",
                           &C::per_head_tables),
                  pos),
      io::InGroup(Field<C>("rel_init_scale", "--rel-init-scale",
                           "Multiplier on the Xavier std of the relative "
                           "tables",
                           &C::rel_init_scale, Range{.lo = 0}),
                  pos),
      Field<C>("dropout", "--dropout", "Dropout probability",
               &C::dropout, Range{.lo = 0, .hi = 1, .hi_open = true}),
      io::WithDefaultNote(
          Field<C>("seed", "",
                   "Initialisation seed (the trainer derives it from the "
                   "train seed)",
                   &C::seed),
          "from the train seed"),
  };
}

}  // namespace

std::string ToString(PositionScheme scheme) {
  switch (scheme) {
    case PositionScheme::kNone:
      return "none";
    case PositionScheme::kSinusoidal:
      return "sinusoidal";
    case PositionScheme::kLearned:
      return "learned";
    case PositionScheme::kRelative:
      return "relative";
  }
  return "unknown";
}

PositionScheme ParsePositionScheme(const std::string& name) {
  for (PositionScheme s :
       {PositionScheme::kNone, PositionScheme::kSinusoidal,
        PositionScheme::kLearned, PositionScheme::kRelative}) {
    if (ToString(s) == name) return s;
  }
  RELPOS_THROW(InvalidArgument,
               "unknown position scheme '"
                   << name
                   << "' (expected one of: none, sinusoidal, learned, "
                      "relative)");
}

std::string ToString(Arch arch) {
  return arch == Arch::kEncoder ? "encoder" : "decoder";
}

Arch ParseArch(const std::string& name) {
  if (name == "encoder") return Arch::kEncoder;
  if (name == "decoder") return Arch::kDecoder;
  RELPOS_THROW(InvalidArgument, "unknown arch '"
                                    << name
                                    << "' (expected one of: encoder, decoder)");
}

const std::vector<io::Setting<ModelConfig>>& ModelSettings() {
  static const std::vector<io::Setting<ModelConfig>> settings =
      MakeModelSettings();
  return settings;
}

void ApplyTerms(const std::string& terms, ModelConfig* c) {
  RELPOS_CHECK_ARG(terms == "both" || terms == "key" || terms == "value" ||
                       terms == "neither",
                   "terms must be both, key, value or neither (got '" << terms
                                                                      << "')");
  c->key_term = terms == "both" || terms == "key";
  c->value_term = terms == "both" || terms == "value";
}

std::string TermsName(const ModelConfig& c) {
  if (c.key_term && c.value_term) return "both";
  if (c.key_term) return "key";
  if (c.value_term) return "value";
  return "neither";
}

void Validate(const ModelConfig& c) {
  io::ValidateSettings(ModelSettings(), c, kWhat);
  RELPOS_CHECK_ARG(c.heads <= c.d_model && c.d_model % c.heads == 0,
                   "model config field 'heads' must divide d_model="
                       << c.d_model << " (got " << c.heads << ")");
  // Parameter count in double: every factor is capped above, so this cannot
  // overflow, and the cap keeps the allocation reasonable.
  const double d = static_cast<double>(c.d_model);
  const double dh = d / static_cast<double>(c.heads);
  const double rows = 2.0 * static_cast<double>(c.max_distance) + 1.0;
  double per_layer = 4.0 * (d * d + d) + 2.0 * d * static_cast<double>(c.d_ff) +
                     static_cast<double>(c.d_ff) + d + 4.0 * d;
  if (c.position == PositionScheme::kRelative) {
    const double tables =
        static_cast<double>(c.key_term) + static_cast<double>(c.value_term);
    per_layer += tables * rows * dh *
                 (c.per_head_tables ? static_cast<double>(c.heads) : 1.0);
  }
  const double vocab = static_cast<double>(c.vocab_size);
  double total = static_cast<double>(c.layers) * per_layer + 2.0 * vocab * d +
                 vocab + 2.0 * d;
  if (c.position == PositionScheme::kLearned) {
    total += static_cast<double>(c.max_len) * d;
  }
  RELPOS_CHECK_ARG(total <= kMaxParams, "model config asks for "
                                            << total
                                            << " parameters (more than 2^31); "
                                               "reduce d_model, layers, d_ff, "
                                               "vocab_size or max_len");
}

nlohmann::json ToJson(const ModelConfig& c) {
  return io::SettingsToJson(ModelSettings(), c);
}

ModelConfig ModelConfigFromJson(const nlohmann::json& j) {
  ModelConfig c;
  io::SettingsFromJson(ModelSettings(), j, kWhat, &c);
  Validate(c);
  return c;
}

}  // namespace relpos::model
