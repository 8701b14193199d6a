#include "support/attention_cases.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "relpos/schemes.h"

namespace relpos {

AttentionCase MakeCase(std::string name, int64_t batch, int64_t heads,
                       int64_t q_len, int64_t k_len, int64_t dk, int64_t dv,
                       int64_t max_distance) {
  AttentionCase c;
  c.name = std::move(name);
  c.batch = batch;
  c.heads = heads;
  c.q_len = q_len;
  c.k_len = k_len;
  c.dk = dk;
  c.dv = dv;
  c.options.max_distance = max_distance;
  return c;
}

int64_t AttentionCase::TableRows() const {
  switch (options.buckets.kind) {
    case BucketKind::kClip:
      return ClipBucketCount(options.buckets.clip);
    case BucketKind::kT5:
      return options.buckets.t5.num_buckets;
    case BucketKind::kSymmetricClip:
      break;
  }
  return 2 * options.max_distance + 1;
}

int64_t AttentionCase::Bucket(int64_t b, int64_t i, int64_t j) const {
  const int64_t r = j - (i + QueryOffset(b));
  switch (options.buckets.kind) {
    case BucketKind::kClip:
      return ClipBucket(r, options.buckets.clip);
    case BucketKind::kT5:
      return T5Bucket(r, options.buckets.t5);
    case BucketKind::kSymmetricClip:
      break;
  }
  const int64_t k = options.max_distance;
  return std::clamp(r, -k, k) + k;
}

double AttentionCase::AlibiSlope(int64_t h) const {
  if (!options.key_term || options.score_term != ScoreTerm::kAlibi) return 0;
  if (!options.alibi_slopes.empty()) return options.alibi_slopes[h];
  return AlibiSlopes(heads)[h];
}

double AttentionCase::Flops() const {
  return 2.0 * batch * heads * q_len * k_len * (dk + dv);
}

double AttentionCase::RelativeFlops() const {
  const double d = (options.key_term ? dk : 0) + (options.value_term ? dv : 0);
  return 2.0 * batch * heads * q_len * TableRows() * d;
}

int64_t AttentionCase::KeyEnd(int64_t b, int64_t i) const {
  int64_t end = options.key_lengths.empty() ? k_len : options.key_lengths[b];
  if (options.causal) end = std::min(end, i + QueryOffset(b) + 1);
  return std::max<int64_t>(end, 0);
}

std::string AttentionCase::Describe() const {
  std::ostringstream os;
  os << name << ": B=" << batch << " H=" << heads;
  if (KvHeads() != heads) os << " Hkv=" << KvHeads();
  os << " Nq=" << q_len
     << " Nk=" << k_len << " dk=" << dk << " dv=" << dv
     << " k=" << options.max_distance
     << (options.per_head_tables ? " per-head" : " shared")
     << " key_term=" << options.key_term << " value_term=" << options.value_term
     << " causal=" << options.causal << " offset=" << QueryOffset()
     << (!options.query_offsets.empty() ? " (per row)"
         : options.query_offset          ? " (explicit)"
                                         : " (default)");
  switch (options.buckets.kind) {
    case BucketKind::kClip:
      os << " buckets=clip(" << options.buckets.clip.left << ","
         << options.buckets.clip.right << ")";
      break;
    case BucketKind::kT5:
      os << " buckets=t5(" << options.buckets.t5.num_buckets << ","
         << options.buckets.t5.max_distance << ","
         << (options.buckets.t5.bidirectional ? "bidirectional" : "causal")
         << ")";
      break;
    case BucketKind::kSymmetricClip:
      break;
  }
  static const char* kScore[] = {"vector", "scalar_table", "alibi"};
  if (options.score_term != ScoreTerm::kVector)
    os << " score=" << kScore[static_cast<int>(options.score_term)];
  if (!options.alibi_slopes.empty()) {
    os << " slopes={";
    for (size_t h = 0; h < options.alibi_slopes.size(); ++h)
      os << (h ? "," : "") << options.alibi_slopes[h];
    os << "}";
  }
  if (options.position_query_bias) os << " pb";
  auto list = [&os](const char* name, const std::vector<int64_t>& v) {
    if (v.empty()) return;
    os << " " << name << "={";
    for (size_t b = 0; b < v.size(); ++b) os << (b ? "," : "") << v[b];
    os << "}";
  };
  list("key_lengths", options.key_lengths);
  list("key_starts", options.key_starts);
  list("query_offsets", options.query_offsets);
  if (options.scale) os << " scale=" << *options.scale;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const AttentionCase& c) {
  return os << c.Describe();
}

TermScales ComputeTermScales(const AttentionData<double>& d,
                             const std::vector<double>& dout) {
  const AttentionCase& c = d.c;
  const double scale = c.ScoreScale();
  TermScales ts;
  ts.dk_dim = c.dk;
  ts.growth = static_cast<double>(c.q_len + c.k_len + c.dk + c.dv);
  double sum_row_ds = 0, max_row_ds = 0, sum_row_dout = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h, kvh = c.KvSlice(b, h);
      const int64_t tab = (c.options.per_head_tables ? h : 0) * c.TableRows();
      const double slope = std::abs(c.AlibiSlope(h));
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t begin = c.KeyBegin(b), end = c.KeyEnd(b, i);
        double max_w = 0;
        for (int64_t j = begin; j < end; ++j) {
          const int64_t r = c.Bucket(b, i, j);
          double s_abs = 0;
          for (int64_t t = 0; t < c.dk; ++t) {
            const double qt = std::abs(d.q[(bh * c.q_len + i) * c.dk + t]);
            s_abs += qt * std::abs(d.k[(kvh * c.k_len + j) * c.dk + t]);
            if (!d.ak.empty()) {
              const double pt = d.pb.empty() ? 0 : std::abs(d.pb[h * c.dk + t]);
              s_abs += (qt + pt) * std::abs(d.ak[(tab + r) * c.dk + t]);
            }
          }
          s_abs *= scale;
          if (!d.bias.empty()) s_abs += std::abs(d.bias[h * c.TableRows() + r]);
          s_abs += slope * std::abs(static_cast<double>(j - (i + c.QueryOffset(b))));
          ts.max_score_abs = std::max(ts.max_score_abs, s_abs);
          for (int64_t t = 0; t < c.dv; ++t) {
            double w = std::abs(d.v[(kvh * c.k_len + j) * c.dv + t]);
            if (!d.av.empty()) w += std::abs(d.av[(tab + r) * c.dv + t]);
            max_w = std::max(max_w, w);
          }
        }
        ts.out = std::max(ts.out, max_w);
        if (end <= begin || dout.empty()) continue;
        const int64_t row = bh * c.q_len + i;
        double l1 = 0, mx = 0;
        for (int64_t t = 0; t < c.dv; ++t) {
          l1 += std::abs(dout[row * c.dv + t]);
          mx = std::max(mx, std::abs(dout[row * c.dv + t]));
        }
        const double row_ds = 2 * l1 * max_w * scale;
        max_row_ds = std::max(max_row_ds, row_ds);
        sum_row_ds += row_ds;
        sum_row_dout += mx;
      }
    }
  }
  ts.lse = 1 + ts.max_score_abs;
  const double max_q = MaxAbs(d.q), max_kak = MaxAbs(d.k) + MaxAbs(d.ak);
  ts.dq = max_row_ds * max_kak;
  ts.dk = sum_row_ds * max_q;
  ts.dak = sum_row_ds * (max_q + MaxAbs(d.pb));
  ts.dv = ts.dav = sum_row_dout;
  ts.dbias = sum_row_ds / scale;
  ts.dpb = sum_row_ds * MaxAbs(d.ak);
  return ts;
}

