// safetensors encode/decode for F32 tensors. The parser is the defensive one:
// every field of the untrusted header is validated before anything is sized
// from it. Rules (docs/safetensors.md):
//   1. at least 8 bytes; header length N <= kMaxSafetensorsHeaderBytes and
//      8 + N <= file size;
//   2. the header is a JSON object (valid UTF-8; trailing whitespace allowed,
//      as the writer pads with spaces) with no duplicate keys at any level;
//   3. "__metadata__", if present, is an object whose values are strings;
//   4. every other key is a tensor: an object with exactly the keys "dtype",
//      "shape" and "data_offsets"; dtype "F32" (others are rejected by name);
//      shape an array of non-negative integers; data_offsets two non-negative
//      integers begin <= end;
//   5. end - begin == 4 * product(shape), computed without overflow;
//   6. sorted by begin, the tensors tile the data section exactly: the first
//      starts at 0, each starts where the previous ended, and the last ends at
//      the end of the file (no gaps, no overlaps, no trailing bytes; this is
//      also what the reference Rust implementation enforces).
#include "base/io/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/io/file_io.h"
#include "base/io/json_reader.h"
#include "base/io/path_text.h"

namespace relpos::io {
namespace {

using nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";
constexpr uint64_t kF32Bytes = 4;

#define RELPOS_FORMAT_CHECK(condition, source, message_stream)          \
  do {                                                                  \
    if (!(condition)) {                                                 \
      RELPOS_THROW(FormatError,                                         \
                   PathText(source) << ": " << message_stream);         \
    }                                                                   \
  } while (0)

uint64_t LoadU64Le(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void StoreU64Le(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// float <-> little-endian bytes, independent of the host's byte order.
// n == 0 returns at once: an empty vector's data() may be null, and memcpy
// with a null pointer is undefined even for zero bytes.
void StoreF32Le(const float* src, size_t n, char* dst) {
  if (n == 0) return;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &src[i], 4);
      for (int b = 0; b < 4; ++b) dst[4 * i + b] = static_cast<char>(u >> (8 * b));
    }
  }
}

void LoadF32Le(const char* src, size_t n, float* dst) {
  if (n == 0) return;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t u = 0;
      for (int b = 3; b >= 0; --b) {
        u = (u << 8) | static_cast<unsigned char>(src[4 * i + b]);
      }
      std::memcpy(&dst[i], &u, 4);
    }
  }
}

// Sets *product to the product of `dims` and returns true, or returns false
// when the product exceeds `limit`
// (the caller's bound, far below UINT64_MAX, so no step can overflow).
bool ShapeProductAtMost(const std::vector<uint64_t>& dims, uint64_t limit,
                        uint64_t* product) {
  // A zero anywhere makes the product 0 even if the other dims are huge.
  if (std::find(dims.begin(), dims.end(), uint64_t{0}) != dims.end()) {
    *product = 0;
    return true;
  }
  uint64_t p = 1;
  for (const uint64_t d : dims) {
    if (d > limit / p) return false;  // p * d > limit, tested without overflow
    p *= d;
  }
  *product = p;
  return true;
}

// Parses the header with the one JSON reader (io/json_reader.h), which also
// rejects duplicate keys in any object (nlohmann keeps the last one
// silently, which would let two tensors claim the same name).
json ParseHeaderJson(std::string_view text, const std::string& source) {
  const json header = ParseJson(
      text, source,
      {.max_bytes = static_cast<int64_t>(kMaxSafetensorsHeaderBytes),
       .what = "header"});
  RELPOS_FORMAT_CHECK(header.is_object(), source,
                      "header must be a JSON object (got "
                          << header.type_name() << ")");
  return header;
}

// A tensor's header entry, validated, before its data is copied.
struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

