// The position-scheme registry (relpos/schemes.h): every entry by name,
// alias and id; the settings each reads and their defaults (against
// docs/settings.md and the papers); sides; table names, shapes and
// initialisation; the attention call of each; validation; and that every
// entry's tables and call form a valid attention call of the op.
#include "relpos/schemes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "support/attention_cases.h"
#include "support/expect_invalid.h"

namespace relpos {
namespace {

using S = SchemeSetting;

const std::vector<std::string> kNames = {
    "none",     "sinusoidal", "learned", "shaw", "shaw-asym",
    "shaw-log", "t5",         "alibi",   "rope", "xl"};

TEST(Schemes, EveryEntryByNameAliasAndId) {
  ASSERT_EQ(Schemes().size(), kNames.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < Schemes().size(); ++i) {
    const Scheme& s = Schemes()[i];
    EXPECT_EQ(s.name, kNames[i]);
    EXPECT_EQ(static_cast<size_t>(s.id), i) << s.name;
    EXPECT_EQ(&FindScheme(s.name), &s);
    EXPECT_EQ(&FindScheme(s.id), &s);
    EXPECT_TRUE(seen.insert(s.name).second) << s.name;
    for (const std::string& alias : s.aliases) {
      EXPECT_EQ(&FindScheme(alias), &s) << alias;
      EXPECT_TRUE(seen.insert(alias).second) << alias;
    }
    EXPECT_NE(std::string(s.summary), "") << s.name;
  }
  EXPECT_EQ(FindScheme("relative").id, SchemeId::kShaw);
  EXPECT_EQ(SchemeId::kRelative, SchemeId::kShaw);
  EXPECT_EQ(FindScheme(SchemeId::kXl).name, std::string("xl"));
}

TEST(Schemes, UnknownNameListsTheAcceptedOnes) {
  std::vector<std::string> needles = {"unknown position scheme", "'rotary'",
                                      "relative"};
  needles.insert(needles.end(), kNames.begin(), kNames.end());
  try {
    FindScheme("rotary");
    ADD_FAILURE() << "no InvalidArgument";
  } catch (const InvalidArgument& e) {
    for (const std::string& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << e.what() << " lacks " << n;
    }
  }
  ExpectInvalid([] { FindScheme(""); }, {"unknown position scheme"});
  ExpectInvalid([] { FindScheme("Shaw"); }, {"'Shaw'"});  // case matters
  ExpectInvalid([] { FindScheme(static_cast<SchemeId>(99)); }, {"99"});
  EXPECT_EQ(SchemeNameList(),
            "none, sinusoidal, learned, shaw (alias relative), shaw-asym, "
            "shaw-log, t5, alibi, rope, xl");
}

// The defaults of the papers, as docs/model.md cites them.
TEST(Schemes, DefaultSettings) {
  const SchemeSettings d = kDefaultSchemeSettings;
  EXPECT_EQ(d.max_len, 1024);
  EXPECT_EQ(d.max_distance, 16);
  EXPECT_EQ(d.k_left, 64);  // w2v-BERT 2.0
  EXPECT_EQ(d.k_right, 8);
  EXPECT_EQ(d.num_buckets, 32);  // Raffel et al. 2020
  EXPECT_EQ(d.bucket_max_distance, 128);
  EXPECT_EQ(d.rope_base, 10000.0);  // Su et al. 2021
  EXPECT_EQ(d.rope_layout, RopeLayout::kSplitHalves);
  EXPECT_TRUE(d.key_term);  // Shaw et al. 2018: both terms, shared tables
  EXPECT_TRUE(d.value_term);
  EXPECT_FALSE(d.per_head_tables);
  EXPECT_EQ(d.rel_init_scale, 1.0);
}

TEST(Schemes, SettingsEachSchemeReads) {
  const std::vector<S> shaw_tables = {S::kPerHeadTables, S::kKeyTerm,
                                      S::kValueTerm, S::kRelInitScale};
  auto with_tables = [&](std::vector<S> v) {
    v.insert(v.end(), shaw_tables.begin(), shaw_tables.end());
    return v;
  };
  const std::map<std::string, std::vector<S>> want = {
      {"none", {}},
      {"sinusoidal", {}},
      {"learned", {S::kMaxLen}},
      {"shaw", with_tables({S::kMaxDistance})},
      {"shaw-asym", with_tables({S::kKLeft, S::kKRight})},
      {"shaw-log", with_tables({S::kNumBuckets, S::kBucketMaxDistance})},
      {"t5", {S::kNumBuckets, S::kBucketMaxDistance}},
      {"alibi", {}},
      {"rope", {S::kRopeBase, S::kRopeLayout}},
      {"xl", {}}};
  for (const Scheme& s : Schemes()) {
    EXPECT_EQ(s.settings, want.at(s.name)) << s.name;
    for (S setting : AllSchemeSettings()) {
      const bool reads =
          std::find(want.at(s.name).begin(), want.at(s.name).end(), setting) !=
          want.at(s.name).end();
      EXPECT_EQ(s.Reads(setting), reads)
          << s.name << " " << SettingKey(setting);
    }
  }
  // Every setting is read by some scheme, and keys are unique.
  std::set<std::string> keys;
  for (S setting : AllSchemeSettings()) {
    EXPECT_TRUE(keys.insert(SettingKey(setting)).second);
    bool read = false;
    for (const Scheme& s : Schemes()) read = read || s.Reads(setting);
    EXPECT_TRUE(read) << SettingKey(setting);
  }
  EXPECT_EQ(keys.size(), AllSchemeSettings().size());
}

// The registry's defaults as docs/settings.md writes them.
std::string DefaultText(S setting) {
  const SchemeSettings& d = kDefaultSchemeSettings;
  return std::visit(
      [&](auto member) -> std::string {
        const auto value = d.*member;
        using T = std::remove_cvref_t<decltype(value)>;
        if constexpr (std::is_same_v<T, RopeLayout>) {
          return value == RopeLayout::kSplitHalves ? "split_halves"
                                                   : "interleaved";
        } else if constexpr (std::is_same_v<T, bool>) {
          return value ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%g", value);
          return buf;
        } else {
          return std::to_string(value);
        }
      },
      FindSchemeSetting(setting).member);
}

// The rows: one per setting in id order, unique keys with help, and a
// stored config's range inside the layer's (a config that passes its own
// checks never fails the registry's on a range).
TEST(Schemes, SettingRows) {
  ASSERT_EQ(SchemeSettingInfos().size(), AllSchemeSettings().size());
  for (size_t i = 0; i < SchemeSettingInfos().size(); ++i) {
    const SchemeSettingInfo& info = SchemeSettingInfos()[i];
    EXPECT_EQ(static_cast<size_t>(info.id), i) << info.key;
    EXPECT_EQ(AllSchemeSettings()[i], info.id) << info.key;
    EXPECT_EQ(&FindSchemeSetting(info.id), &info) << info.key;
    EXPECT_EQ(SettingKey(info.id), std::string(info.key));
    EXPECT_NE(std::string(info.help), "") << info.key;
    const SettingRange &r = info.range, &c = info.config_range;
    if (r.bounded()) {
      EXPECT_TRUE(c.lo > r.lo || (c.lo == r.lo && (c.lo_open || !r.lo_open)))
          << info.key;
      EXPECT_TRUE(c.hi < r.hi || (c.hi == r.hi && (c.hi_open || !r.hi_open)))
          << info.key;
    }
  }
  // A row's member is its own field (DefaultsMatchDocsSettings compares
  // every row's default with docs/settings.md).
  EXPECT_EQ(DefaultText(S::kMaxDistance), "16");
  EXPECT_EQ(DefaultText(S::kKLeft), "64");
  EXPECT_EQ(DefaultText(S::kRopeLayout), "split_halves");
}

TEST(Schemes, DefaultsMatchDocsSettings) {
  std::ifstream in(std::string(RELPOS_SOURCE_DIR) + "/docs/settings.md");
  ASSERT_TRUE(in) << "docs/settings.md is missing";
  std::map<std::string, std::string> defaults;  // key -> default column
  for (std::string line; std::getline(in, line);) {
    // | `key` | flag | type | `default` | valid | meaning |
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    if (cells.size() < 6) continue;
    auto strip = [](std::string c) {
      const std::string junk = " `";
      c.erase(0, c.find_first_not_of(junk));
      c.erase(c.find_last_not_of(junk) + 1);
      return c;
    };
    defaults[strip(cells[1])] = strip(cells[4]);
  }
  for (S setting : AllSchemeSettings()) {
    ASSERT_TRUE(defaults.count(SettingKey(setting))) << SettingKey(setting);
    EXPECT_EQ(defaults[SettingKey(setting)], DefaultText(setting))
        << SettingKey(setting);
  }
}

TEST(Schemes, Sides) {
  using Side = SchemeSide;
  const std::map<std::string, std::vector<Side>> want = {
      {"none", {}},
      {"sinusoidal", {Side::kInput}},
      {"learned", {Side::kInput}},
      {"shaw", {Side::kScore, Side::kValue}},
      {"shaw-asym", {Side::kScore, Side::kValue}},
      {"shaw-log", {Side::kScore, Side::kValue}},
      {"t5", {Side::kScore}},
      {"alibi", {Side::kScore}},
      {"rope", {Side::kRotation}},
      {"xl", {Side::kScore, Side::kQueryBias}}};
  for (const Scheme& s : Schemes()) {
    EXPECT_EQ(s.sides, want.at(s.name)) << s.name;
    const bool inside = s.name != std::string("none") &&
                        s.name != std::string("sinusoidal") &&
                        s.name != std::string("learned");
    EXPECT_EQ(s.InsideAttention(), inside) << s.name;
    EXPECT_EQ(s.ActsOn(Side::kInput), !inside && s.id != SchemeId::kNone);
  }
  EXPECT_EQ(FindScheme("sinusoidal").input, SchemeInput::kSinusoid);
  EXPECT_EQ(FindScheme("learned").input, SchemeInput::kLearnedTable);
  EXPECT_EQ(FindScheme("shaw").input, SchemeInput::kNone);
  EXPECT_EQ(std::string(SideName(Side::kQueryBias)), "query_bias");
}

// A layer with small, distinct sizes: H = 3, dh = 4, d_model = 12.
SchemeLayer SmallLayer(bool causal = false) {
  SchemeLayer l;
  l.heads = 3;
  l.head_dim = 4;
  l.causal = causal;
  l.settings.max_len = 20;
  l.settings.max_distance = 2;
  l.settings.k_left = 3;
  l.settings.k_right = 1;
  l.settings.num_buckets = 8;
  l.settings.bucket_max_distance = 12;
  l.settings.rel_init_scale = 0.5;
  return l;
}

struct TableWant {
  std::string name;
  TableRole role;
  std::vector<int64_t> shape;
  TableInitKind init;
  double scale;
};

void ExpectTables(const std::string& scheme, const SchemeLayer& l,
                  const std::vector<TableWant>& want) {
  const std::vector<SchemeTable> got = FindScheme(scheme).Tables(l);
  ASSERT_EQ(got.size(), want.size()) << scheme;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name) << scheme;
    EXPECT_EQ(got[i].role, want[i].role) << scheme << " " << got[i].name;
    EXPECT_EQ(got[i].shape, want[i].shape) << scheme << " " << got[i].name;
    EXPECT_EQ(got[i].init, want[i].init) << scheme << " " << got[i].name;
    EXPECT_DOUBLE_EQ(got[i].scale, want[i].scale)
        << scheme << " " << got[i].name;
    EXPECT_EQ(got[i].per_layer(), want[i].role != TableRole::kInputTable);
  }
}

