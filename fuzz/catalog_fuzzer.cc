// libFuzzer target for the GNU gettext catalog readers (src/data/translate/
// catalog.h): the .mo reader, which reads untrusted binary files, and the .po
// reader. Each input is parsed as both. Contract checked here:
//   - ParseMo and ParsePo either return or throw relpos::Error (FormatError);
//     any other exception, crash, sanitizer report or out-of-memory is a bug;
//   - what they accept is UTF-8 with no NUL inside a msgid or msgstr, and its
//     strings add up to a bounded multiple of the input's size (a hostile
//     table cannot make the reader allocate without bound).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "relpos/error.h"
#include "data/translate/catalog.h"
#include "data/translate/utf8.h"

namespace {

void Check(const relpos::Catalog& catalog, size_t input_size) {
  size_t total = 0;
  for (const relpos::CatalogMessage& m : catalog.messages) {
    for (const std::string* s : {&m.context, &m.msgid, &m.msgstr}) {
      if (!relpos::translate::IsValidUtf8(*s)) __builtin_trap();
      total += s->size();
    }
    if (m.msgid.find('\0') != std::string::npos ||
        m.msgstr.find('\0') != std::string::npos) {
      __builtin_trap();
    }
  }
  // The .mo reader refuses strings beyond 4x the file; converting a charset
  // to UTF-8 at most quadruples them.
  if (total > 16 * input_size + 64) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz input";
  try {
    Check(relpos::translate::ParseMo(bytes, name), size);
  } catch (const relpos::Error&) {
    // rejected cleanly
  }
  try {
    Check(relpos::translate::ParsePo(bytes, name), size);
  } catch (const relpos::Error&) {
  }
  return 0;
}