Entry ParseEntry(const std::string& name, const json& value,
                 uint64_t data_size, const std::string& source) {
  RELPOS_FORMAT_CHECK(!name.empty(), source, "empty tensor name");
  RELPOS_FORMAT_CHECK(value.is_object(), source,
                      "tensor '" << name << "': entry must be an object");
  for (const auto& [key, unused] : value.items()) {
    RELPOS_FORMAT_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
                        source, "tensor '" << name << "': unknown field '" << key
                                           << "'");
  }
  RELPOS_FORMAT_CHECK(value.contains("dtype") && value.contains("shape") &&
                          value.contains("data_offsets"),
                      source,
                      "tensor '" << name
                                 << "': needs dtype, shape and data_offsets");

  const json& dtype = value["dtype"];
  RELPOS_FORMAT_CHECK(dtype.is_string(), source,
                      "tensor '" << name << "': dtype must be a string");
  RELPOS_FORMAT_CHECK(dtype.get<std::string>() == "F32", source,
                      "tensor '" << name << "': unsupported dtype '"
                                 << dtype.get<std::string>()
                                 << "' (relpos reads F32 only)");

  const json& shape = value["shape"];
  RELPOS_FORMAT_CHECK(shape.is_array(), source,
                      "tensor '" << name << "': shape must be an array");
  std::vector<uint64_t> dims;
  dims.reserve(shape.size());
  for (const json& d : shape) {
    // is_number_unsigned: a non-negative integer that fits uint64; negative
    // numbers parse as number_integer and fractions/huge values as float.
    RELPOS_FORMAT_CHECK(d.is_number_unsigned(), source,
                        "tensor '" << name
                                   << "': shape entries must be non-negative "
                                      "integers (got "
                                   << d.dump() << ")");
    const uint64_t v = d.get<uint64_t>();
    RELPOS_FORMAT_CHECK(
        v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), source,
        "tensor '" << name << "': shape entry " << v << " is too large");
    dims.push_back(v);
  }

  const json& offsets = value["data_offsets"];
  RELPOS_FORMAT_CHECK(offsets.is_array() && offsets.size() == 2 &&
                          offsets[0].is_number_unsigned() &&
                          offsets[1].is_number_unsigned(),
                      source,
                      "tensor '" << name
                                 << "': data_offsets must be two non-negative "
                                    "integers [begin, end]");
  Entry entry;
  entry.name = name;
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  RELPOS_FORMAT_CHECK(entry.begin <= entry.end, source,
                      "tensor '" << name << "': data_offsets begin "
                                 << entry.begin << " > end " << entry.end);
  RELPOS_FORMAT_CHECK(entry.end <= data_size, source,
                      "tensor '" << name << "': data_offsets [" << entry.begin
                                 << ", " << entry.end
                                 << "] lie outside the data section of "
                                 << data_size << " bytes");
  // The element count can be at most data_size / 4, so bounding the product
  // by that keeps every intermediate value small.
  uint64_t elements = 0;
  RELPOS_FORMAT_CHECK(
      ShapeProductAtMost(dims, data_size / kF32Bytes, &elements) &&
          elements * kF32Bytes == entry.end - entry.begin,
      source,
      "tensor '" << name << "': shape " << shape.dump() << " does not match its "
                 << entry.end - entry.begin << "-byte data range");
  entry.shape.assign(dims.begin(), dims.end());
  return entry;
}

}  // namespace