std::vector<AttentionCase> StandardCases() {
  std::vector<AttentionCase> cases;
  // The full option matrix on one small, deliberately lopsided shape:
  // Nq != Nk (default offset 2), dk != dv, k = 2 < n so both far buckets and
  // the band are populated.
  for (bool per_head : {false, true}) {
    for (int terms = 0; terms < 4; ++terms) {
      const bool key_term = terms == 0 || terms == 1;
      const bool value_term = terms == 0 || terms == 2;
      for (int mask = 0; mask < 4; ++mask) {
        const bool causal = mask == 1 || mask == 3;
        const bool padding = mask == 2 || mask == 3;
        static const char* kTerms[] = {"kv", "keyonly", "valueonly", "none"};
        static const char* kMasks[] = {"plain", "causal", "pad", "causalpad"};
        AttentionCase c = MakeCase(std::string(per_head ? "perhead_" : "shared_") +
                                   kTerms[terms] + "_" + kMasks[mask],
                               2, 2, 5, 7, 3, 4, 2);
        c.options.per_head_tables = per_head;
        c.options.key_term = key_term;
        c.options.value_term = value_term;
        c.options.causal = causal;
        if (padding) c.options.key_lengths = {4, 0};  // item 1 sees nothing
        cases.push_back(c);
      }
    }
  }

  // Special shapes and offsets, all with both terms on.
  auto add = [&cases](AttentionCase c, bool per_head, bool causal) {
    c.options.per_head_tables = per_head;
    c.options.causal = causal;
    cases.push_back(std::move(c));
  };
  // Nq > Nk: default offset Nk - Nq = -3 is negative; causal rows 0..2 see
  // no key.
  add(MakeCase("nq_gt_nk", 1, 2, 7, 4, 3, 2, 2), false, false);
  add(MakeCase("nq_gt_nk_causal", 1, 2, 7, 4, 3, 2, 2), true, true);
  {  // Explicit positive offset different from the default Nk - Nq = 5.
    AttentionCase c = MakeCase("offset_pos_causal", 1, 2, 3, 8, 2, 3, 2);
    c.options.query_offset = 2;
    add(c, false, true);
  }
  {  // Explicit zero offset with Nq < Nk (queries are the FIRST Nq keys).
    AttentionCase c = MakeCase("offset_zero", 2, 1, 4, 6, 3, 3, 1);
    c.options.query_offset = 0;
    add(c, true, false);
  }
  {  // Negative offset: causal rows 0 and 1 see no key, row 2 sees key 0.
    AttentionCase c = MakeCase("offset_neg_causal", 2, 1, 5, 5, 2, 3, 2);
    c.options.query_offset = -2;
    add(c, false, true);
  }
  {  // Negative offset, no mask: every distance j - i + 3 is >= -1.
    AttentionCase c = MakeCase("offset_neg_plain", 1, 2, 4, 5, 3, 2, 2);
    c.options.query_offset = -3;
    add(c, true, false);
  }
  {  // Far beyond k: every pair in bucket 2k (all distances >= k).
    AttentionCase c = MakeCase("offset_far_left", 1, 1, 3, 4, 2, 2, 2);
    c.options.query_offset = -1000;
    add(c, false, false);
  }
  {  // Every pair in bucket 0.
    AttentionCase c = MakeCase("offset_far_right", 1, 1, 3, 4, 2, 2, 2);
    c.options.query_offset = 1000;
    add(c, true, true);
  }
  // k = 0: one table row, no order information at all.
  add(MakeCase("k0", 2, 2, 4, 5, 3, 2, 0), false, false);
  add(MakeCase("k0_perhead_causal", 1, 2, 4, 5, 2, 3, 0), true, true);
  // k relative to n = 5: band only just fits / exactly fits / k >> n.
  add(MakeCase("k_n_minus_1", 1, 2, 5, 5, 3, 2, 4), false, false);
  add(MakeCase("k_eq_n_causal", 1, 2, 5, 5, 2, 3, 5), true, true);
  add(MakeCase("k_gt_n", 2, 1, 4, 4, 3, 3, 9), false, false);
  // n = 1 and single-query decoding steps.
  add(MakeCase("n1", 2, 2, 1, 1, 3, 2, 2), false, false);
  add(MakeCase("n1_causal_perhead", 1, 2, 1, 1, 2, 3, 1), true, true);
  add(MakeCase("decode_step", 1, 2, 1, 6, 3, 2, 2), false, true);
  // Degenerate and lopsided head sizes.
  add(MakeCase("d1", 1, 2, 4, 5, 1, 1, 2), false, false);
  add(MakeCase("dk_gt_dv_causal", 1, 1, 6, 6, 5, 2, 2), true, true);
  {  // Three batch items, one full, one short, one empty.
    AttentionCase c = MakeCase("pad3", 3, 1, 4, 7, 2, 3, 2);
    c.options.key_lengths = {7, 2, 0};
    add(c, false, false);
    c.name = "pad3_causal_perhead";
    add(c, true, true);
  }
  return cases;
}

