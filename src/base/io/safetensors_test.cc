#include "base/io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "relpos/error.h"

namespace relpos::io {
namespace {

using ::testing::HasSubstr;
using namespace std::string_literals;

// 8-byte little-endian length + header text + data.
std::string Assemble(uint64_t header_size, const std::string& header,
                     const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(header_size >> (8 * i));
  return out + header + data;
}
std::string Assemble(const std::string& header, const std::string& data) {
  return Assemble(header.size(), header, data);
}

bool SameBits(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

std::vector<NamedTensor> SampleTensors() {
  return {
      {"layer.0.weight", {2, 3}, {1, -2, 3.5f, 0, -0.0f, 1e-40f}},
      {"scalar", {}, {std::numeric_limits<float>::infinity()}},
      {"empty", {0, 5}, {}},
      // Empty, although the other dims' product overflows 64 bits.
      {"wide_empty", {int64_t{1} << 62, int64_t{1} << 62, 0}, {}},
      {"nan", {1}, {std::numeric_limits<float>::quiet_NaN()}},
      {"a", {4}, {0.1f, 0.2f, 0.3f, 0.4f}},
  };
}

TEST(SafetensorsTest, RoundTripKeepsEverythingBitExact) {
  const auto tensors = SampleTensors();
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"relpos.config", "{\"d\": 1}"}, {"empty", ""}};
  const std::string bytes = EncodeSafetensors(tensors, metadata);
  // The writer pads the header so the data section is 8-byte aligned.
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);  // little-endian host in CI
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_size + 4 * (6 + 1 + 0 + 1 + 4));

  const SafetensorsFile file = ParseSafetensors(bytes, "mem");
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  // Parsed in data order, which is the order they were written in.
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ(file.tensors[i].name, tensors[i].name);
    EXPECT_EQ(file.tensors[i].shape, tensors[i].shape);
    ASSERT_EQ(file.tensors[i].data.size(), tensors[i].data.size());
    for (size_t j = 0; j < tensors[i].data.size(); ++j) {
      EXPECT_TRUE(SameBits(file.tensors[i].data[j], tensors[i].data[j])) << j;
    }
  }
  // No tensors and no metadata is a valid file too.
  const SafetensorsFile none = ParseSafetensors(EncodeSafetensors({}, {}), "m");
  EXPECT_TRUE(none.tensors.empty());
  EXPECT_TRUE(none.metadata.empty());
}

// The exact bytes of a one-tensor file, written out by hand from the format.
TEST(SafetensorsTest, EncodesTheDocumentedLayout) {
  const std::string bytes = EncodeSafetensors({{"x", {1}, {1.0f}}}, {});
  const std::string header =
      R"({"x":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}})";
  ASSERT_EQ(header.size(), 54u);  // padded with 2 spaces to 56
  const std::string expected =
      "\x38\0\0\0\0\0\0\0"s + header + "  " + "\x00\x00\x80\x3f"s;
  EXPECT_EQ(bytes, expected);
}

TEST(SafetensorsTest, AcceptsHeadersFromOtherWriters) {
  // Unsorted keys, whitespace, tensors stored out of name order, an
  // empty tensor sharing an offset with a non-empty one, no metadata.
  const std::string header =
      R"( { "b" : {"dtype":"F32","shape":[1],"data_offsets":[4,8]},
            "z" : {"dtype":"F32","shape":[0],"data_offsets":[4,4]},
            "a" : {"dtype":"F32","shape":[],"data_offsets":[0,4]} }   )";
  const std::string data = "\x00\x00\x80\x3f\x00\x00\x00\x40"s;  // 1.0f, 2.0f
  const SafetensorsFile file = ParseSafetensors(Assemble(header, data), "x");
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].name, "a");
  EXPECT_EQ(file.tensors[0].data, std::vector<float>{1.0f});
  EXPECT_EQ(file.tensors[1].name, "z");
  EXPECT_EQ(file.tensors[2].name, "b");
  EXPECT_EQ(file.tensors[2].data, std::vector<float>{2.0f});
}

TEST(SafetensorsTest, EncodeRejectsInconsistentTensors) {
  EXPECT_THROW(EncodeSafetensors({{"a", {2}, {1}}}, {}), InvalidArgument);
  EXPECT_THROW(EncodeSafetensors({{"a", {-1}, {}}}, {}), InvalidArgument);
  EXPECT_THROW(EncodeSafetensors({{"", {1}, {1}}}, {}), InvalidArgument);
  EXPECT_THROW(EncodeSafetensors({{"__metadata__", {1}, {1}}}, {}),
               InvalidArgument);
  EXPECT_THROW(EncodeSafetensors({{"a", {1}, {1}}, {"a", {1}, {2}}}, {}),
               InvalidArgument);
  // 2^33 * 2^31 wraps to 0 in 64 bits, which would match an empty data vector.
  EXPECT_THROW(EncodeSafetensors(
                   {{"a", {int64_t{1} << 33, int64_t{1} << 31}, {}}}, {}),
               InvalidArgument);
}