std::string EncodeSafetensors(
    const std::vector<NamedTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    RELPOS_CHECK_ARG(!t.name.empty(), "EncodeSafetensors: empty tensor name");
    RELPOS_CHECK_ARG(t.name != kMetadataKey,
                     "EncodeSafetensors: tensor name '" << kMetadataKey
                                                        << "' is reserved");
    RELPOS_CHECK_ARG(!header.contains(t.name),
                     "EncodeSafetensors: duplicate tensor name '" << t.name
                                                                  << "'");
    std::vector<uint64_t> dims;
    for (const int64_t d : t.shape) {
      RELPOS_CHECK_ARG(d >= 0, "EncodeSafetensors: tensor '"
                                   << t.name << "' has a negative dimension "
                                   << d);
      dims.push_back(static_cast<uint64_t>(d));
    }
    // The same bounded product as the parser (a wrapped product could match
    // data.size() by accident; a zero dim makes any other dims legal).
    uint64_t elements = 0;
    RELPOS_CHECK_ARG(ShapeProductAtMost(dims, t.data.size(), &elements),
                     "EncodeSafetensors: tensor '"
                         << t.name << "' has " << t.data.size()
                         << " values, fewer than its shape holds");
    RELPOS_CHECK_ARG(elements == t.data.size(),
                     "EncodeSafetensors: tensor '"
                         << t.name << "' has " << t.data.size()
                         << " values but its shape holds " << elements);
    const uint64_t bytes = elements * kF32Bytes;
    header[t.name] = {{"dtype", "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;

  std::string header_text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (what the
  // reference writer does; readers must accept trailing whitespace).
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string out(8 + header_text.size() + offset, '\0');
  StoreU64Le(header_text.size(), out.data());
  std::memcpy(out.data() + 8, header_text.data(), header_text.size());
  char* data = out.data() + 8 + header_text.size();
  for (const NamedTensor& t : tensors) {
    StoreF32Le(t.data.data(), t.data.size(), data);
    data += t.data.size() * kF32Bytes;
  }
  return out;
}

void WriteSafetensors(const std::string& path,
                      const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  AtomicWriteFile(path, EncodeSafetensors(tensors, metadata));
}

namespace {

// Rule 1 for a file of `total` bytes whose first 8 hold `header_size`.
void CheckHeaderLength(uint64_t total, uint64_t header_size,
                       const std::string& source) {
  RELPOS_FORMAT_CHECK(header_size <= kMaxSafetensorsHeaderBytes, source,
                      "header length " << header_size << " exceeds the limit of "
                                       << kMaxSafetensorsHeaderBytes << " bytes");
  RELPOS_FORMAT_CHECK(header_size <= total - 8, source,
                      "header length " << header_size << " exceeds the "
                                       << total - 8
                                       << " bytes after the length prefix");
}

void CheckLengthPrefix(uint64_t total, const std::string& source) {
  RELPOS_FORMAT_CHECK(total >= 8, source,
                      "file is " << total
                                 << " bytes, too short for the 8-byte header "
                                    "length");
}

// Rules 2-6: the header, against a data section of `data_size` bytes.
SafetensorsLayout ParseLayout(std::string_view header_text, uint64_t data_size,
                              const std::string& source) {
  const json header = ParseHeaderJson(header_text, source);
  SafetensorsLayout layout;
  layout.data_offset = 8 + header_text.size();
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      RELPOS_FORMAT_CHECK(value.is_object(), source,
                          "__metadata__ must be an object");
      for (const auto& [meta_key, meta_value] : value.items()) {
        RELPOS_FORMAT_CHECK(meta_value.is_string(), source,
                            "__metadata__ value of '"
                                << meta_key << "' must be a string (got "
                                << meta_value.type_name() << ")");
        layout.metadata.emplace(meta_key, meta_value.get<std::string>());
      }
      continue;
    }
    entries.push_back(ParseEntry(key, value, data_size, source));
  }

  // Rule 6: sorted by (begin, end), the ranges must tile the data section.
  // Sorting by end too puts an empty tensor before a non-empty one starting
  // at the same offset, so both are accepted.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    RELPOS_FORMAT_CHECK(e.begin >= expected, source,
                        "tensor '" << e.name << "' at [" << e.begin << ", "
                                   << e.end << ") overlaps the previous tensor");
    RELPOS_FORMAT_CHECK(e.begin == expected, source,
                        "gap in the data section before tensor '"
                            << e.name << "' (bytes [" << expected << ", "
                            << e.begin << ") belong to no tensor)");
    expected = e.end;
  }
  RELPOS_FORMAT_CHECK(expected == data_size, source,
                      "the data section has " << data_size - expected
                                              << " trailing bytes that belong "
                                                 "to no tensor");
  layout.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    layout.tensors.push_back({.name = std::move(e.name),
                              .shape = std::move(e.shape),
                              .begin = e.begin,
                              .end = e.end});
  }
  return layout;
}

