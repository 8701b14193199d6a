// The position-scheme registry of relpos/schemes.h: one entry per scheme,
// in SchemeId order (kEntries below). The mathematics of every relative
// scheme is docs/math.md section 8; the defaults and their sources are
// SchemeSettings's (docs/model.md, "Position schemes").
#include "relpos/schemes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>
#include <variant>

#include "base/check.h"
#include "relpos/position_schemes.h"

namespace relpos {
namespace {

// Layer sizes and per-setting reaches: far beyond any real model, small
// enough that every table size (a product of three of them) fits an int64.
constexpr int64_t kMaxWidth = int64_t{1} << 24;    // heads, dh, d_model
constexpr int64_t kMaxReach = int64_t{1} << 24;    // k, k_left, k_right
constexpr int64_t kMaxBuckets = int64_t{1} << 30;  // as ValidateT5Buckets
constexpr int64_t kMaxLen = int64_t{1} << 24;

// ---- validation --------------------------------------------------------

// InvalidArgument "position scheme 'NAME': <message>".
#define RELPOS_CHECK_SCHEME(condition, scheme, message) \
  RELPOS_CHECK_ARG(condition,                           \
                   "position scheme '" << (scheme) << "': " << message)

// A bound as the messages write it: 2^k for the large powers of two.
std::string BoundText(double x) {
  const int64_t i = static_cast<int64_t>(x);
  if (static_cast<double>(i) == x && i > 65536 && (i & (i - 1)) == 0) {
    int k = 0;
    while ((int64_t{1} << k) != i) ++k;
    return "2^" + std::to_string(k);
  }
  std::ostringstream os;
  os << x;
  return os.str();
}

// The range of one setting the scheme reads (SchemeSettingInfo::range), if
// it has one: "KEY must be in [lo, hi] (got v)", or "must be finite and >
// lo" for a real without an upper bound.
void CheckSetting(const char* scheme, const SchemeSettingInfo& info,
                  const SchemeSettings& s) {
  const SettingRange& r = info.range;
  if (!r.bounded()) return;
  std::visit(
      [&](auto member) {
        using T = std::remove_cvref_t<decltype(s.*member)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
          const T v = s.*member;
          const double x = static_cast<double>(v);
          const bool ok = std::isfinite(x) &&
                          (r.lo_open ? x > r.lo : x >= r.lo) &&
                          (r.hi_open ? x < r.hi : x <= r.hi);
          if (std::isinf(r.hi)) {
            RELPOS_CHECK_SCHEME(
                ok, scheme,
                info.key << " must be finite and " << (r.lo_open ? "> " : ">= ")
                         << BoundText(r.lo) << " (got " << v << ")");
          } else {
            RELPOS_CHECK_SCHEME(
                ok, scheme,
                info.key << " must be in " << (r.lo_open ? "(" : "[")
                         << BoundText(r.lo) << ", " << BoundText(r.hi)
                         << (r.hi_open ? ")" : "]") << " (got " << v << ")");
          }
        }
      },
      info.member);
}

// T5's buckets of the layer: bidirectional unless causal (Hugging Face T5's
// encoder and decoder self-attention).
T5Buckets T5Of(const SchemeLayer& l) {
  return {.num_buckets = l.settings.num_buckets,
          .max_distance = l.settings.bucket_max_distance,
          .bidirectional = !l.causal};
}

// t5, shaw-log: at least one exact bucket per side (exact = half / 2 >= 1)
// and a non-empty logarithmic range (bucket_max_distance > exact).
void CheckT5Buckets(const char* scheme, const SchemeLayer& l) {
  const T5Buckets b = T5Of(l);
  const int64_t half = b.bidirectional ? b.num_buckets / 2 : b.num_buckets;
  const int64_t exact = half / 2;
  RELPOS_CHECK_SCHEME(b.num_buckets <= kMaxBuckets && exact >= 1, scheme,
                      "num_buckets must be in ["
                          << (b.bidirectional ? 4 : 2) << ", 2^30] for "
                          << (b.bidirectional ? "bidirectional" : "causal")
                          << " T5 buckets (got " << b.num_buckets << ")");
  RELPOS_CHECK_SCHEME(b.max_distance > exact, scheme,
                      "bucket_max_distance must exceed the exact buckets' "
                      "reach "
                          << exact << " (num_buckets = " << b.num_buckets
                          << "; got " << b.max_distance << ")");
}

// ---- the pieces the entries are made of ---------------------------------

// Every relative term off, causal as the layer: plain softmax attention.
AttentionOptions PlainOptions(const SchemeLayer& l) {
  AttentionOptions o;
  o.causal = l.causal;
  o.path = AttentionPath::kAuto;
  o.max_distance = 0;
  o.per_head_tables = false;
  o.key_term = false;
  o.value_term = false;
  return o;
}

// Shaw's vector tables under the options' bucket map: the terms and the
// layout as the settings say.
SchemeCall ShawCall(const SchemeLayer& l, const BucketMap& buckets,
                    int64_t max_distance) {
  SchemeCall c;
  c.attention = PlainOptions(l);
  c.attention.buckets = buckets;
  c.attention.max_distance = max_distance;
  c.attention.per_head_tables = l.settings.per_head_tables;
  c.attention.key_term = l.settings.key_term;
  c.attention.value_term = l.settings.value_term;
  return c;
}

// Shaw's AK / AV: [nb, dh] shared by the heads, or [H, nb, dh].
std::vector<int64_t> ShawTableShape(const SchemeLayer& l,
                                    const AttentionOptions& o) {
  const int64_t rows = TableRows(o);
  if (o.per_head_tables) return {l.heads, rows, l.head_dim};
  return {rows, l.head_dim};
}

double RelInitScale(const SchemeLayer& l) { return l.settings.rel_init_scale; }
// LeCun normal, std = 1/sqrt(fan_in) with fan_in = d_model.
double LecunStd(const SchemeLayer& l) {
  return 1.0 / std::sqrt(static_cast<double>(l.d_model()));
}

// Shaw's AK (with key_term) and AV (with value_term), Xavier normal times
// rel_init_scale: shaw, shaw-asym and shaw-log differ only in the map.
std::vector<SchemeTableDef> ShawTables() {
  return {{.name = "rel_k",
           .role = TableRole::kKeyTable,
           .init = TableInitKind::kXavierNormal,
           .present = [](const SchemeSettings& s) { return s.key_term; },
           .shape = ShawTableShape,
           .scale = RelInitScale},
          {.name = "rel_v",
           .role = TableRole::kValueTable,
           .init = TableInitKind::kXavierNormal,
           .present = [](const SchemeSettings& s) { return s.value_term; },
           .shape = ShawTableShape,
           .scale = RelInitScale}};
}

// The settings of a Shaw scheme: those of its bucket map, then the tables'.
std::vector<SchemeSetting> ShawSettings(std::vector<SchemeSetting> map) {
  for (SchemeSetting s :
       {SchemeSetting::kPerHeadTables, SchemeSetting::kKeyTerm,
        SchemeSetting::kValueTerm, SchemeSetting::kRelInitScale}) {
    map.push_back(s);
  }
  return map;
}

SchemeCall PlainCall(const SchemeLayer& l, int64_t) {
  SchemeCall c;
  c.attention = PlainOptions(l);
  return c;
}

// ---- the entries, one function each, in SchemeId order -------------------

using S = SchemeSetting;
using Side = SchemeSide;

Scheme NoneEntry() {
  return {.id = SchemeId::kNone,
          .name = "none",
          .summary =
              "no position information (a bag of tokens; a causal "
              "mask still orders them)",
          .call = PlainCall};
}

Scheme SinusoidalEntry() {
  return {.id = SchemeId::kSinusoidal,
          .name = "sinusoidal",
          .summary =
              "fixed sin/cos table added to the token embeddings "
              "(Vaswani et al. 2017, 3.5)",
          .sides = {Side::kInput},
          .input = SchemeInput::kSinusoid,
          .call = PlainCall};
}

Scheme LearnedEntry() {
  // N(0, 1), on the scale of the sinusoidal table (docs/model.md).
  return {
      .id = SchemeId::kLearned,
      .name = "learned",
      .summary = "learned absolute table added to the token embeddings",
      .sides = {Side::kInput},
      .input = SchemeInput::kLearnedTable,
      .settings = {S::kMaxLen},
      .table_defs =
          {{.name = "embed.position",
            .role = TableRole::kInputTable,
            .init = TableInitKind::kNormal,
            .shape =
                [](const SchemeLayer& l, const AttentionOptions&) {
                  return std::vector<int64_t>{l.settings.max_len, l.d_model()};
                },
            .scale = [](const SchemeLayer&) { return 1.0; }}},
      .call = PlainCall};
}

Scheme ShawEntry() {
  return {.id = SchemeId::kShaw,
          .name = "shaw",
          .aliases = {"relative"},
          .summary =
              "Shaw et al. 2018: vector tables on the key and value "
              "side, clip(r, -k, k)",
          .sides = {Side::kScore, Side::kValue},
          .settings = ShawSettings({S::kMaxDistance}),
          .label = "k={max_distance}",
          .table_defs = ShawTables(),
          .call = [](const SchemeLayer& l, int64_t) {
            return ShawCall(l, {}, l.settings.max_distance);
          }};
}

Scheme ShawAsymEntry() {
  return {.id = SchemeId::kShawAsym,
          .name = "shaw-asym",
          .summary =
              "Shaw's tables under clip(r, -k_left, k_right) "
              "(w2v-BERT 2.0)",
          .sides = {Side::kScore, Side::kValue},
          .settings = ShawSettings({S::kKLeft, S::kKRight}),
          .label = "k={k_left}/{k_right}",
          .table_defs = ShawTables(),
          .call = [](const SchemeLayer& l, int64_t) {
            BucketMap m;
            m.kind = BucketKind::kClip;
            m.clip = {l.settings.k_left, l.settings.k_right};
            return ShawCall(l, m, 0);
          }};
}

Scheme ShawLogEntry() {
  return {.id = SchemeId::kShawLog,
          .name = "shaw-log",
          .summary = "Shaw's tables under T5's logarithmic buckets",
          .sides = {Side::kScore, Side::kValue},
          .settings = ShawSettings({S::kNumBuckets, S::kBucketMaxDistance}),
          .label = "{num_buckets} buckets",
          .table_defs = ShawTables(),
          .check = [](const SchemeLayer& l) { CheckT5Buckets("shaw-log", l); },
          .call =
              [](const SchemeLayer& l, int64_t) {
                BucketMap m;
                m.kind = BucketKind::kT5;
                m.t5 = T5Of(l);
                return ShawCall(l, m, 0);
              }};
}

Scheme T5Entry() {
  // t5_bias ~ N(0, d_model^-1/2): Hugging Face T5's factor * d_model^-0.5
  // with factor 1.
  return {
      .id = SchemeId::kT5,
      .name = "t5",
      .summary =
          "Raffel et al. 2020: one learned scalar per head and T5 "
          "bucket added to the score (not scaled)",
      .sides = {Side::kScore},
      .settings = {S::kNumBuckets, S::kBucketMaxDistance},
      .table_defs = {{.name = "t5_bias",
                      .role = TableRole::kScoreBias,
                      .init = TableInitKind::kNormal,
                      .shape =
                          [](const SchemeLayer& l, const AttentionOptions& o) {
                            return std::vector<int64_t>{l.heads, TableRows(o)};
                          },
                      .scale = LecunStd}},
      .check = [](const SchemeLayer& l) { CheckT5Buckets("t5", l); },
      .call =
          [](const SchemeLayer& l, int64_t) {
            SchemeCall c;
            c.attention = PlainOptions(l);
            c.attention.buckets.kind = BucketKind::kT5;
            c.attention.buckets.t5 = T5Of(l);
            c.attention.score_term = ScoreTerm::kScalarTable;
            c.attention.key_term = true;
            return c;
          }};
}

Scheme AlibiEntry() {
  return {.id = SchemeId::kAlibi,
          .name = "alibi",
          .summary =
              "Press et al. 2022: fixed -m_h |r| added to the score, "
              "the paper's slopes (relpos::AlibiSlopes)",
          .sides = {Side::kScore},
          .call = [](const SchemeLayer& l, int64_t) {
            SchemeCall c;
            c.attention = PlainOptions(l);
            c.attention.score_term = ScoreTerm::kAlibi;
            c.attention.key_term = true;
            return c;
          }};
}

Scheme RopeEntry() {
  return {.id = SchemeId::kRope,
          .name = "rope",
          .summary =
              "Su et al. 2021: q and k rotated by their positions, "
              "then plain attention (relpos/rope.h)",
          .sides = {Side::kRotation},
          .settings = {S::kRopeBase, S::kRopeLayout},
          .check =
              [](const SchemeLayer& l) {
                RELPOS_CHECK_SCHEME(
                    l.head_dim % 2 == 0, "rope",
                    "needs an even head width (got " << l.head_dim << ")");
              },
          .call =
              [](const SchemeLayer& l, int64_t) {
                SchemeCall c;
                c.attention = PlainOptions(l);
                RopeOptions r;
                r.base = l.settings.rope_base;
                r.layout = l.settings.rope_layout;
                c.rope = r;
                return c;
              }};
}

std::vector<int64_t> HeadsByWidth(const SchemeLayer& l,
                                  const AttentionOptions&) {
  return {l.heads, l.head_dim};
}

double XlBiasStd(const SchemeLayer&) { return 0.02; }

Scheme XlEntry() {
  // W like the other projections (LeCun); u, v ~ N(0, 0.02^2), Hugging Face
  // Transformer-XL's init_std.
  return {.id = SchemeId::kXl,
          .name = "xl",
          .summary =
              "Dai et al. 2019 (Transformer-XL): (q + u) . k + (q + v) . "
              "W R_{i-j}, R fixed sinusoids, unclipped",
          .sides = {Side::kScore, Side::kQueryBias},
          .table_defs =
              {{.name = "xl_w",
                .role = TableRole::kXlProjection,
                .init = TableInitKind::kNormal,
                .shape =
                    [](const SchemeLayer& l, const AttentionOptions&) {
                      return std::vector<int64_t>{l.d_model(), l.d_model()};
                    },
                .scale = LecunStd},
               {.name = "xl_u",
                .role = TableRole::kXlContentBias,
                .init = TableInitKind::kNormal,
                .shape = HeadsByWidth,
                .scale = XlBiasStd},
               {.name = "xl_v",
                .role = TableRole::kXlPositionBias,
                .init = TableInitKind::kNormal,
                .shape = HeadsByWidth,
                .scale = XlBiasStd}},
          .check =
              [](const SchemeLayer& l) {
                RELPOS_CHECK_SCHEME(l.d_model() % 2 == 0, "xl",
                                    "needs an even d_model (sines and cosines; "
                                    "got "
                                        << l.d_model() << ")");
              },
          .call =
              [](const SchemeLayer& l, int64_t max_key_length) {
                SchemeCall c;
                c.attention = PlainOptions(l);
                // Every distance of the call has its own row: nothing is
                // clipped.
                c.attention.max_distance =
                    std::max<int64_t>(max_key_length - 1, 0);
                c.attention.per_head_tables = true;
                c.attention.key_term = true;
                c.attention.position_query_bias = true;
                c.xl_table = true;
                return c;
              }};
}

#undef RELPOS_CHECK_SCHEME

}  // namespace

