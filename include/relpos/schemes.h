// The position-scheme registry: the one place a named position scheme is
// defined (docs/model.md, "Position schemes"; the mathematics of each:
// docs/math.md section 8).
//
// One entry per scheme says
//   - its name and aliases, and where it acts (input, score, value, query
//     bias, rotation);
//   - the settings it reads, whose defaults (SchemeSettings below) are those
//     of its paper;
//   - its learned tables: names (the checkpoint tensor names), shapes as a
//     function of the layer (heads, head width, settings) and initialisation;
//   - how a layer runs it: the AttentionOptions of its attention call, plus
//     what the layer does beyond them (RoPE's rotation, Transformer-XL's key
//     table built from its projection).
//
// Every client takes its schemes from here: the model (src/model), the
// benchmarks (`relpos bench --positions`), `relpos compare`, the CLI's
// labels, the tests' scheme sweep and the Python package (relpos.schemes(),
// relpos.torch.RelativeMultiheadAttention). Adding a scheme is one entry in
// src/op/schemes/registry.cc (and its SchemeId), its kernel path if it needs
// a new AttentionOptions choice, and its tests; docs/model.md, "Adding a
// scheme", lists what else a scheme may need (a new setting, a new table role).
#ifndef RELPOS_SCHEMES_H_
#define RELPOS_SCHEMES_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "relpos/attention.h"
#include "relpos/rope.h"

namespace relpos {

// The named schemes, in the registry's order (Schemes()).
enum class SchemeId {
  kNone,        // no position information at all (a bag of tokens)
  kSinusoidal,  // fixed sin/cos table added to the token embeddings
  kLearned,     // learned [max_len, d_model] table added to the embeddings
  kShaw,        // Shaw et al.: vector tables AK, AV, clip(r, -k, k)
  kShawAsym,    // Shaw's tables under clip(r, -k_left, k_right)
  kShawLog,     // Shaw's tables under T5's logarithmic buckets
  kT5,          // T5: one learned scalar per head and bucket
  kAlibi,       // ALiBi: fixed -m_h |r|, nothing learned
  kRope,        // RoPE: q and k rotated by their positions, nothing learned
  kXl,          // Transformer-XL: W R_{i-j} with biases u, v
  // The model's name of kShaw before the family existed ("relative").
  kRelative = kShaw,
};

// Every setting a scheme may read, with the defaults of the papers. A
// scheme reads some of them (Scheme::settings) and ignores the others.
struct SchemeSettings {
  int64_t max_len = 1024;     // learned: rows of the absolute table
  int64_t max_distance = 16;  // shaw: clipping distance k (2k+1 rows)
  // shaw-asym: clip(r, -k_left, k_right) (w2v-BERT 2.0's 64 and 8).
  int64_t k_left = 64, k_right = 8;
  // t5, shaw-log: T5's buckets (Raffel et al. 2020: 32 and 128),
  // bidirectional in a non-causal layer, causal in a causal one.
  int64_t num_buckets = 32, bucket_max_distance = 128;
  double rope_base = 10000.0;  // rope: theta_t = base^(-2t/dh) (Su et al.)
  RopeLayout rope_layout = RopeLayout::kSplitHalves;  // rope: pairs (t, t+dh/2)
  // Shaw's tables (shaw, shaw-asym, shaw-log): the key-side and value-side
  // terms, one table pair per head or shared by the heads (Shaw et al.), and
  // the multiplier on the Xavier std of their initialisation.
  bool key_term = true, value_term = true, per_head_tables = false;
  double rel_init_scale = 1.0;
};
inline constexpr SchemeSettings kDefaultSchemeSettings{};

// The fields of SchemeSettings, for the lists of what a scheme reads.
enum class SchemeSetting {
  kMaxLen,
  kMaxDistance,
  kKLeft,
  kKRight,
  kNumBuckets,
  kBucketMaxDistance,
  kRopeBase,
  kRopeLayout,
  kKeyTerm,
  kValueTerm,
  kPerHeadTables,
  kRelInitScale,
};

// Valid values of a numeric setting: [lo, hi], either end possibly open; a
// real-valued one must also be finite. Default: no bounds.
struct SettingRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool bounded() const {
    return lo != -std::numeric_limits<double>::infinity() ||
           hi != std::numeric_limits<double>::infinity();
  }
};