TEST(Schemes, TablesNamesShapesAndInitialisation) {
  using R = TableRole;
  using I = TableInitKind;
  const SchemeLayer l = SmallLayer();
  const double lecun = 1.0 / std::sqrt(12.0);
  for (const char* none : {"none", "sinusoidal", "alibi", "rope"}) {
    ExpectTables(none, l, {});
  }
  ExpectTables("learned", l,
               {{"embed.position", R::kInputTable, {20, 12}, I::kNormal, 1.0}});
  auto shaw = [](int64_t rows) {
    return std::vector<TableWant>{
        {"rel_k", R::kKeyTable, {rows, 4}, I::kXavierNormal, 0.5},
        {"rel_v", R::kValueTable, {rows, 4}, I::kXavierNormal, 0.5}};
  };
  ExpectTables("shaw", l, shaw(5));       // 2k + 1
  ExpectTables("shaw-asym", l, shaw(5));  // k_left + k_right + 1
  ExpectTables("shaw-log", l, shaw(8));   // num_buckets
  ExpectTables("t5", l,
               {{"t5_bias", R::kScoreBias, {3, 8}, I::kNormal, lecun}});
  ExpectTables("xl", l,
               {{"xl_w", R::kXlProjection, {12, 12}, I::kNormal, lecun},
                {"xl_u", R::kXlContentBias, {3, 4}, I::kNormal, 0.02},
                {"xl_v", R::kXlPositionBias, {3, 4}, I::kNormal, 0.02}});
  // Shaw's layout and terms.
  SchemeLayer per_head = l;
  per_head.settings.per_head_tables = true;
  per_head.settings.key_term = false;
  ExpectTables("shaw", per_head,
               {{"rel_v", R::kValueTable, {3, 5, 4}, I::kXavierNormal, 0.5}});
  per_head.settings.key_term = true;
  per_head.settings.value_term = false;
  per_head.settings.max_distance = 0;
  ExpectTables("shaw", per_head,
               {{"rel_k", R::kKeyTable, {3, 1, 4}, I::kXavierNormal, 0.5}});
  // The declared tables are the union over settings, in checkpoint order.
  std::vector<std::string> declared;
  for (const SchemeTableDef& d : FindScheme("shaw-log").table_defs) {
    declared.push_back(d.name);
  }
  EXPECT_EQ(declared, (std::vector<std::string>{"rel_k", "rel_v"}));
}