const std::vector<SchemeSettingInfo>& SchemeSettingInfos() {
  using S = SchemeSetting;
  using Set = SchemeSettings;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // A stored config's caps (a model config from an untrusted checkpoint):
  // reaches to 2^20, buckets to 2^16, RoPE's base to 2^40.
  constexpr double kConfigReach = double(int64_t{1} << 20);
  constexpr double kConfigBuckets = 65536;
  constexpr double kConfigRopeBase = double(int64_t{1} << 40);
  const SettingRange reach{0, double(kMaxReach)}, config_reach{0, kConfigReach};
  static const std::vector<SchemeSettingInfo> rows = {
      {.id = S::kMaxLen,
       .key = "max_len",
       .help = "Rows of the learned absolute position table",
       .member = &Set::max_len,
       .range = {1, double(kMaxLen)},
       .config_range = {1, double(kMaxLen)}},
      {.id = S::kMaxDistance,
       .key = "max_distance",
       .help = "shaw: clipping distance k of relative positions",
       .member = &Set::max_distance,
       .range = reach,
       .config_range = config_reach},
      {.id = S::kKLeft,
       .key = "k_left",
       .help = "shaw-asym: distances r <= -k_left (the past) share a row "
               "(w2v-BERT 2.0: 64)",
       .member = &Set::k_left,
       .range = reach,
       .config_range = config_reach},
      {.id = S::kKRight,
       .key = "k_right",
       .help = "shaw-asym: distances r >= k_right (the future) share a row "
               "(w2v-BERT 2.0: 8)",
       .member = &Set::k_right,
       .range = reach,
       .config_range = config_reach},
      // The layer's limits of T5's buckets are CheckT5Buckets's.
      {.id = S::kNumBuckets,
       .key = "num_buckets",
       .help = "t5, shaw-log: T5 buckets (Raffel et al.: 32); bidirectional "
               "for encoders, causal for decoders",
       .member = &Set::num_buckets,
       .config_range = {2, kConfigBuckets}},
      {.id = S::kBucketMaxDistance,
       .key = "bucket_max_distance",
       .help = "t5, shaw-log: distance where T5's logarithmic buckets end "
               "(Raffel et al.: 128)",
       .member = &Set::bucket_max_distance,
       .config_range = {2, double(kMaxLen)}},
      {.id = S::kRopeBase,
       .key = "rope_base",
       .help = "rope: theta_t = base^(-2t/d_head) (Su et al.: 10000)",
       .member = &Set::rope_base,
       .range = {.lo = 0, .hi = kInf, .lo_open = true},
       .config_range = {.lo = 0, .hi = kConfigRopeBase, .lo_open = true}},
      {.id = S::kRopeLayout,
       .key = "rope_layout",
       .help = "rope: pairs (t, t + d/2) as GPT-NeoX / Hugging Face Llama, or "
               "(2t, 2t+1) as the paper and GPT-J",
       .member = &Set::rope_layout},
      {.id = S::kKeyTerm,
       .key = "key_term",
       .help = "Shaw's tables: relative term inside the attention score",
       .member = &Set::key_term},
      {.id = S::kValueTerm,
       .key = "value_term",
       .help = "Shaw's tables: relative term inside the attention output",
       .member = &Set::value_term},
      {.id = S::kPerHeadTables,
       .key = "per_head_tables",
       .help = "Shaw's tables: one table pair per head (default: shared per "
               "layer)",
       .member = &Set::per_head_tables},
      {.id = S::kRelInitScale,
       .key = "rel_init_scale",
       .help = "Multiplier on the Xavier std of the relative tables",
       .member = &Set::rel_init_scale,
       .range = {.lo = 0, .hi = kInf},
       .config_range = {.lo = 0}},
  };
  return rows;
}

