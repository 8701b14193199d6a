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
constexpr double kMaxBuckets = 65536;
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
                   "Bidirectional encoder, causal decoder-only model, or "
                   "encoder-decoder (seq2seq: source -> target, "
                   "docs/model.md)",
                   {"encoder", "decoder", "seq2seq"},
                   [](const C& c) { return ToString(c.arch); },
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
      Field<C>("max_len", "--max-len",
               "Rows of the learned absolute position table", &C::max_len,
               Range{1, kMaxLen}),
      io::InGroup(
          Words<C>("position", "--position",
                   "How positions enter the model: none, sinusoidal, learned "
                   "(absolute, at the input), or inside attention: shaw "
                   "(Shaw et al.; 'relative' is its old name), shaw-asym, "
                   "shaw-log, t5, alibi, rope, xl (docs/model.md)",
                   {"none", "sinusoidal", "learned", "shaw", "shaw-asym",
                    "shaw-log", "t5", "alibi", "rope", "xl", "relative"},
                   [](const C& c) { return ToString(c.position); },
                   [](C& c, const std::string& s, const std::string&) {
                     c.position = ParsePositionScheme(s);
                   }),
          pos),
      io::InGroup(Field<C>("max_distance", "--max-distance,-k",
                           "shaw: clipping distance k of relative positions",
                           &C::max_distance, Range{0, kMaxDistance}),
                  pos),
      io::InGroup(Field<C>("k_left", "--k-left",
                           "shaw-asym: distances r <= -k_left (the past) "
                           "share a row (w2v-BERT 2.0: 64)",
                           &C::k_left, Range{0, kMaxDistance}),
                  pos),
      io::InGroup(Field<C>("k_right", "--k-right",
                           "shaw-asym: distances r >= k_right (the future) "
                           "share a row (w2v-BERT 2.0: 8)",
                           &C::k_right, Range{0, kMaxDistance}),
                  pos),
      io::InGroup(Field<C>("num_buckets", "--num-buckets",
                           "t5, shaw-log: T5 buckets (Raffel et al.: 32); "
                           "bidirectional for encoders, causal for decoders",
                           &C::num_buckets, Range{2, kMaxBuckets}),
                  pos),
      io::InGroup(Field<C>("bucket_max_distance", "--bucket-max-distance",
                           "t5, shaw-log: distance where T5's logarithmic "
                           "buckets end (Raffel et al.: 128)",
                           &C::bucket_max_distance, Range{2, kMaxLen}),
                  pos),
      io::InGroup(Field<C>("rope_base", "--rope-base",
                           "rope: theta_t = base^(-2t/d_head) (Su et al.: "
                           "10000)",
                           &C::rope_base,
                           Range{.lo = 0,
                                 .hi = double(int64_t{1} << 40),
                                 .lo_open = true}),
                  pos),
      io::InGroup(
          Words<C>("rope_layout", "--rope-layout",
                   "rope: pairs (t, t + d/2) as GPT-NeoX / Hugging Face "
                   "Llama, or (2t, 2t+1) as the paper and GPT-J",
                   {"split_halves", "interleaved"},
                   [](const C& c) {
                     return std::string(c.rope_interleaved ? "interleaved"
                                                           : "split_halves");
                   },
                   [](C& c, const std::string& s, const std::string&) {
                     c.rope_interleaved = s == "interleaved";
                   }),
          pos),
      io::InGroup(Field<C>("key_term", "",
                           "Shaw's tables: relative term inside the "
                           "attention score",
                           &C::key_term),
                  pos),
      io::InGroup(Field<C>("value_term", "",
                           "Shaw's tables: relative term inside the "
                           "attention output",
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
                           "Shaw's tables: one table pair per head "
                           "(default: shared per layer)",
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

constexpr PositionScheme kAllSchemes[] = {
    PositionScheme::kNone,     PositionScheme::kSinusoidal,
    PositionScheme::kLearned,  PositionScheme::kShaw,
    PositionScheme::kShawAsym, PositionScheme::kShawLog,
    PositionScheme::kT5,       PositionScheme::kAlibi,
    PositionScheme::kRope,     PositionScheme::kXl};

std::string ToString(PositionScheme scheme) {
  switch (scheme) {
    case PositionScheme::kNone:
      return "none";
    case PositionScheme::kSinusoidal:
      return "sinusoidal";
    case PositionScheme::kLearned:
      return "learned";
    case PositionScheme::kShaw:
      return "shaw";
    case PositionScheme::kShawAsym:
      return "shaw-asym";
    case PositionScheme::kShawLog:
      return "shaw-log";
    case PositionScheme::kT5:
      return "t5";
    case PositionScheme::kAlibi:
      return "alibi";
    case PositionScheme::kRope:
      return "rope";
    case PositionScheme::kXl:
      return "xl";
  }
  return "unknown";
}

PositionScheme ParsePositionScheme(const std::string& name) {
  // Checkpoints written before the scheme family say "relative".
  if (name == "relative") return PositionScheme::kShaw;
  for (PositionScheme s : kAllSchemes) {
    if (ToString(s) == name) return s;
  }
  RELPOS_THROW(InvalidArgument,
               "unknown position scheme '"
                   << name
                   << "' (expected one of: none, sinusoidal, learned, shaw, "
                      "shaw-asym, shaw-log, t5, alibi, rope, xl; relative "
                      "is shaw)");
}

bool IsRelative(PositionScheme s) {
  return s != PositionScheme::kNone && s != PositionScheme::kSinusoidal &&
         s != PositionScheme::kLearned;
}

bool HasShawTables(PositionScheme s) {
  return s == PositionScheme::kShaw || s == PositionScheme::kShawAsym ||
         s == PositionScheme::kShawLog;
}

std::string ToString(Arch arch) {
  switch (arch) {
    case Arch::kEncoder:
      return "encoder";
    case Arch::kDecoder:
      return "decoder";
    case Arch::kSeq2seq:
      return "seq2seq";
  }
  return "unknown";
}

Arch ParseArch(const std::string& name) {
  for (Arch a : {Arch::kEncoder, Arch::kDecoder, Arch::kSeq2seq}) {
    if (ToString(a) == name) return a;
  }
  RELPOS_THROW(InvalidArgument,
               "unknown arch '" << name
                                << "' (expected one of: encoder, decoder, "
                                   "seq2seq)");
}

int64_t DecoderLayers(const ModelConfig& c) {
  return c.decoder_layers < 0 ? c.layers : c.decoder_layers;
}

namespace {
ModelConfig SideOf(const ModelConfig& c, Arch side, int64_t layers) {
  if (c.arch != Arch::kSeq2seq) return c;
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

namespace {

// The checks that depend on the position scheme, for one side of the model
// (its arch decides T5's bucket direction).
void ValidateScheme(const ModelConfig& c) {
  const int64_t dh_int = c.d_model / c.heads;
  // Shaw's switches mean nothing to the other schemes: refuse them there
  // rather than ignore them silently.
  if (!HasShawTables(c.position)) {
    RELPOS_CHECK_ARG(!c.per_head_tables,
                     "model config field 'per_head_tables' applies to Shaw's "
                     "tables (shaw, shaw-asym, shaw-log); position '"
                         << ToString(c.position) << "' has none (got true)");
    RELPOS_CHECK_ARG(c.key_term && c.value_term,
                     "model config fields 'key_term' / 'value_term' (terms) "
                     "apply to Shaw's tables (shaw, shaw-asym, shaw-log); "
                     "position '"
                         << ToString(c.position)
                         << "' has none (got key_term = "
                         << (c.key_term ? "true" : "false")
                         << ", value_term = "
                         << (c.value_term ? "true" : "false") << ")");
  }
  if (c.position == PositionScheme::kRope) {
    RELPOS_CHECK_ARG(dh_int % 2 == 0,
                     "model config position 'rope' needs an even head width "
                     "d_model / heads (got "
                         << c.d_model << " / " << c.heads << " = " << dh_int
                         << ")");
  }
  if (c.position == PositionScheme::kXl) {
    RELPOS_CHECK_ARG(c.d_model % 2 == 0,
                     "model config position 'xl' needs an even d_model "
                     "(sines and cosines; got "
                         << c.d_model << ")");
  }
  if (c.position == PositionScheme::kT5 ||
      c.position == PositionScheme::kShawLog) {
    // T5's buckets need exact = half / 2 >= 1 and a non-empty log range.
    const bool bidirectional = c.arch == Arch::kEncoder;
    const int64_t half = bidirectional ? c.num_buckets / 2 : c.num_buckets;
    const int64_t exact = half / 2;
    RELPOS_CHECK_ARG(exact >= 1,
                     "model config field 'num_buckets' must be >= "
                         << (bidirectional ? 4 : 2) << " for "
                         << (bidirectional ? "an encoder's bidirectional"
                                           : "a decoder's causal")
                         << " T5 buckets (got " << c.num_buckets << ")");
    RELPOS_CHECK_ARG(c.bucket_max_distance > exact,
                     "model config field 'bucket_max_distance' must exceed "
                     "the exact buckets' reach "
                         << exact << " (num_buckets = " << c.num_buckets
                         << "; got " << c.bucket_max_distance << ")");
  }
}

// Parameters of one block's self-attention and feed-forward sublayers,
// position tensors included, in double (every factor is capped, so this
// cannot overflow).
double BlockParameters(const ModelConfig& c) {
  const double d = static_cast<double>(c.d_model);
  const double dh = d / static_cast<double>(c.heads);
  double per_layer = 4.0 * (d * d + d) + 2.0 * d * static_cast<double>(c.d_ff) +
                     static_cast<double>(c.d_ff) + d + 4.0 * d;
  if (HasShawTables(c.position)) {
    double rows = 2.0 * static_cast<double>(c.max_distance) + 1.0;
    if (c.position == PositionScheme::kShawAsym) {
      rows = static_cast<double>(c.k_left) + static_cast<double>(c.k_right) +
             1.0;
    } else if (c.position == PositionScheme::kShawLog) {
      rows = static_cast<double>(c.num_buckets);
    }
    const double tables =
        static_cast<double>(c.key_term) + static_cast<double>(c.value_term);
    per_layer += tables * rows * dh *
                 (c.per_head_tables ? static_cast<double>(c.heads) : 1.0);
  } else if (c.position == PositionScheme::kT5) {
    per_layer += static_cast<double>(c.heads * c.num_buckets);
  } else if (c.position == PositionScheme::kXl) {
    per_layer += d * d + 2.0 * d;
  }
  return per_layer;
}

}  // namespace

void Validate(const ModelConfig& c) {
  io::ValidateSettings(ModelSettings(), c, kWhat);
  RELPOS_CHECK_ARG(c.heads <= c.d_model && c.d_model % c.heads == 0,
                   "model config field 'heads' must divide d_model="
                       << c.d_model << " (got " << c.heads << ")");
  RELPOS_CHECK_ARG(c.arch == Arch::kSeq2seq || c.decoder_layers == -1,
                   "model config field 'decoder_layers' applies to arch "
                   "seq2seq; arch '"
                       << ToString(c.arch) << "' has one stack, 'layers' (got "
                       << c.decoder_layers << ")");
  const double d = static_cast<double>(c.d_model);
  const double vocab = static_cast<double>(c.vocab_size);
  const double learned = c.position == PositionScheme::kLearned
                             ? static_cast<double>(c.max_len) * d
                             : 0.0;
  double total = 0;
  if (c.arch == Arch::kSeq2seq) {
    // Each side's scheme (T5's buckets: bidirectional in the encoder,
    // causal in the decoder); a decoder block adds the cross-attention
    // sublayer (projections and its LayerNorm). One tied embedding, the
    // output bias, two final LayerNorms and two learned tables.
    ValidateScheme(EncoderSide(c));
    ValidateScheme(DecoderSide(c));
    const double cross = 4.0 * (d * d + d) + 2.0 * d;
    total = static_cast<double>(c.layers) * BlockParameters(c) +
            static_cast<double>(DecoderLayers(c)) *
                (BlockParameters(c) + cross) +
            vocab * d + vocab + 4.0 * d + 2.0 * learned;
  } else {
    ValidateScheme(c);
    total = static_cast<double>(c.layers) * BlockParameters(c) +
            2.0 * vocab * d + vocab + 2.0 * d + learned;
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