struct HostileCase {
  const char* label;
  std::string bytes;
  const char* fragment;  // expected in the FormatError message
};

std::string Entry(const std::string& name, const std::string& shape,
                  const std::string& offsets, const std::string& dtype = "F32") {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

std::vector<HostileCase> HostileCases() {
  const std::string d8(8, '\0'), d12(12, '\0'), d16(16, '\0');
  return {
      {"empty input", "", "too short for the 8-byte header length"},
      {"truncated length prefix", "\x10\0\0"s, "too short"},
      {"header longer than the cap", Assemble(200'000'000, "{}", ""),
       "exceeds the limit of 100000000"},
      {"header length near 2^64", Assemble(~uint64_t{0} - 3, "{}", ""),
       "exceeds the limit"},
      {"header longer than the file", Assemble(100, "{}", d8),
       "exceeds the 10 bytes after the length prefix"},
      {"truncated header", Assemble(10, "{\"a\":", ""), "exceeds the"},
      {"bad JSON", Assemble("{\"a\": ", ""), "header is not valid JSON"},
      {"JSON with trailing garbage", Assemble("{} x", ""), "not valid JSON"},
      {"invalid UTF-8", Assemble("{\"\xff\":1}", ""), "not valid JSON"},
      {"non-object header", Assemble("[1,2]", ""), "must be a JSON object"},
      {"string header", Assemble("\"hi\"", ""), "must be a JSON object"},
      {"entry not an object", Assemble("{\"a\":3}", ""),
       "tensor 'a': entry must be an object"},
      {"missing field",
       Assemble(R"({"a":{"dtype":"F32","shape":[1]}})", d8),
       "needs dtype, shape and data_offsets"},
      {"unknown field",
       Assemble(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})",
                std::string(4, '\0')),
       "unknown field 'x'"},
      {"unknown dtype", Assemble("{" + Entry("a", "[2]", "[0,4]", "F16") + "}",
                                 std::string(4, '\0')),
       "unsupported dtype 'F16'"},
      {"made-up dtype", Assemble("{" + Entry("a", "[1]", "[0,4]", "Q7") + "}",
                                 std::string(4, '\0')),
       "unsupported dtype 'Q7'"},
      {"dtype not a string",
       Assemble(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", d8),
       "dtype must be a string"},
      {"shape not an array", Assemble("{" + Entry("a", "2", "[0,8]") + "}", d8),
       "shape must be an array"},
      {"negative shape", Assemble("{" + Entry("a", "[-2]", "[0,8]") + "}", d8),
       "shape entries must be non-negative integers (got -2)"},
      {"fractional shape", Assemble("{" + Entry("a", "[1.5]", "[0,8]") + "}", d8),
       "shape entries must be non-negative integers"},
      {"huge shape", Assemble("{" + Entry("a", "[1e30]", "[0,8]") + "}", d8),
       "shape entries must be non-negative integers"},
      {"shape beyond int64",
       Assemble("{" + Entry("a", "[18446744073709551615,0]", "[0,0]") + "}", ""),
       "is too large"},
      // 2^62 * 4 elements * 4 bytes wraps to 0 in 64-bit arithmetic.
      {"shape product overflow",
       Assemble("{" + Entry("a", "[4611686018427387904,4]", "[0,0]") + "}", ""),
       "does not match its 0-byte data range"},
      {"shape product overflow to the data size",
       Assemble("{" + Entry("a", "[4611686018427387906,2]", "[0,16]") + "}", d16),
       "does not match"},
      {"mismatched size", Assemble("{" + Entry("a", "[3]", "[0,8]") + "}", d8),
       "does not match its 8-byte data range"},
      {"offsets outside the data",
       Assemble("{" + Entry("a", "[100]", "[0,400]") + "}", d16),
       "lie outside the data section of 16 bytes"},
      {"offsets beyond uint64",
       Assemble("{" + Entry("a", "[1]", "[0,1e40]") + "}", d8),
       "data_offsets must be two non-negative integers"},
      {"negative offset", Assemble("{" + Entry("a", "[1]", "[-4,0]") + "}", d8),
       "data_offsets must be two"},
      {"three offsets", Assemble("{" + Entry("a", "[1]", "[0,4,8]") + "}", d8),
       "data_offsets must be two"},
      {"begin after end", Assemble("{" + Entry("a", "[1]", "[8,4]") + "}", d8),
       "begin 8 > end 4"},
      {"overlapping tensors",
       Assemble("{" + Entry("a", "[2]", "[0,8]") + "," +
                    Entry("b", "[2]", "[4,12]") + "}",
                d12),
       "overlaps the previous tensor"},
      {"identical ranges",
       Assemble("{" + Entry("a", "[2]", "[0,8]") + "," +
                    Entry("b", "[2]", "[0,8]") + "}",
                d8),
       "overlaps"},
      {"gap between tensors",
       Assemble("{" + Entry("a", "[1]", "[0,4]") + "," +
                    Entry("b", "[1]", "[8,12]") + "}",
                d12),
       "gap in the data section before tensor 'b'"},
      {"trailing data", Assemble("{" + Entry("a", "[1]", "[0,4]") + "}", d8),
       "4 trailing bytes"},
      {"duplicate names",
       Assemble("{" + Entry("a", "[1]", "[0,4]") + "," +
                    Entry("a", "[1]", "[4,8]") + "}",
                d8),
       "duplicate key 'a'"},
      {"duplicate field",
       Assemble(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                std::string(4, '\0')),
       "duplicate key 'dtype'"},
      {"duplicate empty metadata key",
       Assemble(R"({"__metadata__":{"":"a","":"b"}})", ""),
       "duplicate key ''"},
      {"empty tensor name", Assemble("{" + Entry("", "[1]", "[0,4]") + "}",
                                     std::string(4, '\0')),
       "empty tensor name"},
      {"metadata not an object", Assemble(R"({"__metadata__":[1]})", ""),
       "__metadata__ must be an object"},
      {"metadata value not a string",
       Assemble(R"({"__metadata__":{"k":1}})", ""),
       "__metadata__ value of 'k' must be a string"},
  };
}