const SchemeSettingInfo& FindSchemeSetting(SchemeSetting setting) {
  const auto i = static_cast<size_t>(setting);
  RELPOS_CHECK_ARG(
      i < SchemeSettingInfos().size() && SchemeSettingInfos()[i].id == setting,
      "unknown scheme setting " << static_cast<int>(setting));
  return SchemeSettingInfos()[i];
}

const char* SettingKey(SchemeSetting setting) {
  return FindSchemeSetting(setting).key;
}

const std::vector<SchemeSetting>& AllSchemeSettings() {
  static const std::vector<SchemeSetting> all = [] {
    std::vector<SchemeSetting> ids;
    for (const SchemeSettingInfo& i : SchemeSettingInfos()) ids.push_back(i.id);
    return ids;
  }();
  return all;
}

const char* SideName(SchemeSide side) {
  switch (side) {
    case SchemeSide::kInput:
      return "input";
    case SchemeSide::kScore:
      return "score";
    case SchemeSide::kValue:
      return "value";
    case SchemeSide::kQueryBias:
      return "query_bias";
    case SchemeSide::kRotation:
      return "rotation";
  }
  return "unknown";
}

const char* RoleName(TableRole role) {
  switch (role) {
    case TableRole::kInputTable:
      return "input_table";
    case TableRole::kKeyTable:
      return "key_table";
    case TableRole::kValueTable:
      return "value_table";
    case TableRole::kScoreBias:
      return "score_bias";
    case TableRole::kXlProjection:
      return "xl_projection";
    case TableRole::kXlContentBias:
      return "xl_content_bias";
    case TableRole::kXlPositionBias:
      return "xl_position_bias";
  }
  return "unknown";
}