// Reads exactly `n` bytes at `offset` of `fd` into `dst`; FormatError when
// the file ends first (it shrank since its size was taken).
void ReadAt(int fd, uint64_t offset, size_t n, char* dst,
            const std::string& source) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      RELPOS_THROW(IoError, "cannot read " << QuotedPath(source) << ": "
                                           << std::strerror(errno));
    }
    RELPOS_FORMAT_CHECK(got > 0, source,
                        "the file ended at byte " << offset
                                                  << " while it was read (it "
                                                     "changed meanwhile)");
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

}  // namespace

SafetensorsFile ParseSafetensors(std::string_view bytes,
                                 const std::string& source) {
  // Rule 1: the length prefix, checked against the cap and the input size
  // before anything is read from the header.
  CheckLengthPrefix(bytes.size(), source);
  const uint64_t header_size = LoadU64Le(bytes.data());
  CheckHeaderLength(bytes.size(), header_size, source);
  const std::string_view data = bytes.substr(8 + header_size);
  SafetensorsLayout layout =
      ParseLayout(bytes.substr(8, header_size), data.size(), source);

  // Everything is consistent: the total allocation is bounded by the input.
  SafetensorsFile file;
  file.metadata = std::move(layout.metadata);
  file.tensors.reserve(layout.tensors.size());
  for (TensorEntry& e : layout.tensors) {
    NamedTensor t;
    t.name = std::move(e.name);
    t.shape = std::move(e.shape);
    t.data.resize(e.numel());
    LoadF32Le(data.data() + e.begin, t.data.size(), t.data.data());
    file.tensors.push_back(std::move(t));
  }
  return file;
}

SafetensorsFile ReadSafetensors(const std::string& path) {
  return ParseSafetensors(ReadFileBounded(path, kMaxSafetensorsFileBytes), path);
}

SafetensorsReader::SafetensorsReader(const std::string& path)
    : path_(path), file_(OpenRegularFile(path)) {
  struct stat st {};
  if (::fstat(file_.get(), &st) != 0) {
    RELPOS_THROW(IoError, "cannot read " << QuotedPath(path) << ": "
                                         << std::strerror(errno));
  }
  const auto total = static_cast<uint64_t>(st.st_size);
  if (st.st_size > kMaxSafetensorsFileBytes) {
    RELPOS_THROW(IoError, QuotedPath(path)
                              << " is too large: " << st.st_size
                              << " bytes (limit " << kMaxSafetensorsFileBytes
                              << ")");
  }
  CheckLengthPrefix(total, path);
  char prefix[8];
  ReadAt(file_.get(), 0, 8, prefix, path);
  const uint64_t header_size = LoadU64Le(prefix);
  CheckHeaderLength(total, header_size, path);
  std::string header(header_size, '\0');
  ReadAt(file_.get(), 8, header.size(), header.data(), path);
  layout_ = ParseLayout(header, total - 8 - header_size, path);
}

void SafetensorsReader::Read(size_t i, float* dst) {
  const TensorEntry& e = layout_.tensors.at(i);
  // In pieces of at most 1 MiB: no second copy of a large tensor.
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  std::string piece;
  for (uint64_t at = e.begin; at < e.end;) {
    const uint64_t n = std::min(kPiece, e.end - at);
    piece.resize(n);
    ReadAt(file_.get(), layout_.data_offset + at, n, piece.data(), path_);
    LoadF32Le(piece.data(), n / kF32Bytes, dst + (at - e.begin) / kF32Bytes);
    at += n;
  }
}

}  // namespace relpos::io