// A setting's field in SchemeSettings, of one of the settings' types: an
// integer, a real, a switch, or RoPE's layout (which clients show and read
// as its name: RopeLayoutName, ParseRopeLayout).
using SchemeSettingMember =
    std::variant<int64_t SchemeSettings::*, double SchemeSettings::*,
                 bool SchemeSettings::*, RopeLayout SchemeSettings::*>;

// One setting as the registry declares it (src/op/schemes/registry.cc, one
// row each, in SchemeSetting order). Every client that lists, reads, writes
// or checks scheme settings works from these rows: Scheme::Validate, the
// model config's settings (JSON keys, flags, help, ranges, defaults;
// docs/settings.md) and the Python binding's SchemeSettings attributes.
struct SchemeSettingInfo {
  SchemeSetting id;
  // The SchemeSettings field's name, the model config's JSON key and the
  // Python keyword ("max_distance", "k_left", ..., "rope_layout").
  const char* key;
  // One line: the schemes that read it, what it is, its paper's value.
  const char* help;
  SchemeSettingMember member;
  // What a layer can run (Scheme::Validate checks the settings a scheme
  // reads); no bounds where the scheme's own check decides (T5's buckets).
  SettingRange range;
  // What a stored configuration may hold: a model config checks every
  // setting against it, whichever scheme reads it (it caps what an
  // untrusted checkpoint may ask for).
  SettingRange config_range;
};
// Every setting, in SchemeSettings's order.
const std::vector<SchemeSettingInfo>& SchemeSettingInfos();
const SchemeSettingInfo& FindSchemeSetting(SchemeSetting setting);
// Its key (SchemeSettingInfo::key).
const char* SettingKey(SchemeSetting setting);
// Every setting, in SchemeSettings's order.
const std::vector<SchemeSetting>& AllSchemeSettings();

// Where a scheme acts (docs/math.md section 8).
enum class SchemeSide {
  kInput,      // a term added to the token embeddings (absolute positions)
  kScore,      // a term inside the attention score s_ij
  kValue,      // a term inside the attention output o_i
  kQueryBias,  // learned query biases of the position term (XL's u, v)
  kRotation,   // q and k rotated by their positions before attention (RoPE)
};
// "input", "score", "value", "query_bias", "rotation".
const char* SideName(SchemeSide side);

// What a scheme adds at the input, if anything.
enum class SchemeInput {
  kNone,
  kSinusoid,      // the fixed sinusoidal table (Vaswani et al. 3.5)
  kLearnedTable,  // its kInputTable
};

// What a learned table is to the layer that holds it.
enum class TableRole {
  kInputTable,      // [max_len, d_model] added to the embeddings (once)
  kKeyTable,        // AttentionInputs::ak, Shaw's AK: [nb, dh] or [H, nb, dh]
  kValueTable,      // AttentionInputs::av, Shaw's AV: as the key table
  kScoreBias,       // AttentionInputs::bias, T5's scalar table [H, nb]
  kXlProjection,    // Transformer-XL's W [d_model, d_model]: AK_h = W_h R
  kXlContentBias,   // Transformer-XL's u [H, dh]: the queries become q + u
  kXlPositionBias,  // Transformer-XL's v [H, dh]: pb = v - u
};
// "input_table", "key_table", "value_table", "score_bias", "xl_projection",
// "xl_content_bias", "xl_position_bias".
const char* RoleName(TableRole role);

enum class TableInitKind {
  // relpos::InitRelativeTable: Xavier normal over the last two extents,
  // times SchemeTable::scale (docs/math.md section 5).
  kXavierNormal,
  // N(0, scale^2).
  kNormal,
};

// The layer a scheme runs in: self-attention of `heads` heads of width
// head_dim (the layer's width d_model = heads * head_dim), causal or not.
struct SchemeLayer {
  int64_t heads = 1;
  int64_t head_dim = 1;
  bool causal = false;  // T5 buckets are causal in a causal layer
  SchemeSettings settings;
  int64_t d_model() const { return heads * head_dim; }
};