std::vector<AttentionCase> SizeSweepCases() {
  std::vector<AttentionCase> cases;
  auto add = [&cases](AttentionCase c, bool causal) {
    c.options.causal = causal;
    cases.push_back(std::move(c));
  };
  // Square self-attention around typical tile sizes (16/32/64) and primes.
  for (int64_t n : {1, 7, 31, 63, 64, 65, 129}) {
    add(MakeCase("sq" + std::to_string(n), 1, 2, n, n, 64, 64, 16), false);
    add(MakeCase("sq" + std::to_string(n) + "_causal", 1, 2, n, n, 64, 64, 16),
        true);
  }
  // k against n: n < k, n = k, n = 2k + 1, k = 0.
  add(MakeCase("n_lt_k", 1, 2, 40, 40, 64, 64, 64), true);
  add(MakeCase("n_eq_k", 1, 2, 64, 64, 64, 64, 64), false);
  add(MakeCase("n_eq_2k1", 1, 2, 33, 33, 64, 64, 16), false);
  add(MakeCase("k0_n64", 1, 2, 64, 64, 64, 64, 0), true);
  // Nq != Nk: chunked prefill / decoding with a cache, and Nq > Nk.
  add(MakeCase("chunk_17x130", 2, 2, 17, 130, 64, 64, 16), true);
  add(MakeCase("decode_1x200", 2, 2, 1, 200, 64, 64, 32), true);
  add(MakeCase("nq_gt_nk_100x37", 1, 2, 100, 37, 64, 64, 8), true);
  {
    AttentionCase c = MakeCase("offset_neg20_70", 1, 2, 70, 70, 64, 64, 8);
    c.options.query_offset = -20;
    add(c, true);
  }
  // Awkward head sizes, per-head tables, padding.
  {
    AttentionCase c = MakeCase("perhead_pad_dk64_dv32", 2, 3, 129, 129, 64, 32, 8);
    c.options.per_head_tables = true;
    c.options.key_lengths = {129, 50};
    add(c, false);
    c.name = "perhead_pad_causal_dk64_dv32";
    add(c, true);
  }
  add(MakeCase("odd_dims_dk17_dv9", 2, 2, 67, 67, 17, 9, 5), false);
  // Ablations at a size off the tile.
  for (int terms = 1; terms < 4; ++terms) {
    static const char* kTerms[] = {"kv", "keyonly", "valueonly", "none"};
    AttentionCase c =
        MakeCase(std::string("ablation_") + kTerms[terms], 1, 2, 65, 65, 64, 64, 8);
    c.options.key_term = terms == 1;
    c.options.value_term = terms == 2;
    add(c, true);
  }
  return cases;
}