int64_t TableRows(const AttentionOptions& o) {
  switch (o.buckets.kind) {
    case BucketKind::kClip:
      return ClipBucketCount(o.buckets.clip);
    case BucketKind::kT5:
      return o.buckets.t5.num_buckets;
    case BucketKind::kSymmetricClip:
      break;
  }
  return 2 * o.max_distance + 1;
}

bool Scheme::Reads(SchemeSetting setting) const {
  return std::find(settings.begin(), settings.end(), setting) != settings.end();
}

bool Scheme::ActsOn(SchemeSide side) const {
  return std::find(sides.begin(), sides.end(), side) != sides.end();
}

bool Scheme::InsideAttention() const {
  return std::any_of(sides.begin(), sides.end(),
                     [](SchemeSide s) { return s != SchemeSide::kInput; });
}

void Scheme::Validate(const SchemeLayer& l) const {
  RELPOS_CHECK_ARG(
      l.heads >= 1 && l.head_dim >= 1 && l.heads <= kMaxWidth / l.head_dim,
      "position scheme '" << name << "': heads and head width must be >= 1 "
                          << "with heads x head width <= 2^24 (got " << l.heads
                          << " x " << l.head_dim << ")");
  for (SchemeSetting s : settings)
    CheckSetting(name, FindSchemeSetting(s), l.settings);
  if (check != nullptr) check(l);
}