// One learned tensor of a scheme in a given layer. Never weight-decayed.
struct SchemeTable {
  // A per-layer table's name inside its attention layer ("rel_k"; the
  // model's checkpoint calls it blocks.L.attn.rel_k); the input table's
  // full name ("embed.position").
  std::string name;
  TableRole role;
  std::vector<int64_t> shape;
  TableInitKind init;
  double scale;  // the Xavier multiplier, or the normal's std
  bool per_layer() const { return role != TableRole::kInputTable; }
};

// A table a scheme may have, as the registry declares it.
struct SchemeTableDef {
  const char* name;
  TableRole role;
  TableInitKind init;
  // Whether a layer with these settings has it (Shaw's AK only with
  // key_term); null: always.
  bool (*present)(const SchemeSettings& settings) = nullptr;
  // From the layer and the options of its call (whose bucket map gives the
  // rows: TableRows).
  std::vector<int64_t> (*shape)(const SchemeLayer& layer,
                                const AttentionOptions& options);
  double (*scale)(const SchemeLayer& layer);
};

// How a layer runs a scheme for one attention call.
struct SchemeCall {
  // Bucket map, score term, terms, table layout and causal mask; path
  // kAuto, no key_lengths or query_offset (the caller's). Every relative
  // term is off for the schemes that act outside the score and the value.
  AttentionOptions attention;
  // RoPE: rotate q at positions i + off and k at j with these options
  // (base, layout; the layer sets position_offset), then attention.
  std::optional<RopeOptions> rope;
  // Transformer-XL: build the per-head key table AK_h[r + k] = W_h R_{-r}
  // (k = attention.max_distance, XL's sinusoids R) from the kXlProjection
  // table, pass the queries q + u and pb = v - u (docs/math.md section 8).
  bool xl_table = false;
};

// One entry of the registry (src/op/schemes/registry.cc writes each with
// designated initializers, in this order).
struct Scheme {
  SchemeId id;
  const char* name;
  std::vector<std::string> aliases;  // other accepted names ("relative")
  const char* summary;               // one line, with its source
  std::vector<SchemeSide> sides;
  SchemeInput input = SchemeInput::kNone;
  std::vector<SchemeSetting> settings;  // the settings it reads
  // The settings that size its table for a short label, e.g.
  // "k={max_distance}" ({key} stands for the setting's value); "" if none.
  const char* label = "";
  std::vector<SchemeTableDef> table_defs;  // in checkpoint order
  // The scheme's own conditions on a layer beyond the ranges of its
  // settings (T5 buckets with an exact range, an even width for RoPE and
  // XL), or null; Validate runs it.
  void (*check)(const SchemeLayer& layer) = nullptr;
  // The call over at most max_key_length >= 1 keys (only Transformer-XL's
  // unclipped table depends on it: k = max_key_length - 1).
  SchemeCall (*call)(const SchemeLayer& layer, int64_t max_key_length);

  bool Reads(SchemeSetting setting) const;
  bool ActsOn(SchemeSide side) const;
  // Whether it acts inside attention (any side but the input); false for
  // none, sinusoidal and learned.
  bool InsideAttention() const;
  // The tables of a layer, in checkpoint order (only those it has). The
  // layer must be valid (Validate).
  std::vector<SchemeTable> Tables(const SchemeLayer& layer) const;
  // Throws InvalidArgument naming the scheme, the setting and its value
  // unless `layer` can run the scheme: sizes >= 1, every setting it reads
  // in range, then `check`. Settings it does not read are not looked at.
  void Validate(const SchemeLayer& layer) const;
  SchemeCall Call(const SchemeLayer& layer, int64_t max_key_length) const {
    return call(layer, max_key_length);
  }
};

// Rows nb of the tables the options' bucket map indexes: 2k+1 (symmetric
// clip), left + right + 1 (clip) or num_buckets (T5).
int64_t TableRows(const AttentionOptions& options);

// Every scheme, in SchemeId order.
const std::vector<Scheme>& Schemes();
// The scheme called `name` (or one of its aliases). InvalidArgument listing
// the accepted names otherwise.
const Scheme& FindScheme(const std::string& name);
const Scheme& FindScheme(SchemeId id);
// "none, sinusoidal, learned, shaw (alias relative), shaw-asym, ..., xl".
std::string SchemeNameList();

}  // namespace relpos

#endif  // RELPOS_SCHEMES_H_
