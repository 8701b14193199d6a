// relpos._relpos_ext, the position-scheme registry (include/relpos/schemes.h)
// for python/relpos/_registry.py: the entries as plain Python values, and a
// layer's tables and attention call. Like the other bindings, type checks
// and the Python objects live in the Python layer; every value check is the
// C++ registry's (its InvalidArgument becomes ValueError).
#include "schemes_ext.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "relpos/error.h"
#include "relpos/rope.h"
#include "relpos/schemes.h"

namespace nb = nanobind;

namespace relpos {
namespace {

const char* InitName(TableInitKind init) {
  return init == TableInitKind::kXavierNormal ? "xavier_normal" : "normal";
}

// relpos._relpos_ext.SchemeSettings: one attribute per row of the registry
// (SchemeSettingInfos), named by its key, rope_layout as its name.
void BindSettings(nb::module_& m) {
  using S = SchemeSettings;
  nb::class_<S> settings(
      m, "SchemeSettings",
      "Internal: relpos::SchemeSettings (relpos/schemes.h).");
  settings.def(nb::init<>());
  for (const SchemeSettingInfo& info : SchemeSettingInfos()) {
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(S().*member)>;
          if constexpr (std::is_same_v<T, RopeLayout>) {
            const std::string key = info.key;
            settings.def_prop_rw(
                info.key,
                [member](const S& s) {
                  return std::string(RopeLayoutName(s.*member));
                },
                [member, key](S& s, const std::string& name) {
                  s.*member = ParseRopeLayout(name, key.c_str());
                });
          } else {
            settings.def_rw(info.key, member);
          }
        },
        info.member);
  }
}

// Every entry: {name, aliases, summary, sides, input, settings, label,
// tables: [(name, role, init)]}.
nb::list Entries() {
  nb::list out;
  for (const Scheme& s : Schemes()) {
    nb::dict e;
    e["name"] = s.name;
    e["aliases"] = s.aliases;
    e["summary"] = s.summary;
    nb::list sides, settings, tables;
    for (SchemeSide side : s.sides) sides.append(SideName(side));
    for (SchemeSetting id : s.settings) settings.append(SettingKey(id));
    for (const SchemeTableDef& t : s.table_defs) {
      tables.append(nb::make_tuple(t.name, RoleName(t.role), InitName(t.init)));
    }
    e["sides"] = sides;
    e["settings"] = settings;
    e["tables"] = tables;
    e["input"] = s.input == SchemeInput::kSinusoid       ? "sinusoid"
                 : s.input == SchemeInput::kLearnedTable ? "learned_table"
                                                         : "none";
    e["label"] = s.label;
    out.append(e);
  }
  return out;
}

// The validated layer of `scheme`.
SchemeLayer MakeLayer(const Scheme& scheme, int64_t heads, int64_t head_dim,
                      bool causal, const SchemeSettings& settings) {
  const SchemeLayer l{.heads = heads,
                      .head_dim = head_dim,
                      .causal = causal,
                      .settings = settings};
  scheme.Validate(l);
  return l;
}

// [(name, role, shape, init, scale)] of the layer's tables.
nb::list Tables(const std::string& name, int64_t heads, int64_t head_dim,
                bool causal, const SchemeSettings& settings) {
  const Scheme& scheme = FindScheme(name);
  nb::list out;
  for (const SchemeTable& t :
       scheme.Tables(MakeLayer(scheme, heads, head_dim, causal, settings))) {
    out.append(nb::make_tuple(t.name, RoleName(t.role), t.shape,
                              InitName(t.init), t.scale));
  }
  return out;
}

// The call over at most max_key_length keys: the attention options as
// {max_distance, buckets ("symmetric" | "clip" | "t5"), bucket_args, score
// ("vector" | "scalar_table" | "alibi"), key_term, value_term,
// per_head_tables, position_query_bias, causal}, rope (None or {base,
// layout}) and xl_table.
nb::dict Call(const std::string& name, int64_t heads, int64_t head_dim,
              bool causal, int64_t max_key_length,
              const SchemeSettings& settings) {
  const Scheme& scheme = FindScheme(name);
  if (max_key_length < 1) {
    throw InvalidArgument("relpos: max_key_length must be >= 1 (got " +
                          std::to_string(max_key_length) + ")");
  }
  const SchemeCall c = scheme.Call(
      MakeLayer(scheme, heads, head_dim, causal, settings), max_key_length);
  const AttentionOptions& o = c.attention;
  nb::dict a;
  a["max_distance"] = o.max_distance;
  std::vector<int64_t> args;
  if (o.buckets.kind == BucketKind::kClip) {
    a["buckets"] = "clip";
    args = {o.buckets.clip.left, o.buckets.clip.right};
  } else if (o.buckets.kind == BucketKind::kT5) {
    a["buckets"] = "t5";
    args = {o.buckets.t5.num_buckets, o.buckets.t5.max_distance,
            o.buckets.t5.bidirectional ? 1 : 0};
  } else {
    a["buckets"] = "symmetric";
  }
  a["bucket_args"] = args;
  a["score"] = o.score_term == ScoreTerm::kScalarTable ? "scalar_table"
               : o.score_term == ScoreTerm::kAlibi     ? "alibi"
                                                       : "vector";
  a["key_term"] = o.key_term;
  a["value_term"] = o.value_term;
  a["per_head_tables"] = o.per_head_tables;
  a["position_query_bias"] = o.position_query_bias;
  a["causal"] = o.causal;
  nb::dict out;
  out["attention"] = a;
  if (c.rope) {
    nb::dict r;
    r["base"] = c.rope->base;
    r["layout"] = RopeLayoutName(c.rope->layout);
    out["rope"] = r;
  } else {
    out["rope"] = nb::none();
  }
  out["xl_table"] = c.xl_table;
  return out;
}

}  // namespace

void BindSchemes(nb::module_& m) {
  using namespace nb::literals;
  BindSettings(m);
  m.def(
      "scheme_setting_keys",
      [] {
        std::vector<std::string> keys;
        for (SchemeSetting s : AllSchemeSettings())
          keys.push_back(SettingKey(s));
        return keys;
      },
      "Internal: the SchemeSettings attributes, in order.");
  m.def("scheme_entries", &Entries, "Internal. Use relpos.schemes().");
  m.def(
      "scheme_name",
      [](const std::string& name) {
        return std::string(FindScheme(name).name);
      },
      "name"_a, "Internal. Use relpos.scheme(name).");
  m.def("scheme_tables", &Tables, "name"_a, "heads"_a, "head_dim"_a, "causal"_a,
        "settings"_a, "Internal. Use relpos.Scheme.tables.");
  m.def("scheme_call", &Call, "name"_a, "heads"_a, "head_dim"_a, "causal"_a,
        "max_key_length"_a, "settings"_a, "Internal. Use relpos.Scheme.call.");
}

}  // namespace relpos
