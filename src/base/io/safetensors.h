// The safetensors file format (https://github.com/huggingface/safetensors),
// F32 tensors only:
//
//   [8 bytes]  N, unsigned little-endian: the header's length in bytes
//   [N bytes]  JSON object, UTF-8:
//                {"<name>": {"dtype": "F32", "shape": [d0, d1, ...],
//                            "data_offsets": [begin, end]},
//                 ...,
//                 "__metadata__": {"<key>": "<string value>", ...}}
//              (the writer pads it with trailing spaces to a multiple of 8)
//   [rest]     the data section: each tensor's row-major little-endian bytes
//              at [begin, end) relative to the start of the data section.
//
// ParseSafetensors treats its input as untrusted and validates everything
// before allocating or copying; see docs/safetensors.md for the exact rules
// (e.g. the data section must be covered exactly, with no gaps, overlaps or
// trailing bytes).
#ifndef RELPOS_SRC_BASE_IO_SAFETENSORS_H_
#define RELPOS_SRC_BASE_IO_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/io/file_io.h"

namespace relpos::io {

// A named F32 tensor; data.size() == product of shape (1 for shape []).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in data-offset order (= writing order)
  std::map<std::string, std::string> metadata;
};

// Largest header accepted by the parser (the reference implementation uses
// the same 100 MB cap).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Largest file ReadSafetensors reads.
inline constexpr int64_t kMaxSafetensorsFileBytes = int64_t{16} << 30;

// Serialises `tensors` (stored in the given order) and `metadata`.
// InvalidArgument on an empty or duplicate name, the reserved name
// "__metadata__", a negative dimension, or data.size() != product of shape.
std::string EncodeSafetensors(const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata);

// EncodeSafetensors + AtomicWriteFile.
void WriteSafetensors(const std::string& path,
                      const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata);

// Defensive parse of untrusted bytes. FormatError "relpos: <source>: <problem>"
// on anything malformed.
SafetensorsFile ParseSafetensors(std::string_view bytes,
                                 const std::string& source);

// ReadFileBounded(path, kMaxSafetensorsFileBytes) + ParseSafetensors.
SafetensorsFile ReadSafetensors(const std::string& path);

// A tensor of a checked header: where its bytes are, not read yet.
struct TensorEntry {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // in the data section
  size_t numel() const { return static_cast<size_t>((end - begin) / 4); }
};
struct SafetensorsLayout {
  std::vector<TensorEntry> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data section starts in the file
};

// A safetensors file read tensor by tensor into the caller's buffers, so
// that loading a model holds one copy of its weights: the constructor reads
// only the length prefix and the header and checks them by the rules of
// ParseSafetensors against the file's size (FormatError, IoError as
// ReadSafetensors); Read(i, dst) then reads tensor i's numel() floats.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  const SafetensorsLayout& layout() const { return layout_; }
  // FormatError if the file ended early (it changed since it was opened).
  void Read(size_t i, float* dst);

 private:
  std::string path_;
  FileDescriptor file_;
  SafetensorsLayout layout_;
};

}  // namespace relpos::io

#endif  // RELPOS_SRC_BASE_IO_SAFETENSORS_H_
