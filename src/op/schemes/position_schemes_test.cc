// Bucket maps and ALiBi slopes (include/relpos/position_schemes.h) against
// an independent numpy implementation of the published formulas
// (tests/golden/gen_position_schemes.py, which documents the file format):
// T5 buckets for every |r| <= 2^20 in every stored configuration, ALiBi
// slopes for H = 1..64 from the paper's code. Plus argument validation, the
// asymmetric clip map and the T5 reach.
#include "relpos/position_schemes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "relpos/error.h"
#include "support/expect_invalid.h"

namespace relpos {
namespace {

constexpr char kMagic[8] = {'R', 'P', 'S', 'C', 'H', 'E', 'M', '\0'};
constexpr uint32_t kVersion = 1;
constexpr char kRegenerate[] =
    "regenerate tests/golden/position_schemes.golden from the repository "
    "root with: /usr/bin/python3 tests/golden/gen_position_schemes.py";

struct T5Golden {
  T5Buckets buckets;
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first r, bucket)
};

struct Golden {
  int64_t reach = 0;  // distances -reach..reach
  std::vector<T5Golden> t5;
  std::vector<std::vector<double>> slopes;  // slopes[H - 1]
};

// Little-endian cursor over the whole file; the first failure sticks.
class Cursor {
 public:
  explicit Cursor(std::vector<char> bytes) : bytes_(std::move(bytes)) {}
  template <typename T>
  T Read() {
    T value{};
    if (!ok_ || bytes_.size() - pos_ < sizeof(T)) {
      ok_ = false;
      return value;
    }
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == bytes_.size(); }
  void Fail() { ok_ = false; }

 private:
  std::vector<char> bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Empty string on success, else what is wrong with the file.
std::string ReadGolden(Golden* g) {
  const auto path = std::filesystem::path(RELPOS_SOURCE_DIR) / "tests" /
                    "golden" / "position_schemes.golden";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path.string();
  Cursor c(std::vector<char>(std::istreambuf_iterator<char>(in), {}));
  char magic[8];
  for (char& m : magic) m = c.Read<char>();
  if (!c.ok() || std::memcmp(magic, kMagic, 8) != 0) return "bad magic";
  const uint32_t version = c.Read<uint32_t>();
  if (version != kVersion)
    return "format version " + std::to_string(version) + ", this test reads " +
           std::to_string(kVersion);
  g->reach = c.Read<int64_t>();
  if (g->reach < 0 || g->reach > (int64_t{1} << 30)) return "bad range";
  const uint32_t n_configs = c.Read<uint32_t>();
  if (n_configs > 1000) return "bad configuration count";
  for (uint32_t i = 0; i < n_configs && c.ok(); ++i) {
    T5Golden t;
    t.buckets.num_buckets = c.Read<int64_t>();
    t.buckets.max_distance = c.Read<int64_t>();
    t.buckets.bidirectional = c.Read<uint8_t>() != 0;
    const uint32_t n_runs = c.Read<uint32_t>();
    if (n_runs == 0 || n_runs > (1u << 22)) c.Fail();
    for (uint32_t k = 0; k < n_runs && c.ok(); ++k) {
      const int64_t first = c.Read<int64_t>();
      const int64_t bucket = c.Read<int64_t>();
      t.runs.emplace_back(first, bucket);
    }
    g->t5.push_back(std::move(t));
  }
  const uint32_t n_heads = c.Read<uint32_t>();
  if (n_heads > 1024) return "bad head-count count";
  for (uint32_t i = 0; i < n_heads && c.ok(); ++i) {
    const uint32_t h = c.Read<uint32_t>();
    if (h != i + 1) return "head counts must be 1, 2, ...";
    std::vector<double> s(h);
    for (double& x : s) x = c.Read<double>();
    g->slopes.push_back(std::move(s));
  }
  if (!c.ok()) return "file ends early or has a bad count";
  if (!c.at_end()) return "trailing bytes";
  return "";
}

class PositionSchemesGolden : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    golden_ = new Golden;
    error_ = new std::string(ReadGolden(golden_));
  }
  static void TearDownTestSuite() {
    delete golden_;
    delete error_;
  }
  void SetUp() override {
    ASSERT_TRUE(error_->empty()) << *error_ << "; " << kRegenerate;
  }
  static Golden* golden_;
  static std::string* error_;
};
Golden* PositionSchemesGolden::golden_ = nullptr;
std::string* PositionSchemesGolden::error_ = nullptr;

