// ModelConfig's settings table and what derives from it: JSON, validation.
#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <variant>

#include "base/check.h"
#include "model/arch.h"
#include "model/positions.h"
#include "relpos/schemes.h"

namespace relpos::model {
namespace {

// Size caps: a config may come from an untrusted checkpoint, and these keep
// every size product far from int64 overflow and allocations sane (the
// scheme settings' caps are the registry's, SchemeSettingInfo::config_range).
constexpr double kMaxVocab = double(int64_t{1} << 24);
constexpr double kMaxDModel = 65536;
constexpr double kMaxLayers = 1024;
constexpr double kMaxDff = double(int64_t{1} << 20);
constexpr double kMaxParams = 2147483648.0;  // 2^31 floats = 8 GiB

constexpr const char* kWhat = "model config";

using io::Field;
using io::Range;
using io::Setting;
using io::Words;

// `position`: a name of the scheme registry (relpos/schemes.h), aliases
// accepted and written as their scheme's name.
Setting<ModelConfig> PositionSetting() {
  std::string outside, inside;
  std::vector<std::string> names, aliases;
  for (const Scheme& s : Schemes()) {
    std::string& list = s.InsideAttention() ? inside : outside;
    list += std::string(list.empty() ? "" : ", ") + s.name;
    for (const std::string& a : s.aliases) list += " (alias " + a + ")";
    names.push_back(s.name);
    aliases.insert(aliases.end(), s.aliases.begin(), s.aliases.end());
  }
  names.insert(names.end(), aliases.begin(), aliases.end());
  return Words<ModelConfig>(
      "position", "--position",
      "How positions enter the model: " + outside +
          " (absolute, at the input), or inside attention: " + inside +
          " (docs/model.md)",
      names,
      [](const ModelConfig& c) {
        return std::string(FindScheme(c.position).name);
      },
      [](ModelConfig& c, const std::string& s, const std::string&) {
        c.position = FindScheme(s).id;
      });
}

// A setting of the scheme registry as a model config setting: the
// registry's key, help, config range, type and default (those of
// ModelConfig::scheme). Its flag is its key's, "--k-left" for k_left,
// except that -k also names --max-distance (Shaw's k) and key_term and
// value_term have none (--terms sets both).
Setting<ModelConfig> SchemeField(const SchemeSettingInfo& info) {
  using C = ModelConfig;
  std::string flag;
  if (info.id != SchemeSetting::kKeyTerm &&
      info.id != SchemeSetting::kValueTerm) {
    flag = "--" + std::string(info.key);
    std::replace(flag.begin(), flag.end(), '_', '-');
  }
  if (info.id == SchemeSetting::kMaxDistance) flag += ",-k";
  const SettingRange& r = info.config_range;
  const Range range{
      .lo = r.lo, .hi = r.hi, .lo_open = r.lo_open, .hi_open = r.hi_open};
  return std::visit(
      [&](auto member) -> Setting<C> {
        using T = std::remove_cvref_t<decltype(SchemeSettings().*member)>;
        if constexpr (std::is_same_v<T, RopeLayout>) {
          const std::string key = info.key;
          return Words<C>(
              key, flag, info.help,
              {RopeLayoutName(RopeLayout::kSplitHalves),
               RopeLayoutName(RopeLayout::kInterleaved)},
              [member](const C& c) {
                return std::string(RopeLayoutName(c.scheme.*member));
              },
              [member, key](C& c, const std::string& s, const std::string&) {
                c.scheme.*member = ParseRopeLayout(s, key.c_str());
              });
        } else {
          return Field<C>(
              info.key, flag, info.help,
              [member](C& c) -> T& { return c.scheme.*member; }, range);
        }
      },
      info.member);
}

// Where the model reads positions from (docs/settings.md's position group,
// in its order): the scheme, then the registry's settings in its order
// (max_len is a size: ShapeSettings lists it), --terms after the terms.
std::vector<Setting<ModelConfig>> PositionSettings() {
  using C = ModelConfig;
  std::vector<Setting<C>> settings = {PositionSetting()};
  for (const SchemeSettingInfo& info : SchemeSettingInfos()) {
    if (info.id == SchemeSetting::kMaxLen) continue;
    settings.push_back(SchemeField(info));
    if (info.id == SchemeSetting::kValueTerm) {
      settings.push_back(
          Words<C>("", "--terms",
                   "Relative terms: both|key|value|neither (Shaw et al.'s "
                   "ablation); sets key_term and value_term",
                   {"both", "key", "value", "neither"}, TermsName,
                   [](C& c, const std::string& s, const std::string&) {
                     ApplyTerms(s, &c);
                   }));
    }
  }
  for (Setting<C>& s : settings) s = io::InGroup(std::move(s), kPositionGroup);
  return settings;
}

// The architectures' names, in Arch order.
std::vector<std::string> ArchNames() {
  std::vector<std::string> names;
  for (const ArchInfo& a : Arches()) names.push_back(a.name);
  return names;
}

// The model's size and architecture.
std::vector<Setting<ModelConfig>> ShapeSettings() {
  using C = ModelConfig;
  return {
      io::WithDefaultNote(
          Words<C>("arch", "--arch",
                   "Bidirectional encoder, causal decoder-only model, or "
                   "encoder-decoder (seq2seq: source -> target, "
                   "docs/model.md)",
                   ArchNames(), [](const C& c) { return ToString(c.arch); },
                   [](C& c, const std::string& s, const std::string&) {
                     c.arch = ParseArch(s);
                   }),
          "encoder for tasks, decoder for lm, seq2seq for the s2s_* tasks"),
      io::WithDefaultNote(
          Field<C>("vocab_size", "", "Token ids (the data decides)",
                   &C::vocab_size, Range{1, kMaxVocab}),
          "from the data"),
      Field<C>("d_model", "--d-model", "Model width", &C::d_model,
               Range{1, kMaxDModel}),
      Field<C>("heads", "--heads", "Attention heads (must divide d_model)",
               &C::heads, Range{1, kMaxDModel}),
      Field<C>("layers", "--layers",
               "Transformer blocks (seq2seq: the encoder's)", &C::layers,
               Range{0, kMaxLayers}),
      io::WithDefaultNote(
          io::OmitAtDefault(Field<C>(
              "decoder_layers", "--decoder-layers",
              "seq2seq: the decoder's blocks (-1: as many as layers)",
              &C::decoder_layers, Range{-1, kMaxLayers})),
          "`-1` (= layers)"),
      Field<C>("d_ff", "--d-ff", "Feed-forward width", &C::d_ff,
               Range{1, kMaxDff}),
      SchemeField(FindSchemeSetting(SchemeSetting::kMaxLen)),
  };
}

std::vector<Setting<ModelConfig>> MakeModelSettings() {
  using C = ModelConfig;
  std::vector<Setting<C>> settings = ShapeSettings();
  for (Setting<C>& s : PositionSettings()) settings.push_back(std::move(s));
  settings.push_back(Field<C>("dropout", "--dropout", "Dropout probability",
                              &C::dropout,
                              Range{.lo = 0, .hi = 1, .hi_open = true}));
  settings.push_back(io::WithDefaultNote(
      Field<C>("seed", "",
               "Initialisation seed (the trainer derives it from the train "
               "seed)",
               &C::seed),
      "from the train seed"));
  return settings;
}

}  // namespace

const std::vector<ArchInfo>& Arches() {
  static const std::vector<ArchInfo> rows = {
      {.arch = Arch::kEncoder,
       .name = "encoder",
       .causal = false,
       .source = false,
       .tied_embedding = false},
      {.arch = Arch::kDecoder,
       .name = "decoder",
       .causal = true,
       .source = false,
       .tied_embedding = false},
      {.arch = Arch::kSeq2seq,
       .name = "seq2seq",
       .causal = true,
       .source = true,
       .tied_embedding = true},
  };
  return rows;
}

const ArchInfo& Describe(Arch arch) {
  const auto i = static_cast<size_t>(arch);
  RELPOS_CHECK_ARG(i < Arches().size() && Arches()[i].arch == arch,
                   "unknown arch " << static_cast<int>(arch));
  return Arches()[i];
}

std::string ToString(Arch arch) {
  const auto i = static_cast<size_t>(arch);
  return i < Arches().size() ? Arches()[i].name : "unknown";
}

Arch ParseArch(const std::string& name) {
  std::string list;
  for (const ArchInfo& a : Arches()) {
    if (name == a.name) return a.arch;
    list += std::string(list.empty() ? "" : ", ") + a.name;
  }
  RELPOS_THROW(InvalidArgument, "unknown arch '"
                                    << name << "' (expected one of: " << list
                                    << ")");
}

int64_t DecoderLayers(const ModelConfig& c) {
  return c.decoder_layers < 0 ? c.layers : c.decoder_layers;
}

namespace {
ModelConfig SideOf(const ModelConfig& c, Arch side, int64_t layers) {
  if (!Describe(c.arch).source) return c;
  ModelConfig s = c;
  s.arch = side;
  s.layers = layers;
  s.decoder_layers = -1;
  return s;
}
}  // namespace

ModelConfig EncoderSide(const ModelConfig& c) {
  return SideOf(c, Arch::kEncoder, c.layers);
}

ModelConfig DecoderSide(const ModelConfig& c) {
  return SideOf(c, Arch::kDecoder, DecoderLayers(c));
}

std::vector<StackInfo> Stacks(const ModelConfig& c) {
  if (!Describe(c.arch).source) return {{.side = c}};
  return {{.side = EncoderSide(c), .prefix = "encoder.", .over_source = true},
          {.side = DecoderSide(c), .prefix = "decoder.", .cross = true}};
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
  c->scheme.key_term = terms == "both" || terms == "key";
  c->scheme.value_term = terms == "both" || terms == "value";
}

std::string TermsName(const ModelConfig& c) {
  if (c.scheme.key_term && c.scheme.value_term) return "both";
  if (c.scheme.key_term) return "key";
  if (c.scheme.value_term) return "value";
  return "neither";
}

namespace {

// Shaw's switches mean nothing to the schemes that do not read them: refuse
// them there (at a value other than the default) rather than ignore them.
void CheckUnreadSwitches(const Scheme& scheme, const ModelConfig& c) {
  auto readers = [](SchemeSetting setting) {
    std::string names;
    for (const Scheme& s : Schemes()) {
      if (!s.Reads(setting)) continue;
      names += std::string(names.empty() ? "" : ", ") + s.name;
    }
    return names;
  };
  if (!scheme.Reads(SchemeSetting::kPerHeadTables)) {
    RELPOS_CHECK_ARG(!c.scheme.per_head_tables,
                     "model config field 'per_head_tables' applies to "
                     "position "
                         << readers(SchemeSetting::kPerHeadTables)
                         << "; position '" << scheme.name
                         << "' has no such tables (got true)");
  }
  if (!scheme.Reads(SchemeSetting::kKeyTerm) ||
      !scheme.Reads(SchemeSetting::kValueTerm)) {
    RELPOS_CHECK_ARG(
        c.scheme.key_term && c.scheme.value_term,
        "model config fields 'key_term' / 'value_term' (terms) "
        "apply to position "
            << readers(SchemeSetting::kKeyTerm) << "; position '" << scheme.name
            << "' has no such terms (got key_term = "
            << (c.scheme.key_term ? "true" : "false")
            << ", value_term = " << (c.scheme.value_term ? "true" : "false")
            << ")");
  }
}

// The checks that depend on the position scheme, for one side of the model
// (its arch decides T5's bucket direction): the registry's, after refusing
// the switches of settings the scheme does not read.
void ValidateScheme(const ModelConfig& c) {
  const Scheme& scheme = FindScheme(c.position);
  CheckUnreadSwitches(scheme, c);
  scheme.Validate(SchemeLayerOf(c));
}

// The parameters of a side's scheme and blocks, in double (every factor is
// capped, so this cannot overflow): per_block those of one block's
// self-attention and feed-forward sublayers with the scheme's per-layer
// tables (from the registry), once the tables held once (the input table).
struct SideParameters {
  double per_block = 0.0, once = 0.0;
};

SideParameters BlockParameters(const ModelConfig& c) {
  const double d = static_cast<double>(c.d_model);
  SideParameters p;
  p.per_block = 4.0 * (d * d + d) + 2.0 * d * static_cast<double>(c.d_ff) +
                static_cast<double>(c.d_ff) + d + 4.0 * d;
  for (const SchemeTable& t :
       FindScheme(c.position).Tables(SchemeLayerOf(c))) {
    double n = 1.0;
    for (int64_t e : t.shape) n *= static_cast<double>(e);
    (t.per_layer() ? p.per_block : p.once) += n;
  }
  return p;
}

}  // namespace

void Validate(const ModelConfig& c) {
  io::ValidateSettings(ModelSettings(), c, kWhat);
  RELPOS_CHECK_ARG(c.heads <= c.d_model && c.d_model % c.heads == 0,
                   "model config field 'heads' must divide d_model="
                       << c.d_model << " (got " << c.heads << ")");
  const ArchInfo& arch = Describe(c.arch);
  RELPOS_CHECK_ARG(arch.source || c.decoder_layers == -1,
                   "model config field 'decoder_layers' applies to arch "
                   "seq2seq; arch '"
                       << ToString(c.arch) << "' has one stack, 'layers' (got "
                       << c.decoder_layers << ")");
  const double d = static_cast<double>(c.d_model);
  const double vocab = static_cast<double>(c.vocab_size);
  // Each stack's scheme (T5's buckets: bidirectional in an encoder, causal
  // in a decoder), its blocks (a cross-attending block adds the
  // cross-attention sublayer: projections and its LayerNorm), its final
  // LayerNorm and its tables held once; the token embedding (and the
  // head's weight unless tied) and the output bias.
  double total = (arch.tied_embedding ? 1.0 : 2.0) * vocab * d + vocab;
  for (const StackInfo& stack : Stacks(c)) {
    ValidateScheme(stack.side);
    const SideParameters p = BlockParameters(stack.side);
    const double cross = stack.cross ? 4.0 * (d * d + d) + 2.0 * d : 0.0;
    total += static_cast<double>(stack.side.layers) * (p.per_block + cross) +
             2.0 * d + p.once;
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