namespace {

// Sets `c` to scheme `scheme` (docs/math.md section 8), small enough that the
// bucket map's reach and its saturated rows are both visible at n ~ 7.
void SetScheme(AttentionCase& c, const std::string& scheme) {
  AttentionOptions& o = c.options;
  if (scheme == "asym") {  // shaw-asym: more reach to the left
    o.buckets.kind = BucketKind::kClip;
    o.buckets.clip = {3, 1};
  } else if (scheme == "asym0") {  // no left reach at all, values off
    o.buckets.kind = BucketKind::kClip;
    o.buckets.clip = {0, 2};
    o.value_term = false;
  } else if (scheme == "log") {  // shaw-log: T5 buckets, Shaw tables
    o.buckets.kind = BucketKind::kT5;
    o.buckets.t5 = {8, 6, true};  // exact |r| < 2, log up to 6, reach 6
  } else if (scheme == "t5") {
    o.buckets.kind = BucketKind::kT5;
    o.buckets.t5 = {8, 6, true};
    o.score_term = ScoreTerm::kScalarTable;
    o.value_term = false;
  } else if (scheme == "t5causal") {  // causal buckets, also without the mask
    o.buckets.kind = BucketKind::kT5;
    o.buckets.t5 = {6, 5, false};  // exact r in (-3, 0], log up to 5
    o.score_term = ScoreTerm::kScalarTable;
    o.value_term = false;
  } else if (scheme == "alibi") {  // the paper's slopes
    o.score_term = ScoreTerm::kAlibi;
    o.value_term = false;
  } else if (scheme == "alibiuser") {  // user slopes, one negative
    o.score_term = ScoreTerm::kAlibi;
    o.alibi_slopes.assign(c.heads, 0.0);
    for (int64_t h = 0; h < c.heads; ++h)
      o.alibi_slopes[h] = h % 2 == 0 ? 0.7 : -0.3;
    o.value_term = false;
  } else if (scheme == "xl") {  // unclipped key term with pb, no values
    o.max_distance = 8;
    o.position_query_bias = true;
    o.value_term = false;
  } else if (scheme == "xlv") {  // pb with a clipped key term and values
    o.position_query_bias = true;
  }
}

}  // namespace

