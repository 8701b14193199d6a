// libFuzzer target for the safetensors parser (src/base/io/safetensors.h), which
// reads untrusted files. Contract checked here:
//   - ParseSafetensors either returns or throws relpos::Error (FormatError);
//     any other exception, crash or sanitizer report is a bug;
//   - whatever it accepts re-encodes with EncodeSafetensors and parses back to
//     the same tensors and metadata (a bit-exact round trip).
#include <cstddef>
#include <cstdint>
#include <bit>
#include <string_view>

#include "base/io/safetensors.h"
#include "relpos/error.h"

namespace {

bool SameFile(const relpos::io::SafetensorsFile& a,
              const relpos::io::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& x = a.tensors[i];
    const auto& y = b.tensors[i];
    if (x.name != y.name || x.shape != y.shape || x.data.size() != y.data.size()) {
      return false;
    }
    // Bitwise (NaN payloads and -0 included). Element by element, because an
    // empty vector's data() may be null, which memcmp must not get.
    for (size_t j = 0; j < x.data.size(); ++j) {
      if (std::bit_cast<uint32_t>(x.data[j]) != std::bit_cast<uint32_t>(y.data[j])) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  relpos::io::SafetensorsFile file;
  try {
    file = relpos::io::ParseSafetensors(bytes, "fuzz input");
  } catch (const relpos::Error&) {
    return 0;  // rejected cleanly
  }
  // Accepted: the round trip must hold. Errors here are bugs, so they are not
  // caught (libFuzzer reports the uncaught exception as a crash).
  const std::string again =
      relpos::io::EncodeSafetensors(file.tensors, file.metadata);
  const relpos::io::SafetensorsFile reparsed =
      relpos::io::ParseSafetensors(again, "re-encoded fuzz input");
  if (!SameFile(file, reparsed)) __builtin_trap();
  return 0;
}