// Every distance -2^20..2^20 of every configuration, through both the
// scalar function and the range function, equals the expanded runs.
TEST_F(PositionSchemesGolden, T5BucketsEveryDistance) {
  const int64_t reach = golden_->reach;
  ASSERT_EQ(reach, int64_t{1} << 20) << kRegenerate;
  ASSERT_GE(golden_->t5.size(), 20u) << kRegenerate;
  const int64_t count = 2 * reach + 1;
  std::vector<int64_t> got(static_cast<size_t>(count));
  for (const T5Golden& t : golden_->t5) {
    const T5Buckets& b = t.buckets;
    SCOPED_TRACE("num_buckets " + std::to_string(b.num_buckets) +
                 ", max_distance " + std::to_string(b.max_distance) +
                 (b.bidirectional ? ", bidirectional" : ", causal"));
    ASSERT_NO_THROW(ValidateT5Buckets(b));
    ASSERT_EQ(t.runs.front().first, -reach) << kRegenerate;
    T5BucketRange(-reach, count, b, got.data());
    int64_t mismatches = 0;
    for (size_t k = 0; k < t.runs.size(); ++k) {
      const int64_t end =
          k + 1 < t.runs.size() ? t.runs[k + 1].first : reach + 1;
      const int64_t want = t.runs[k].second;
      for (int64_t r = t.runs[k].first; r < end; ++r) {
        const int64_t g = got[static_cast<size_t>(r + reach)];
        if (g != want && ++mismatches <= 5) {
          ADD_FAILURE() << "r = " << r << ": bucket " << g << ", golden "
                        << want << "; " << kRegenerate;
        }
        ASSERT_LT(g, b.num_buckets);
      }
    }
    EXPECT_EQ(mismatches, 0);
    // The scalar entry point is the same function.
    for (int64_t r : {-reach, int64_t{-1}, int64_t{0}, int64_t{1}, reach})
      EXPECT_EQ(T5Bucket(r, b), got[static_cast<size_t>(r + reach)]) << r;
  }
}

// The reach: every |r| >= reach is its side's last bucket, reach - 1 is not
// (when reach > 1), and far beyond the golden range nothing changes, up to
// the int64 extremes (no overflow in |r|).
TEST_F(PositionSchemesGolden, T5Reach) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const T5Golden& t : golden_->t5) {
    const T5Buckets& b = t.buckets;
    SCOPED_TRACE(std::to_string(b.num_buckets) + "/" +
                 std::to_string(b.max_distance));
    const int64_t reach = T5BucketReach(b);
    const int64_t left_last = T5Bucket(kMin, b);
    const int64_t right_last = T5Bucket(kMax, b);
    EXPECT_EQ(left_last, t.runs.front().second);
    EXPECT_EQ(right_last, t.runs.back().second);
    EXPECT_LE(reach, b.max_distance);  // every md here is <= 2^24
    for (int64_t a : {reach, reach + 1, 2 * reach + 7, kMax / 2, kMax}) {
      EXPECT_EQ(T5Bucket(-a, b), left_last) << a;
      EXPECT_EQ(T5Bucket(a, b), right_last) << a;
    }
    if (reach > 1) {
      const bool left_moves = T5Bucket(-(reach - 1), b) != left_last;
      const bool right_moves = T5Bucket(reach - 1, b) != right_last;
      EXPECT_TRUE(left_moves || right_moves) << "reach " << reach;
    }
  }
}

// ALiBi slopes against the paper's code: equal after rounding to float32
// (what the kernels use) and within 8 double ulps (the paper's repeated
// powers round differently from one exp2).
TEST_F(PositionSchemesGolden, AlibiSlopesMatchPaper) {
  ASSERT_EQ(golden_->slopes.size(), 64u) << kRegenerate;
  for (int64_t h = 1; h <= 64; ++h) {
    const std::vector<double>& want = golden_->slopes[h - 1];
    const std::vector<double> got = AlibiSlopes(h);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(static_cast<float>(got[i]), static_cast<float>(want[i]))
          << "H " << h << " head " << i;
      EXPECT_LE(std::abs(got[i] - want[i]),
                8 * std::numeric_limits<double>::epsilon() * want[i])
          << "H " << h << " head " << i;
    }
  }
}

TEST(AlibiSlopes, PowersOfTwoAreExact) {
  // H = 8: 1/2, 1/4, ..., 1/256 exactly (the paper's example).
  const std::vector<double> s = AlibiSlopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s[h], std::ldexp(1.0, -(h + 1)));
  EXPECT_EQ(AlibiSlopes(1), std::vector<double>{1.0 / 256});
}