std::vector<AttentionCase> SchemeCases() {
  std::vector<AttentionCase> cases;
  for (const char* scheme : {"asym", "asym0", "log", "t5", "t5causal", "alibi",
                             "alibiuser", "xl", "xlv"}) {
    const std::string s = scheme;
    auto add = [&](AttentionCase c, bool per_head, bool causal) {
      c.name = s + "_" + c.name;
      c.options.per_head_tables = per_head;
      c.options.causal = causal;
      SetScheme(c, s);
      cases.push_back(std::move(c));
    };
    // The mask matrix on the lopsided shape of StandardCases.
    for (int mask = 0; mask < 4; ++mask) {
      static const char* kMasks[] = {"plain", "causal", "pad", "causalpad"};
      AttentionCase c = MakeCase(kMasks[mask], 2, 2, 5, 7, 3, 4, 2);
      if (mask >= 2) c.options.key_lengths = {4, 0};  // item 1 sees nothing
      add(c, mask == 3, mask == 1 || mask == 3);
    }
    add(MakeCase("nq_gt_nk", 1, 2, 7, 4, 3, 2, 2), true, false);
    {
      AttentionCase c = MakeCase("offset_pos_causal", 1, 2, 3, 8, 2, 3, 2);
      c.options.query_offset = 2;
      add(c, false, true);
    }
    {  // Every distance far beyond every reach (the saturated last row).
      AttentionCase c = MakeCase("offset_far_left", 1, 2, 3, 4, 2, 2, 2);
      c.options.query_offset = -1000;
      add(c, false, false);
    }
    add(MakeCase("n1", 2, 2, 1, 1, 3, 2, 2), false, false);
    add(MakeCase("n2_lt_reach", 1, 2, 2, 2, 2, 3, 2), true, false);
    add(MakeCase("dk_gt_dv_causal", 1, 2, 6, 6, 5, 2, 2), true, true);
  }
  return cases;
}

