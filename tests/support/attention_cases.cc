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

int64_t AttentionCase::Bucket(int64_t i, int64_t j) const {
  const int64_t r = j - (i + QueryOffset());
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
  if (options.causal) end = std::min(end, i + QueryOffset() + 1);
  return std::max<int64_t>(end, 0);
}

std::string AttentionCase::Describe() const {
  std::ostringstream os;
  os << name << ": B=" << batch << " H=" << heads << " Nq=" << q_len
     << " Nk=" << k_len << " dk=" << dk << " dv=" << dv
     << " k=" << options.max_distance
     << (options.per_head_tables ? " per-head" : " shared")
     << " key_term=" << options.key_term << " value_term=" << options.value_term
     << " causal=" << options.causal << " offset=" << QueryOffset()
     << (options.query_offset ? " (explicit)" : " (default)");
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
  if (!options.key_lengths.empty()) {
    os << " key_lengths={";
    for (size_t b = 0; b < options.key_lengths.size(); ++b)
      os << (b ? "," : "") << options.key_lengths[b];
    os << "}";
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const AttentionCase& c) {
  return os << c.Describe();
}

TermScales ComputeTermScales(const AttentionData<double>& d,
                             const std::vector<double>& dout) {
  const AttentionCase& c = d.c;
  const double inv_sqrt_dk = 1.0 / std::sqrt(static_cast<double>(c.dk));
  TermScales ts;
  ts.dk_dim = c.dk;
  ts.growth = static_cast<double>(c.q_len + c.k_len + c.dk + c.dv);
  double sum_row_ds = 0, max_row_ds = 0, sum_row_dout = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h;
      const int64_t tab = (c.options.per_head_tables ? h : 0) * c.TableRows();
      const double slope = std::abs(c.AlibiSlope(h));
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t end = c.KeyEnd(b, i);
        double max_w = 0;
        for (int64_t j = 0; j < end; ++j) {
          const int64_t r = c.Bucket(i, j);
          double s_abs = 0;
          for (int64_t t = 0; t < c.dk; ++t) {
            const double qt = std::abs(d.q[(bh * c.q_len + i) * c.dk + t]);
            s_abs += qt * std::abs(d.k[(bh * c.k_len + j) * c.dk + t]);
            if (!d.ak.empty()) {
              const double pt = d.pb.empty() ? 0 : std::abs(d.pb[h * c.dk + t]);
              s_abs += (qt + pt) * std::abs(d.ak[(tab + r) * c.dk + t]);
            }
          }
          s_abs *= inv_sqrt_dk;
          if (!d.bias.empty()) s_abs += std::abs(d.bias[h * c.TableRows() + r]);
          s_abs += slope * std::abs(static_cast<double>(j - (i + c.QueryOffset())));
          ts.max_score_abs = std::max(ts.max_score_abs, s_abs);
          for (int64_t t = 0; t < c.dv; ++t) {
            double w = std::abs(d.v[(bh * c.k_len + j) * c.dv + t]);
            if (!d.av.empty()) w += std::abs(d.av[(tab + r) * c.dv + t]);
            max_w = std::max(max_w, w);
          }
        }
        ts.out = std::max(ts.out, max_w);
        if (end == 0 || dout.empty()) continue;
        const int64_t row = bh * c.q_len + i;
        double l1 = 0, mx = 0;
        for (int64_t t = 0; t < c.dv; ++t) {
          l1 += std::abs(dout[row * c.dv + t]);
          mx = std::max(mx, std::abs(dout[row * c.dv + t]));
        }
        const double row_ds = 2 * l1 * max_w * inv_sqrt_dk;
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
  ts.dbias = sum_row_ds * std::sqrt(static_cast<double>(c.dk));
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

std::vector<AttentionCase> SchemeSweepCases() {
  std::vector<AttentionCase> cases;
  for (const Scheme& s : Schemes()) {
    // The registry's schemes with a relative term inside attention (RoPE
    // rotates q and k outside it and runs plain attention), each at its
    // paper's default settings and with the call the model makes.
    const AttentionOptions probe = s.Call(SchemeLayer{}, 1).attention;
    if (!probe.key_term && !probe.value_term) continue;
    std::string name = s.name;
    std::replace(name.begin(), name.end(), '-', '_');
    auto add = [&](AttentionCase c, bool causal) {
      SchemeLayer layer;
      layer.heads = c.heads;
      layer.head_dim = c.dk;
      layer.causal = causal;  // causal T5 buckets with the causal mask
      layer.settings.per_head_tables = c.options.per_head_tables;
      // Transformer-XL: every distance of the case has its own row.
      AttentionOptions o = s.Call(layer, c.q_len + c.k_len).attention;
      o.key_lengths = c.options.key_lengths;
      o.query_offset = c.options.query_offset;
      c.options = o;
      c.name = name + "_" + c.name;
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
