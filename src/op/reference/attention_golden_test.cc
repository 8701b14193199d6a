// Golden-file test: relpos's attention against an independent numpy
// implementation of docs/math.md sections 1-3 (tests/golden/gen_golden.py, which
// also documents the file format). Each tests/golden/*.bin file holds one
// case: options, shapes, inputs, dout and the expected out, lse and
// gradients. The public API runs in double (the reference) and in float (the
// default path: the fused kernel once it is built), and both must agree with
// the file within rounding-error tolerances (tests/support/attention_cases.h,
// TermScales). Any mismatch, unreadable file or format change fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "relpos/attention.h"
#include "support/attention_cases.h"

namespace relpos {
namespace {

constexpr char kMagic[8] = {'R', 'P', 'G', 'O', 'L', 'D', '\0', '\0'};
constexpr uint32_t kVersion = 1;
constexpr char kRegenerate[] =
    "regenerate the golden files from the repository root with: "
    "/usr/bin/python3 tests/golden/gen_golden.py";

std::filesystem::path GoldenDir() {
  return std::filesystem::path(RELPOS_SOURCE_DIR) / "tests" / "golden";
}

std::vector<std::string> GoldenFiles() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(GoldenDir(), ec))
    if (entry.path().extension() == ".bin")
      names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Array {
  std::vector<int64_t> shape;
  std::vector<double> data;
};

struct GoldenCase {
  AttentionCase c;
  std::map<std::string, Array> arrays;
};

// Little-endian reader that records the first failure instead of throwing,
// so the test can report it with the regeneration hint. Sizes read from the
// file are bounded before anything is allocated.
class Reader {
 public:
  explicit Reader(const std::filesystem::path& path)
      : in_(path, std::ios::binary) {
    if (!in_) error_ = "cannot open " + path.string();
  }
  template <typename T>
  T Read() {
    T value{};
    Bytes(&value, sizeof(T));
    return value;
  }
  void Bytes(void* dst, size_t n) {
    if (!error_.empty()) return;
    if (!in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n)))
      error_ = "file ends early";
  }
  std::string String(uint32_t max_len) {
    const uint32_t n = Read<uint32_t>();
    if (n > max_len) Fail("string length " + std::to_string(n) + " too large");
    if (!error_.empty()) return "";
    std::string s(n, '\0');
    Bytes(s.data(), n);
    return s;
  }
  void Fail(const std::string& why) {
    if (error_.empty()) error_ = why;
  }
  bool AtEnd() { return in_.peek() == std::char_traits<char>::eof(); }
  const std::string& error() const { return error_; }

 private:
  std::ifstream in_;
  std::string error_;
};

// Returns an empty string on success, else what is wrong with the file.
std::string ReadGolden(const std::string& name, GoldenCase* g) {
  Reader r(GoldenDir() / (name + ".bin"));
  char magic[8];
  r.Bytes(magic, sizeof(magic));
  if (!r.error().empty()) return r.error();
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
    return "bad magic (not an RPGOLD file)";
  const uint32_t version = r.Read<uint32_t>();
  if (r.error().empty() && version != kVersion)
    return "format version " + std::to_string(version) + ", this test reads " +
           std::to_string(kVersion);
  AttentionCase& c = g->c;
  c.name = r.String(256);
  c.batch = r.Read<int64_t>();
  c.heads = r.Read<int64_t>();
  c.q_len = r.Read<int64_t>();
  c.k_len = r.Read<int64_t>();
  c.dk = r.Read<int64_t>();
  c.dv = r.Read<int64_t>();
  c.options.max_distance = r.Read<int64_t>();
  uint8_t flags[5];
  r.Bytes(flags, sizeof(flags));
  c.options.per_head_tables = flags[0];
  c.options.key_term = flags[1];
  c.options.value_term = flags[2];
  c.options.causal = flags[3];
  const int64_t offset = r.Read<int64_t>();
  if (flags[4]) c.options.query_offset = offset;
  const int64_t n_lengths = r.Read<int64_t>();
  if (n_lengths < 0 || n_lengths > 1024) r.Fail("bad key_lengths count");
  for (int64_t b = 0; b < n_lengths && r.error().empty(); ++b)
    c.options.key_lengths.push_back(r.Read<int64_t>());
  const uint32_t n_arrays = r.Read<uint32_t>();
  if (n_arrays > 64) r.Fail("bad array count");
  for (uint32_t a = 0; a < n_arrays && r.error().empty(); ++a) {
    const std::string array_name = r.String(16);
    Array arr;
    const uint32_t rank = r.Read<uint32_t>();
    if (rank > 4) r.Fail("array " + array_name + " has rank > 4");
    int64_t numel = 1;
    for (uint32_t d = 0; d < rank && r.error().empty(); ++d) {
      arr.shape.push_back(r.Read<int64_t>());
      if (arr.shape.back() < 0 || arr.shape.back() > (1 << 20))
        r.Fail("array " + array_name + " has a bad extent");
      numel *= arr.shape.back();
    }
    if (numel > (1 << 22)) r.Fail("array " + array_name + " is too large");
    if (!r.error().empty()) break;
    arr.data.resize(numel);
    r.Bytes(arr.data.data(), numel * sizeof(double));
    g->arrays[array_name] = std::move(arr);
  }
  if (r.error().empty() && !r.AtEnd()) r.Fail("trailing bytes");
  return r.error();
}