TEST(Schemes, CallsOfEachScheme) {
  for (bool causal : {false, true}) {
    const SchemeLayer l = SmallLayer(causal);
    auto call = [&](const char* name) { return FindScheme(name).Call(l, 7); };
    for (const char* plain : {"none", "sinusoidal", "learned", "rope"}) {
      const SchemeCall c = call(plain);
      EXPECT_FALSE(c.attention.key_term) << plain;
      EXPECT_FALSE(c.attention.value_term) << plain;
      EXPECT_EQ(c.attention.max_distance, 0) << plain;
      EXPECT_EQ(c.attention.causal, causal) << plain;
      EXPECT_EQ(c.rope.has_value(), std::string(plain) == "rope");
      EXPECT_FALSE(c.xl_table);
    }
    const SchemeCall rope = call("rope");
    EXPECT_EQ(rope.rope->base, 10000.0);
    EXPECT_EQ(rope.rope->layout, RopeLayout::kSplitHalves);

    const AttentionOptions shaw = call("shaw").attention;
    EXPECT_EQ(shaw.buckets.kind, BucketKind::kSymmetricClip);
    EXPECT_EQ(shaw.max_distance, 2);
    EXPECT_EQ(shaw.score_term, ScoreTerm::kVector);
    EXPECT_TRUE(shaw.key_term && shaw.value_term);
    EXPECT_FALSE(shaw.per_head_tables || shaw.position_query_bias);
    EXPECT_EQ(shaw.causal, causal);

    const AttentionOptions asym = call("shaw-asym").attention;
    EXPECT_EQ(asym.buckets.kind, BucketKind::kClip);
    EXPECT_EQ(asym.buckets.clip.left, 3);
    EXPECT_EQ(asym.buckets.clip.right, 1);
    EXPECT_TRUE(asym.key_term && asym.value_term);

    for (const char* t5 : {"shaw-log", "t5"}) {
      const AttentionOptions o = call(t5).attention;
      EXPECT_EQ(o.buckets.kind, BucketKind::kT5) << t5;
      EXPECT_EQ(o.buckets.t5.num_buckets, 8) << t5;
      EXPECT_EQ(o.buckets.t5.max_distance, 12) << t5;
      // Hugging Face T5: bidirectional encoders, causal decoders.
      EXPECT_EQ(o.buckets.t5.bidirectional, !causal) << t5;
      EXPECT_TRUE(o.key_term) << t5;
    }
    EXPECT_EQ(call("shaw-log").attention.score_term, ScoreTerm::kVector);
    EXPECT_TRUE(call("shaw-log").attention.value_term);
    EXPECT_EQ(call("t5").attention.score_term, ScoreTerm::kScalarTable);
    EXPECT_FALSE(call("t5").attention.value_term);

    const AttentionOptions alibi = call("alibi").attention;
    EXPECT_EQ(alibi.score_term, ScoreTerm::kAlibi);
    EXPECT_TRUE(alibi.key_term);
    EXPECT_FALSE(alibi.value_term);
    EXPECT_TRUE(alibi.alibi_slopes.empty());  // the paper's rule

    const SchemeCall xl = call("xl");
    EXPECT_TRUE(xl.xl_table);
    EXPECT_EQ(xl.attention.max_distance, 6);  // 7 keys: unclipped
    EXPECT_TRUE(xl.attention.per_head_tables && xl.attention.key_term &&
                xl.attention.position_query_bias);
    EXPECT_FALSE(xl.attention.value_term);
    EXPECT_EQ(FindScheme("xl").Call(l, 1).attention.max_distance, 0);
  }
  // Shaw's settings reach the options.
  SchemeLayer l = SmallLayer();
  l.settings.per_head_tables = true;
  l.settings.key_term = false;
  const AttentionOptions o = FindScheme("shaw-asym").Call(l, 1).attention;
  EXPECT_TRUE(o.per_head_tables);
  EXPECT_FALSE(o.key_term);
  EXPECT_TRUE(o.value_term);
  l.settings.rope_base = 500000.0;
  l.settings.rope_layout = RopeLayout::kInterleaved;
  const SchemeCall rope = FindScheme("rope").Call(l, 1);
  EXPECT_EQ(rope.rope->base, 500000.0);
  EXPECT_EQ(rope.rope->layout, RopeLayout::kInterleaved);
  // Every label names settings the scheme reads.
  for (const Scheme& s : Schemes()) {
    const std::string label = s.label;
    for (size_t open = label.find('{'); open != std::string::npos;
         open = label.find('{', open + 1)) {
      const std::string key =
          label.substr(open + 1, label.find('}', open) - open - 1);
      bool read = false;
      for (S setting : s.settings) read = read || key == SettingKey(setting);
      EXPECT_TRUE(read) << s.name << " label " << label;
    }
  }
}

