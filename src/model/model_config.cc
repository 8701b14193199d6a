// ModelConfig <-> JSON and validation (declared in transformer.h).
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/check.h"
#include "model/transformer.h"

namespace relpos::model {
namespace {

// Size caps: a config may come from an untrusted checkpoint, and these keep
// every size product far from int64 overflow and allocations sane.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxDModel = 65536;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxDff = int64_t{1} << 20;
constexpr int64_t kMaxLen = int64_t{1} << 24;
constexpr int64_t kMaxDistance = int64_t{1} << 20;
constexpr double kMaxParams = 2147483648.0;  // 2^31 floats = 8 GiB

void CheckRange(const char* field, int64_t value, int64_t lo, int64_t hi) {
  RELPOS_CHECK_ARG(value >= lo && value <= hi,
                   "model config field '" << field << "' must be in [" << lo
                                          << ", " << hi << "] (got " << value
                                          << ")");
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

void Validate(const ModelConfig& c) {
  CheckRange("vocab_size", c.vocab_size, 1, kMaxVocab);
  CheckRange("d_model", c.d_model, 1, kMaxDModel);
  CheckRange("heads", c.heads, 1, c.d_model);
  RELPOS_CHECK_ARG(c.d_model % c.heads == 0,
                   "model config field 'heads' must divide d_model="
                       << c.d_model << " (got " << c.heads << ")");
  CheckRange("layers", c.layers, 0, kMaxLayers);
  CheckRange("d_ff", c.d_ff, 1, kMaxDff);
  CheckRange("max_len", c.max_len, 1, kMaxLen);
  CheckRange("max_distance", c.max_distance, 0, kMaxDistance);
  RELPOS_CHECK_ARG(std::isfinite(c.rel_init_scale) && c.rel_init_scale >= 0,
                   "model config field 'rel_init_scale' must be finite and "
                   ">= 0 (got "
                       << c.rel_init_scale << ")");
  RELPOS_CHECK_ARG(std::isfinite(c.dropout) && c.dropout >= 0 && c.dropout < 1,
                   "model config field 'dropout' must be in [0, 1) (got "
                       << c.dropout << ")");
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
  nlohmann::json j;
  j["arch"] = ToString(c.arch);
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["heads"] = c.heads;
  j["layers"] = c.layers;
  j["d_ff"] = c.d_ff;
  j["max_len"] = c.max_len;
  j["position"] = ToString(c.position);
  j["max_distance"] = c.max_distance;
  j["key_term"] = c.key_term;
  j["value_term"] = c.value_term;
  j["per_head_tables"] = c.per_head_tables;
  j["rel_init_scale"] = c.rel_init_scale;
  j["dropout"] = c.dropout;
  j["seed"] = c.seed;
  return j;
}

ModelConfig ModelConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object()) {
    RELPOS_THROW(FormatError, "model config must be a JSON object (got "
                                  << j.type_name() << ")");
  }
  ModelConfig c;
  auto type_error = [](const std::string& key, const char* want,
                       const nlohmann::json& v) {
    RELPOS_THROW(FormatError, "model config field '" << key << "' must be "
                                                     << want << " (got "
                                                     << v.dump() << ")");
  };
  for (const auto& item : j.items()) {
    // Named copies rather than structured bindings: the lambdas below capture
    // them, which clang 14 (used for the fuzzers) does not allow for bindings.
    const std::string key = item.key();
    const nlohmann::json& v = item.value();
    auto get_int = [&](int64_t* out) {
      if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          type_error(key, "an integer below 2^63", v);
        }
        *out = static_cast<int64_t>(u);
      } else if (v.is_number_integer()) {
        *out = v.get<int64_t>();
      } else {
        type_error(key, "an integer", v);
      }
    };
    auto get_bool = [&](bool* out) {
      if (!v.is_boolean()) type_error(key, "true or false", v);
      *out = v.get<bool>();
    };
    auto get_double = [&](double* out) {
      if (!v.is_number()) type_error(key, "a number", v);
      *out = v.get<double>();
    };
    auto get_string = [&]() {
      if (!v.is_string()) type_error(key, "a string", v);
      return v.get<std::string>();
    };
    if (key == "arch") {
      const std::string s = get_string();
      RELPOS_CHECK_ARG(s == "encoder" || s == "decoder",
                       "model config field 'arch' must be encoder or decoder "
                       "(got '"
                           << s << "')");
      c.arch = ParseArch(s);
    } else if (key == "vocab_size") {
      get_int(&c.vocab_size);
    } else if (key == "d_model") {
      get_int(&c.d_model);
    } else if (key == "heads") {
      get_int(&c.heads);
    } else if (key == "layers") {
      get_int(&c.layers);
    } else if (key == "d_ff") {
      get_int(&c.d_ff);
    } else if (key == "max_len") {
      get_int(&c.max_len);
    } else if (key == "position") {
      const std::string s = get_string();
      try {
        c.position = ParsePositionScheme(s);
      } catch (const InvalidArgument& e) {
        RELPOS_THROW(InvalidArgument,
                     "model config field 'position': " << (e.what() + 8));
      }
    } else if (key == "max_distance") {
      get_int(&c.max_distance);
    } else if (key == "key_term") {
      get_bool(&c.key_term);
    } else if (key == "value_term") {
      get_bool(&c.value_term);
    } else if (key == "per_head_tables") {
      get_bool(&c.per_head_tables);
    } else if (key == "rel_init_scale") {
      get_double(&c.rel_init_scale);
    } else if (key == "dropout") {
      get_double(&c.dropout);
    } else if (key == "seed") {
      if (!v.is_number_unsigned() &&
          !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
        type_error(key, "a non-negative integer", v);
      }
      c.seed = v.get<uint64_t>();
    } else {
      RELPOS_THROW(FormatError,
                   "model config has unknown field '" << key << "'");
    }
  }
  Validate(c);
  return c;
}

}  // namespace relpos::model