// The array `name` with the expected shape, or a failure message.
std::string Take(GoldenCase& g, const std::string& name,
                 std::vector<int64_t> shape, std::vector<double>* out) {
  auto it = g.arrays.find(name);
  if (it == g.arrays.end()) return "missing array " + name;
  if (it->second.shape != shape) return "array " + name + " has a wrong shape";
  *out = std::move(it->second.data);
  return "";
}

class GoldenTest : public testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesNumpy) {
  const std::string file = GetParam() + ".bin";
  GoldenCase g;
  const std::string read_error = ReadGolden(GetParam(), &g);
  ASSERT_TRUE(read_error.empty())
      << "tests/golden/" << file << ": " << read_error << "; " << kRegenerate;
  const AttentionCase& c = g.c;
  SCOPED_TRACE(c.Describe());

  // Inputs, with the shapes the header promises.
  AttentionData<double> d;
  d.c = c;
  const int64_t th = c.TableHeads(), rows = c.TableRows();
  auto table_shape = [&](int64_t width) {
    return c.options.per_head_tables ? std::vector<int64_t>{th, rows, width}
                                     : std::vector<int64_t>{rows, width};
  };
  std::vector<double> dout, out, lse, dq, dk, dv, dak, dav;
  std::vector<std::string> errors = {
      Take(g, "q", {c.batch, c.heads, c.q_len, c.dk}, &d.q),
      Take(g, "k", {c.batch, c.heads, c.k_len, c.dk}, &d.k),
      Take(g, "v", {c.batch, c.heads, c.k_len, c.dv}, &d.v),
      Take(g, "dout", {c.batch, c.heads, c.q_len, c.dv}, &dout),
      Take(g, "out", {c.batch, c.heads, c.q_len, c.dv}, &out),
      Take(g, "lse", {c.batch, c.heads, c.q_len}, &lse),
      Take(g, "dq", {c.batch, c.heads, c.q_len, c.dk}, &dq),
      Take(g, "dk", {c.batch, c.heads, c.k_len, c.dk}, &dk),
      Take(g, "dv", {c.batch, c.heads, c.k_len, c.dv}, &dv)};
  if (c.options.key_term) {
    errors.push_back(Take(g, "ak", table_shape(c.dk), &d.ak));
    errors.push_back(Take(g, "dak", table_shape(c.dk), &dak));
  }
  if (c.options.value_term) {
    errors.push_back(Take(g, "av", table_shape(c.dv), &d.av));
    errors.push_back(Take(g, "dav", table_shape(c.dv), &dav));
  }
  for (const std::string& e : errors)
    ASSERT_TRUE(e.empty()) << "tests/golden/" << file << ": " << e << "; "
                           << kRegenerate;

  const TermScales ts = ComputeTermScales(d, dout);
  const std::vector<const std::vector<double>*> want = {&dq, &dk, &dv, &dak,
                                                        &dav};
  const double grad_scale[] = {ts.dq, ts.dk, ts.dv, ts.dak, ts.dav};
  const char* names[] = {"dq", "dk", "dv", "dak", "dav"};

  // Runs the public API with scalar type T and compares everything.
  auto check = [&](auto zero, double u, const char* label) {
    using T = decltype(zero);
    SCOPED_TRACE(label);
    const AttentionData<T> dt = CastData<T>(d);
    AttentionOutputBuffers<T> fwd = MakeOutputs<T>(c);
    AttentionForward<T>(dt.Inputs(), fwd.Out(), fwd.Lse(), c.options);
    EXPECT_LE(MaxAbsError(fwd.out, out), ts.Tolerance(u, ts.out)) << "out";
    EXPECT_LE(MaxAbsError(fwd.lse, lse), ts.Tolerance(u, ts.lse)) << "lse";
    const std::vector<T> dout_t(dout.begin(), dout.end());
    AttentionGradBuffers<T> grads = MakeGrads<T>(c, dt);
    AttentionBackward<T>(dt.Inputs(), fwd.Out(), fwd.Lse(),
                         OutShaped(c, dout_t), grads.Grads(), c.options);
    for (int t = 0; t < 5; ++t)
      EXPECT_LE(MaxAbsError(*grads.Tensors()[t], *want[t]),
                ts.Tolerance(u, grad_scale[t]))
          << names[t];
  };
  check(double{}, std::numeric_limits<double>::epsilon() / 2, "double");
  check(float{}, std::numeric_limits<float>::epsilon() / 2, "float");
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenTest, testing::ValuesIn(GoldenFiles()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenTest);

// The files exist (a missing directory would otherwise just run no cases).
TEST(Golden, FilesPresent) {
  EXPECT_GE(GoldenFiles().size(), 8u)
      << "expected the golden files in " << GoldenDir() << "; " << kRegenerate;
}

}  // namespace
}  // namespace relpos