TEST(Schemes, ValidateNamesTheSetting) {
  auto bad = [](const char* scheme, SchemeLayer l,
                std::initializer_list<std::string> needles) {
    ExpectInvalid([&] { FindScheme(scheme).Validate(l); }, needles);
  };
  for (const Scheme& s : Schemes()) {
    EXPECT_NO_THROW(s.Validate(SmallLayer())) << s.name;
    EXPECT_NO_THROW(s.Validate(SmallLayer(true))) << s.name;
    SchemeLayer zero = SmallLayer();
    zero.heads = 0;
    bad(s.name, zero, {s.name, "heads", "0"});
  }
  SchemeLayer l = SmallLayer();
  l.settings.k_left = -1;
  bad("shaw-asym", l, {"shaw-asym", "k_left", "-1"});
  EXPECT_NO_THROW(FindScheme("shaw").Validate(l));  // not read
  l = SmallLayer();
  l.settings.max_distance = int64_t{1} << 25;
  bad("shaw", l, {"shaw", "max_distance", "33554432"});
  l = SmallLayer();
  l.settings.num_buckets = 3;  // exact = 3 / 2 / 2 = 0 when bidirectional
  bad("t5", l, {"t5", "num_buckets", "3", "bidirectional"});
  bad("shaw-log", l, {"shaw-log", "num_buckets", "3"});
  l.causal = true;  // causal: exact = 3 / 2 = 1
  EXPECT_NO_THROW(FindScheme("t5").Validate(l));
  l = SmallLayer();
  l.settings.bucket_max_distance = 2;  // exact = 8 / 4 = 2
  bad("t5", l, {"bucket_max_distance", "2"});
  l = SmallLayer();
  l.head_dim = 3;
  bad("rope", l, {"rope", "even", "3"});
  l = SmallLayer();
  l.heads = 3;
  l.head_dim = 3;  // d_model 9
  bad("xl", l, {"xl", "d_model", "9"});
  l = SmallLayer();
  l.settings.rope_base = 0.0;
  bad("rope", l, {"rope_base", "0"});
  l.settings.rope_base = std::nan("");
  bad("rope", l, {"rope_base"});
  l = SmallLayer();
  l.settings.rel_init_scale = -1.0;
  bad("shaw-log", l, {"rel_init_scale", "-1"});
  l = SmallLayer();
  l.settings.max_len = 0;
  bad("learned", l, {"learned", "max_len", "0"});
}