std::vector<SchemeTable> Scheme::Tables(const SchemeLayer& l) const {
  const AttentionOptions o = call(l, 1).attention;
  std::vector<SchemeTable> tables;
  for (const SchemeTableDef& d : table_defs) {
    if (d.present != nullptr && !d.present(l.settings)) continue;
    tables.push_back({d.name, d.role, d.shape(l, o), d.init, d.scale(l)});
  }
  return tables;
}

const std::vector<Scheme>& Schemes() {
  // One entry per SchemeId, in its order (FindScheme(SchemeId) indexes it).
  static const std::vector<Scheme> entries = {
      NoneEntry(),     SinusoidalEntry(), LearnedEntry(), ShawEntry(),
      ShawAsymEntry(), ShawLogEntry(),    T5Entry(),      AlibiEntry(),
      RopeEntry(),     XlEntry()};
  return entries;
}

std::string SchemeNameList() {
  std::ostringstream os;
  for (const Scheme& s : Schemes()) {
    if (s.id != SchemeId::kNone) os << ", ";
    os << s.name;
    for (const std::string& alias : s.aliases) os << " (alias " << alias << ")";
  }
  return os.str();
}

const Scheme& FindScheme(const std::string& name) {
  for (const Scheme& s : Schemes()) {
    if (name == s.name) return s;
    for (const std::string& alias : s.aliases) {
      if (name == alias) return s;
    }
  }
  RELPOS_THROW(InvalidArgument, "unknown position scheme '"
                                    << name << "' (expected one of: "
                                    << SchemeNameList() << ")");
}

const Scheme& FindScheme(SchemeId id) {
  const auto i = static_cast<size_t>(id);
  RELPOS_CHECK_ARG(i < Schemes().size() && Schemes()[i].id == id,
                   "unknown position scheme id " << static_cast<int>(id));
  return Schemes()[i];
}

}  // namespace relpos