TEST(AlibiSlopes, RejectsBadHeadCounts) {
  for (int64_t h : {int64_t{0}, int64_t{-3}, (int64_t{1} << 20) + 1})
    ExpectInvalid([&] { AlibiSlopes(h); }, {"num_heads", std::to_string(h)});
}

TEST(T5Buckets, Validation) {
  ExpectInvalid(
      [] {
        ValidateT5Buckets({3, 128, true});
      },
      {"num_buckets", "3"});
  ExpectInvalid(
      [] {
        ValidateT5Buckets({1, 128, false});
      },
      {"num_buckets", "1"});
  ExpectInvalid(
      [] {
        ValidateT5Buckets({int64_t{1} << 31, 1 << 30, false});
      },
      {"num_buckets"});
  // exact = 8 for 32 bidirectional buckets: max_distance must exceed it.
  ExpectInvalid(
      [] {
        ValidateT5Buckets({32, 8, true});
      },
      {"max_distance", "8"});
  ExpectInvalid(
      [] {
        ValidateT5Buckets({32, -5, false});
      },
      {"max_distance", "-5"});
  ExpectInvalid([] { T5BucketReach({32, 16, false}); }, {"max_distance", "16"});
  int64_t out[2];
  ExpectInvalid([&] { T5BucketRange(0, -1, {}, out); }, {"count", "-1"});
  ExpectInvalid(
      [&] { T5BucketRange(std::numeric_limits<int64_t>::max(), 2, {}, out); },
      {"r_first"});
  EXPECT_NO_THROW(ValidateT5Buckets({}));
  EXPECT_NO_THROW(ValidateT5Buckets({4, 2, true}));
  EXPECT_NO_THROW(ValidateT5Buckets({2, 2, false}));
}

// Hand-checked values of T5's default (32 buckets, max distance 128).
TEST(T5Buckets, DefaultsByHand) {
  const T5Buckets enc{};  // bidirectional
  EXPECT_EQ(T5Bucket(0, enc), 0);
  EXPECT_EQ(T5Bucket(-7, enc), 7);  // exact range: 0..7
  EXPECT_EQ(T5Bucket(1, enc), 17);  // right half starts at 16
  EXPECT_EQ(T5Bucket(-8, enc), 8);  // first log bucket
  EXPECT_EQ(T5Bucket(-128, enc), 15);
  EXPECT_EQ(T5Bucket(1000, enc), 31);
  const T5Buckets dec{32, 128, false};
  EXPECT_EQ(T5Bucket(5, dec), 0);  // the future is one bucket
  EXPECT_EQ(T5Bucket(-15, dec), 15);
  EXPECT_EQ(T5Bucket(-16, dec), 16);
  EXPECT_EQ(T5Bucket(-128, dec), 31);
}

TEST(ClipBuckets, AsymmetricAndSymmetric) {
  const ClipBuckets w2v{64, 8};  // Wav2Vec2-BERT
  EXPECT_EQ(ClipBucketCount(w2v), 73);
  EXPECT_EQ(ClipBucket(-1000, w2v), 0);
  EXPECT_EQ(ClipBucket(-64, w2v), 0);
  EXPECT_EQ(ClipBucket(-63, w2v), 1);
  EXPECT_EQ(ClipBucket(0, w2v), 64);
  EXPECT_EQ(ClipBucket(8, w2v), 72);
  EXPECT_EQ(ClipBucket(std::numeric_limits<int64_t>::max(), w2v), 72);
  EXPECT_EQ(ClipBucket(std::numeric_limits<int64_t>::min(), w2v), 0);
  // left == right == k is Shaw's clip(r, -k, k) + k.
  for (int64_t k : {0, 1, 16}) {
    const ClipBuckets sym{k, k};
    for (int64_t r = -3 * k - 2; r <= 3 * k + 2; ++r)
      EXPECT_EQ(ClipBucket(r, sym), std::clamp(r, -k, k) + k);
  }
  ExpectInvalid([] { ValidateClipBuckets({-1, 8}); }, {"left", "-1"});
  ExpectInvalid([] { ValidateClipBuckets({4, -2}); }, {"right", "-2"});
  ExpectInvalid([] { ValidateClipBuckets({int64_t{1} << 62, 0}); }, {"left"});
  EXPECT_NO_THROW(ValidateClipBuckets({0, 0}));
}

}  // namespace
}  // namespace relpos