// Every entry's tables (by role) and call make a valid attention call of
// the op, fused and reference, whose results agree: a wrong table shape or
// an inconsistent option would throw or differ here.
TEST(Schemes, EveryEntryRunsThroughTheOp) {
  for (const Scheme& s : Schemes()) {
    for (bool causal : {false, true}) {
      const SchemeLayer l = SmallLayer(causal);
      const int64_t n = 9;
      const SchemeCall call = s.Call(l, n);
      AttentionCase c =
          MakeCase("registry", 2, l.heads, n, n, l.head_dim, l.head_dim, 0);
      c.options = call.attention;
      AttentionData<float> d = MakeRandomData<float>(c, 3);
      // The registry's tables in place of the case's own, where it has them.
      for (const SchemeTable& t : s.Tables(l)) {
        int64_t numel = 1;
        for (int64_t e : t.shape) numel *= e;
        if (t.role == TableRole::kKeyTable) {
          EXPECT_EQ(numel, c.AkNumel()) << s.name;
        } else if (t.role == TableRole::kValueTable) {
          EXPECT_EQ(numel, c.AvNumel()) << s.name;
        } else if (t.role == TableRole::kScoreBias) {
          EXPECT_EQ(t.shape, (std::vector<int64_t>{l.heads, c.TableRows()}));
        }
      }
      for (AttentionPath path :
           {AttentionPath::kFused, AttentionPath::kReference}) {
        c.options.path = path;
        AttentionOutputBuffers<float> out = MakeOutputs<float>(c);
        ASSERT_NO_THROW(AttentionForward<float>(d.Inputs(), out.Out(),
                                                out.Lse(), c.options))
            << s.name;
        for (float x : out.out) ASSERT_TRUE(std::isfinite(x)) << s.name;
      }
    }
  }
}

}  // namespace
}  // namespace relpos
