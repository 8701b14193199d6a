// Bucket maps, fixed slopes and fixed tables of the position schemes
// (docs/math.md section 8): which table row a signed distance uses, the
// ALiBi slope of each head, and the sinusoid tables nothing learns (the
// absolute encoding at the input, Transformer-XL's relative encodings).
// These are the pieces a scheme is built from; the attention kernels take
// the maps and slopes through their options.
//
// Distances follow relpos's convention (docs/math.md section 1):
//   r = j - (i + off)      key position minus query position,
// so r < 0 looks back (a key before the query) and r > 0 looks ahead. This is
// Hugging Face T5's `relative_position = memory_position - context_position`
// and Wav2Vec2-BERT's `distance = j - i` (docs/schemes.md maps each model).
#ifndef RELPOS_POSITION_SCHEMES_H_
#define RELPOS_POSITION_SCHEMES_H_

#include <cstdint>
#include <vector>

namespace relpos {

// ---------------------------------------------------------------------------
// Asymmetric clipping (Shaw et al. with separate reaches; w2v-BERT 2.0 uses
// left 64, right 8): row clip(r, -left, right) + left of a table with
// left + right + 1 rows. left == right == k is Shaw's symmetric clip.

struct ClipBuckets {
  int64_t left = 16;   // k_left >= 0: distances r <= -left share row 0
  int64_t right = 16;  // k_right >= 0: distances r >= right share the last row
};

// Validates (left, right >= 0, left + right + 1 <= 2^62). Throws
// InvalidArgument naming the field and its value.
void ValidateClipBuckets(const ClipBuckets& buckets);
// left + right + 1.
int64_t ClipBucketCount(const ClipBuckets& buckets);
// clip(r, -left, right) + left, for any int64 r. Does not validate.
int64_t ClipBucket(int64_t r, const ClipBuckets& buckets);

// ---------------------------------------------------------------------------
// T5's logarithmic buckets (Raffel et al. 2020), exactly as the Mesh
// TensorFlow and Hugging Face `_relative_position_bucket` compute them:
//
//   bidirectional: half = nb / 2 (floor), base = (r > 0 ? half : 0), a = |r|
//   causal:        half = nb,             base = 0,                a = max(-r,
//   0) exact = half / 2 (floor) bucket = base + a if a < exact
//          = base + min(half - 1, exact + trunc(
//                log(a / exact) / log(md / exact) * (half - exact)))  otherwise
//
// in float32: a / exact is a float32 division; log is the correctly rounded
// float32 logarithm of that quotient; log(md / exact) is computed in double
// (Python's math.log in both implementations) and rounded to float32; the
// division and the product are float32. A last-ulp difference in log decides
// the bucket at some distances (with nb = 32, md = 2^20, causal, r = -2^17 the
// quotient is exactly 13.0 in real arithmetic), so every step matters.
// Every |r| >= md shares the last bucket of its side (up to float32
// rounding of md itself when md > 2^24: T5BucketReach gives the exact reach).
//
// With nb odd and bidirectional, row nb - 1 is never used (as in T5).

struct T5Buckets {
  int64_t num_buckets = 32;    // table rows nb
  int64_t max_distance = 128;  // md: the reach of the logarithmic range
  // true: encoders (both directions, separate halves); false: decoders
  // (only r <= 0 is distinguished; every r >= 0 is bucket 0).
  bool bidirectional = true;
};

// Validates: num_buckets >= 4 if bidirectional, >= 2 if causal (so that
// exact >= 1), num_buckets <= 2^30, and max_distance > exact (the log range
// must be non-empty). Throws InvalidArgument naming the field and value.
void ValidateT5Buckets(const T5Buckets& buckets);
// The bucket of distance r, for any int64 r. Does not validate (call
// ValidateT5Buckets once).
int64_t T5Bucket(int64_t r, const T5Buckets& buckets);
// The reach: the smallest a >= 1 such that every r >= a shares one bucket
// and every r <= -a shares one bucket (so a kernel may treat tiles beyond it
// as constant). At most max_distance for max_distance <= 2^24. Validates.
int64_t T5BucketReach(const T5Buckets& buckets);
// Buckets of the distances r_first, r_first + 1, ..., r_first + count - 1;
// out must hold `count` entries. Validates. count >= 0.
void T5BucketRange(int64_t r_first, int64_t count, const T5Buckets& buckets,
                   int64_t* out);

// ---------------------------------------------------------------------------
// ALiBi (Press et al. 2022). Head h (0-based) of H adds -m_h |r| (or
// -m_h (i + off - j) under a causal mask) to its scores, with
//   m_h = 2^(-8 (h + 1) / H)                                 H a power of two;
// otherwise, with P the largest power of two below H, the P slopes of P
// followed by the slopes 0, 2, 4, ... (every other one) of 2P, H in all.
// Returned in double, each the correctly rounded 2^x of its exponent (the
// paper's code reaches the same values through repeated powers, within 8
// double ulps, and identically after rounding to float32).
// num_heads in [1, 2^20]; throws InvalidArgument otherwise.
std::vector<double> AlibiSlopes(int64_t num_heads);

// ---------------------------------------------------------------------------
// Fixed sinusoid tables, computed in double and rounded once to the output
// type (float or double), so that every length sees the same values for
// its prefix.

// The absolute encoding added to the token embeddings (scheme `sinusoidal`;
// Vaswani et al. 2017, section 3.5), table [length, dim]:
//   table[p, 2i]   = sin(p / 10000^(2i / dim))
//   table[p, 2i+1] = cos(p / 10000^(2i / dim)).
// length >= 0, dim >= 1, length * dim <= 2^40; InvalidArgument otherwise.
void SinusoidalTable(int64_t length, int64_t dim, float* table);
void SinusoidalTable(int64_t length, int64_t dim, double* table);

// Transformer-XL's fixed relative encodings R (scheme `xl`; Dai et al.
// 2019, section 3.3), for the distances r = -k .. k of relpos (key minus
// query; XL's distance is x = -r), table [2k+1, dim]:
//   table[r + k, t]         = sin(x f_t)
//   table[r + k, dim/2 + t] = cos(x f_t),   f_t = 10000^(-2t / dim),
// the sines first, then the cosines (XL's layout). k >= 0, dim >= 2 even,
// (2k+1) * dim <= 2^40; InvalidArgument otherwise.
void XlSinusoidTable(int64_t k, int64_t dim, float* table);
void XlSinusoidTable(int64_t k, int64_t dim, double* table);

}  // namespace relpos

#endif  // RELPOS_POSITION_SCHEMES_H_