namespace {

// `c` under registry scheme `s` at its paper's default settings, as the
// model's layer of c's heads and key width calls it (T5's buckets causal
// under a causal mask; Transformer-XL with a row for every distance of c's
// queries and keys), on c's layout: mask, offsets, lengths, starts, scale,
// and c's shared or per-head tables where the scheme reads that setting.
void SetRegistryScheme(AttentionCase& c, const Scheme& s) {
  SchemeLayer layer;
  layer.heads = c.heads;
  layer.head_dim = c.dk;
  layer.causal = c.options.causal;
  layer.settings.per_head_tables = c.options.per_head_tables;
  AttentionOptions o = s.Call(layer, c.q_len + c.k_len).attention;
  o.query_offset = c.options.query_offset;
  o.query_offsets = c.options.query_offsets;
  o.key_lengths = c.options.key_lengths;
  o.key_starts = c.options.key_starts;
  o.scale = c.options.scale;
  c.options = std::move(o);
}

// The registry's schemes that act inside attention, in its order; RoPE
// (which rotates q and k outside it and runs plain attention) only with
// `plain`.
std::vector<const Scheme*> AttentionSchemes(bool plain) {
  std::vector<const Scheme*> schemes;
  for (const Scheme& s : Schemes()) {
    if (!s.InsideAttention()) continue;
    const AttentionOptions probe = s.Call(SchemeLayer{}, 1).attention;
    if (plain || probe.key_term || probe.value_term) schemes.push_back(&s);
  }
  return schemes;
}

// A scheme's name as a case name ("shaw-asym" -> "shaw_asym").
std::string CaseName(const Scheme& s) {
  std::string name = s.name;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace

std::vector<AttentionCase> SchemeSweepCases() {
  std::vector<AttentionCase> cases;
  // The registry's schemes with a relative term inside attention, each at
  // its paper's default settings and with the call the model makes.
  for (const Scheme* s : AttentionSchemes(false)) {
    auto add = [&](AttentionCase c, bool causal) {
      c.options.causal = causal;
      SetRegistryScheme(c, *s);
      c.name = CaseName(*s) + "_" + c.name;
      cases.push_back(std::move(c));
    };
    add(MakeCase("sq63", 1, 2, 63, 63, 64, 64, 16), false);
    add(MakeCase("sq65_causal", 1, 2, 65, 65, 64, 64, 16), true);
    add(MakeCase("sq129_causal", 1, 2, 129, 129, 32, 32, 16), true);
    add(MakeCase("chunk_17x130", 2, 2, 17, 130, 64, 64, 16), true);
    add(MakeCase("decode_1x200", 1, 2, 1, 200, 64, 64, 16), true);
    add(MakeCase("nq_gt_nk_100x37", 1, 2, 100, 37, 32, 32, 16), false);
    AttentionCase c =
        MakeCase("perhead_pad_dk64_dv32", 2, 3, 129, 129, 64, 32, 16);
    c.options.per_head_tables = true;
    c.options.key_lengths = {129, 50};
    add(c, false);
  }
  return cases;
}

}  // namespace relpos

namespace relpos {

std::vector<AttentionCase> LayoutCases() {
  std::vector<AttentionCase> cases;
  // "shaw": the default symmetric clip with per-head tables and both terms.
  for (const char* scheme :
       {"shaw", "asym", "log", "t5", "t5causal", "alibi", "xlv"}) {
    const std::string s = scheme;
    auto add = [&](AttentionCase c, bool causal) {
      c.name = s + "_" + c.name;
      c.options.causal = causal;
      if (s == "shaw") {
        c.options.per_head_tables = true;
      } else {
        SetScheme(c, s);
      }
      cases.push_back(std::move(c));
    };
    {  // Grouped-query (2 query heads per key/value head), left and right
       // padding together, causal.
      AttentionCase c = MakeCase("gqa2_pad_causal", 2, 4, 5, 7, 3, 4, 2);
      c.kv_heads = 2;
      c.options.key_lengths = {7, 4};
      c.options.key_starts = {2, 0};
      add(c, true);
    }
    {  // Multi-query, left padding only, bidirectional.
      AttentionCase c = MakeCase("mqa_leftpad", 2, 4, 5, 7, 3, 4, 2);
      c.kv_heads = 1;
      c.options.key_starts = {1, 3};
      add(c, false);
    }
    {  // Per-row query offsets (one past the end, one negative: causal rows
       // that see nothing) with left padding.
      AttentionCase c = MakeCase("rows_offsets_causal", 2, 2, 4, 6, 3, 2, 2);
      c.options.query_offsets = {3, -1};
      c.options.key_starts = {0, 1};
      add(c, true);
    }
    {  // Left padding beyond some causal rows (rows 0..2 of item 0 and the
       // whole of item 1 see nothing), an explicit scale, grouped-query.
      AttentionCase c = MakeCase("leftpad_masked_rows", 2, 2, 6, 6, 3, 3, 2);
      c.kv_heads = 1;
      c.options.key_starts = {3, 6};
      c.options.scale = 0.8;
      add(c, true);
    }
    {  // Decoding one query per row at different positions (batched
       // generation of prompts of different lengths).
      AttentionCase c = MakeCase("rows_decode", 3, 2, 1, 6, 2, 3, 2);
      c.kv_heads = 1;
      c.options.query_offsets = {5, 2, 0};
      c.options.key_lengths = {6, 3, 6};
      c.options.key_starts = {0, 1, 0};
      add(c, true);
    }
  }
  return cases;
}

std::vector<AttentionCase> LayoutSweepCases() {
  std::vector<AttentionCase> cases;
  // Every registry scheme that acts inside attention at its paper's default
  // settings (Shaw's k = 16, T5's 32 / 128, ...), RoPE as the plain
  // attention it runs after rotating q and k.
  for (const Scheme* s : AttentionSchemes(true)) {
    auto add = [&](AttentionCase c, bool causal) {
      c.name = CaseName(*s) + "_" + c.name;
      c.options.causal = causal;
      SetRegistryScheme(c, *s);
      // T5's unscaled scores on its scalar-table schemes.
      if (c.options.score_term == ScoreTerm::kScalarTable) c.options.scale = 1.0;
      cases.push_back(std::move(c));
    };
    {  // Left padding on and off the key tile edges, grouped-query.
      AttentionCase c = MakeCase("gqa_leftpad_129", 3, 4, 129, 129, 64, 32, 16);
      c.kv_heads = 2;
      c.options.key_starts = {63, 64, 65};
      add(c, true);
    }
    {  // Multi-query decoding with a cache: one query per row at its own
       // position, left-padded prompts.
      AttentionCase c = MakeCase("mqa_decode_1x200", 2, 4, 1, 200, 64, 64, 16);
      c.kv_heads = 1;
      c.options.query_offsets = {199, 150};
      c.options.key_lengths = {200, 151};
      c.options.key_starts = {0, 137};
      add(c, true);
    }
    {  // A prefill chunk per row at different offsets.
      AttentionCase c = MakeCase("rows_chunk_17x130", 3, 2, 17, 130, 32, 32, 16);
      c.options.query_offsets = {113, 50, 0};
      c.options.key_lengths = {130, 100, 17};
      c.options.key_starts = {0, 10, 0};
      add(c, true);
    }
    {  // One key/value head and one item: the backward splits its key
       // tiles over chunks (threads > pairs), each looping over the group.
      AttentionCase c = MakeCase("mqa_chunks_200", 1, 4, 200, 200, 32, 32, 16);
      c.kv_heads = 1;
      c.options.key_starts = {30};
      add(c, false);
    }
  }
  return cases;
}

}  // namespace relpos

namespace relpos {

std::vector<AttentionCase> FewQueryCases() {
  // Every scheme: the small settings of SchemeCases (reaches of 1-6, so the
  // runs' edges land inside short key ranges), realistic ones of the sweeps,
  // Shaw's clip in each term combination, shared and per-head, and plain
  // attention (RoPE's call).
  struct FewQueryScheme {
    const char* name;
    void (*set)(AttentionCase&);
  };
  static const FewQueryScheme kSchemes[] = {
      {"shaw", [](AttentionCase& c) { c.options.max_distance = 3; }},
      {"shaw16perhead",
       [](AttentionCase& c) {
         c.options.max_distance = 16;
         c.options.per_head_tables = true;
       }},
      {"shawkey", [](AttentionCase& c) { c.options.value_term = false; }},
      {"shawvalue", [](AttentionCase& c) { c.options.key_term = false; }},
      {"shawk0", [](AttentionCase& c) { c.options.max_distance = 0; }},
      {"plain",
       [](AttentionCase& c) {
         c.options.key_term = false;
         c.options.value_term = false;
       }},
      {"asym", [](AttentionCase& c) { SetScheme(c, "asym"); }},
      {"asym0", [](AttentionCase& c) { SetScheme(c, "asym0"); }},
      {"shaw_asym_defaults",
       [](AttentionCase& c) {
         SetRegistryScheme(c, FindScheme(SchemeId::kShawAsym));
       }},
      {"log", [](AttentionCase& c) { SetScheme(c, "log"); }},
      {"shaw_log_defaults",
       [](AttentionCase& c) {
         SetRegistryScheme(c, FindScheme(SchemeId::kShawLog));
       }},
      {"t5", [](AttentionCase& c) { SetScheme(c, "t5"); }},
      {"t5causal", [](AttentionCase& c) { SetScheme(c, "t5causal"); }},
      {"t5_defaults",
       [](AttentionCase& c) {
         SetRegistryScheme(c, FindScheme(SchemeId::kT5));
         c.options.scale = 1.0;
       }},
      {"alibi", [](AttentionCase& c) { SetScheme(c, "alibi"); }},
      {"alibiuser", [](AttentionCase& c) { SetScheme(c, "alibiuser"); }},
      {"alibivalue",
       [](AttentionCase& c) {
         c.options.score_term = ScoreTerm::kAlibi;
         c.options.max_distance = 2;
       }},
      {"xl", [](AttentionCase& c) { SetScheme(c, "xl"); }},
      {"xlv", [](AttentionCase& c) { SetScheme(c, "xlv"); }},
  };
  std::vector<AttentionCase> shapes;
  auto shape = [&](AttentionCase c, bool causal) {
    c.options.causal = causal;
    shapes.push_back(std::move(c));
  };
  shape(MakeCase("q1_k1_d1", 1, 2, 1, 1, 1, 1, 2), true);
  // Two key chunks (512 + 1), dk and dv whole vectors.
  shape(MakeCase("q1_k513", 2, 2, 1, 513, 64, 64, 2), true);
  {  // Each row at its own position and window: the last keys, a middle
     // window with left padding, a row before every key (sees nothing).
    AttentionCase c = MakeCase("q4_k1100_rows", 3, 2, 4, 1100, 17, 9, 2);
    c.options.query_offsets = {1096, 600, -6};
    c.options.key_lengths = {1100, 700, 1100};
    c.options.key_starts = {0, 37, 0};
    shape(c, true);
  }
  {  // Grouped-query: 2 heads x 3 rows per key/value head (two work items).
    AttentionCase c = MakeCase("q3_gqa_k200", 2, 4, 3, 200, 32, 48, 2);
    c.kv_heads = 2;
    c.options.key_starts = {5, 0};
    shape(c, true);
  }
  {  // Multi-query: 8 heads x 2 rows on one key/value head, right padding,
     // bidirectional (keys after the query too).
    AttentionCase c = MakeCase("q2_mqa8_k65", 1, 8, 2, 65, 64, 16, 2);
    c.kv_heads = 1;
    c.options.key_lengths = {60};
    shape(c, false);
  }
  // Nq > Nk: the default offset is negative; the first row sees nothing.
  shape(MakeCase("q4_k3", 1, 2, 4, 3, 5, 3, 2), true);
  {  // Every key far to the left of the query, then far to the right.
    AttentionCase c = MakeCase("q1_far_left", 1, 2, 1, 70, 16, 16, 2);
    c.options.query_offset = 5000;
    shape(c, false);
    AttentionCase r = MakeCase("q2_far_right", 1, 2, 2, 70, 16, 16, 2);
    r.options.query_offset = -5000;
    shape(r, false);
  }
  {  // A long cache, per-row offsets inside it, bidirectional, a scale.
    AttentionCase c = MakeCase("q3_k2100_mid", 2, 2, 3, 2100, 64, 32, 2);
    c.options.query_offsets = {1024, 2};
    c.options.scale = 0.8;
    shape(c, false);
  }
  std::vector<AttentionCase> cases;
  for (const FewQueryScheme& s : kSchemes) {
    for (AttentionCase c : shapes) {
      s.set(c);  // on top of the shape's k = 2
      c.name = std::string(s.name) + "_" + c.name;
      cases.push_back(std::move(c));
    }
  }
  // ALiBi's distances around 2^24 (exact in float below it), small slopes.
  cases.push_back(AlibiExactnessEdgeCase("alibi_q2_exactness_edge", 2, 300));
  return cases;
}

AttentionCase AlibiExactnessEdgeCase(const std::string& name, int64_t q_len,
                                     int64_t k_len) {
  AttentionCase e = MakeCase(name, 1, 2, q_len, k_len, 16, 16, 0);
  e.options.score_term = ScoreTerm::kAlibi;
  e.options.value_term = false;
  e.options.alibi_slopes = {1e-6, -2e-6};
  e.options.query_offset = -(int64_t{1} << 24) + 100;
  return e;
}

}  // namespace relpos