TEST(SafetensorsTest, HostileInputsAreFormatErrors) {
  for (const HostileCase& c : HostileCases()) {
    SCOPED_TRACE(c.label);
    try {
      ParseSafetensors(c.bytes, "hostile.safetensors");
      ADD_FAILURE() << "accepted";
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr("relpos: hostile.safetensors: "));
      EXPECT_THAT(e.what(), HasSubstr(c.fragment));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }
}

// Every strict prefix of a valid file is rejected (never read out of bounds;
// the ASan build checks that), and flipping any single byte either still
// parses or gives a FormatError — never another exception or a crash.
TEST(SafetensorsTest, TruncationsAndByteFlipsNeverCrash) {
  const std::string good = EncodeSafetensors(SampleTensors(), {{"k", "v"}});
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(ParseSafetensors(good.substr(0, n), "t"), FormatError) << n;
  }
  for (size_t i = 0; i < good.size(); ++i) {
    for (const unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      try {
        ParseSafetensors(bad, "t");
      } catch (const FormatError&) {
      }
    }
  }
}

// The fuzz seed corpus is written by fuzz/make_corpus.py straight from the
// format description, independently of EncodeSafetensors: its valid_* files
// must parse (with the values the script wrote) and its bad_* files must not.
TEST(SafetensorsTest, IndependentlyWrittenFilesFromTheSeedCorpus) {
  const std::filesystem::path dir =
      std::filesystem::path(RELPOS_SOURCE_DIR) / "fuzz/corpus/safetensors";
  int valid = 0, bad = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_NO_THROW(ReadSafetensors(entry.path().string()));
      ++valid;
    } else if (name.rfind("bad_", 0) == 0) {
      EXPECT_THROW(ReadSafetensors(entry.path().string()), FormatError);
      ++bad;
    }
  }
  EXPECT_GE(valid, 3);
  EXPECT_GE(bad, 3);
  const SafetensorsFile two =
      ReadSafetensors((dir / "valid_two_tensors").string());
  ASSERT_EQ(two.tensors.size(), 2u);
  EXPECT_EQ(two.tensors[0].name, "w");
  EXPECT_EQ(two.tensors[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(two.tensors[0].data, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(two.tensors[1].name, "b");
  EXPECT_EQ(two.tensors[1].data, (std::vector<float>{0.5f, -0.5f}));
  EXPECT_EQ(two.metadata.at("step"), "10");
}

TEST(SafetensorsTest, FileRoundTripAndErrorsNameThePath) {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   ("relpos_safetensors_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  WriteSafetensors(path, {{"w", {2}, {1.5f, -2.5f}}}, {{"step", "7"}});
  const SafetensorsFile file = ReadSafetensors(path);
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].data, (std::vector<float>{1.5f, -2.5f}));
  EXPECT_EQ(file.metadata.at("step"), "7");

  EXPECT_THROW(ReadSafetensors((dir / "missing.safetensors").string()),
               IoError);
  const std::string bad = (dir / "bad.safetensors").string();
  { std::ofstream(bad) << "not a safetensors file"; }
  try {
    ReadSafetensors(bad);
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr(bad));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace relpos::io

namespace relpos::io {
namespace {

// The reader gives what ParseSafetensors gives: the same tensors from a
// valid file, the same error from every hostile case and every truncation
// (the header checks are one code path), and a FormatError when the file
// shrinks after its header was read.
class SafetensorsReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("relpos_safetensors_reader_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& bytes) {
    const std::string path = (dir_ / "t.safetensors").string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return path;
  }
  // The reader's verdict on `bytes`: "" or the error's text after the path.
  std::string ReaderVerdict(const std::string& bytes,
                            std::vector<NamedTensor>* out = nullptr) {
    const std::string path = Write(bytes);
    try {
      SafetensorsReader r(path);
      for (size_t i = 0; i < r.layout().tensors.size(); ++i) {
        const TensorEntry& e = r.layout().tensors[i];
        NamedTensor t{e.name, e.shape, std::vector<float>(e.numel())};
        r.Read(i, t.data.data());
        if (out) out->push_back(std::move(t));
      }
      return "";
    } catch (const FormatError& e) {
      const std::string what = e.what();
      return what.substr(what.find(path) + path.size());
    }
  }
  static std::string ParseVerdict(const std::string& bytes) {
    try {
      ParseSafetensors(bytes, "X");
      return "";
    } catch (const FormatError& e) {
      const std::string what = e.what();
      return what.substr(what.find("X") + 1);
    }
  }
  std::filesystem::path dir_;
};

TEST_F(SafetensorsReaderTest, ReadsWhatTheParserReads) {
  const std::string good = EncodeSafetensors(SampleTensors(), {{"k", "v"}});
  std::vector<NamedTensor> got;
  ASSERT_EQ(ReaderVerdict(good, &got), "");
  const SafetensorsFile want = ParseSafetensors(good, "X");
  ASSERT_EQ(got.size(), want.tensors.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want.tensors[i].name);
    EXPECT_EQ(got[i].shape, want.tensors[i].shape);
    ASSERT_EQ(got[i].data.size(), want.tensors[i].data.size());
    for (size_t k = 0; k < got[i].data.size(); ++k) {
      EXPECT_TRUE(SameBits(got[i].data[k], want.tensors[i].data[k]));
    }
  }
  // A tensor larger than the reader's 1 MiB pieces.
  std::vector<float> big(300'001);
  for (size_t k = 0; k < big.size(); ++k) big[k] = 0.25f * float(k);
  got.clear();
  ASSERT_EQ(ReaderVerdict(EncodeSafetensors({{"big", {300'001}, big}}, {}),
                          &got),
            "");
  EXPECT_EQ(got.at(0).data, big);
}

TEST_F(SafetensorsReaderTest, RefusesWhatTheParserRefuses) {
  for (const HostileCase& c : HostileCases()) {
    SCOPED_TRACE(c.label);
    EXPECT_EQ(ReaderVerdict(c.bytes), ParseVerdict(c.bytes));
    EXPECT_NE(ParseVerdict(c.bytes), "");
  }
  const std::string good = EncodeSafetensors(SampleTensors(), {{"k", "v"}});
  for (size_t n = 0; n < good.size(); n += 7) {
    SCOPED_TRACE(n);
    EXPECT_EQ(ReaderVerdict(good.substr(0, n)), ParseVerdict(good.substr(0, n)));
  }
}

TEST_F(SafetensorsReaderTest, AFileThatShrinksIsAFormatError) {
  const std::string good =
      EncodeSafetensors({{"w", {1000}, std::vector<float>(1000, 1.0f)}}, {});
  const std::string path = Write(good);
  SafetensorsReader r(path);
  std::filesystem::resize_file(path, good.size() - 100);
  std::vector<float> dst(1000);
  try {
    r.Read(0, dst.data());
    FAIL() << "read past the end";
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("changed meanwhile"));
  }
}

}  // namespace
}  // namespace relpos::io
