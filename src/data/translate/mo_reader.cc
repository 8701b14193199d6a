// The .mo reader (catalog.h): every number in the file is checked against the
// file's size, in 64-bit arithmetic (32-bit offsets and lengths cannot
// overflow it), before anything is read or allocated from it.
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/io/path_text.h"
#include "data/translate/catalog.h"

namespace relpos::translate {
namespace {

constexpr uint32_t kMagic = 0x950412de;
constexpr uint32_t kMagicSwapped = 0xde120495;
constexpr uint64_t kHeaderBytes = 28;
// Bytes of one (length, offset) string descriptor.
constexpr uint64_t kDescriptorBytes = 8;
// The strings of a real catalog are stored once each, so they add up to less
// than the file; a hostile file can point every descriptor at one large
// string. Their total (with terminators) may be at most this many times the
// file's size.
constexpr uint64_t kMaxStringBytesPerFileByte = 4;

class MoFile {
 public:
  MoFile(std::string_view bytes, const std::string& source)
      : bytes_(bytes), source_(source) {}

  // The 32-bit word at `offset` (offset + 4 <= size, checked by callers).
  uint32_t Word(uint64_t offset) const {
    uint32_t w = 0;
    std::memcpy(&w, bytes_.data() + offset, 4);
    return swapped_ ? __builtin_bswap32(w) : w;
  }

  void ReadHeader() {
    if (bytes_.size() < kHeaderBytes) {
      Fail("not a gettext .mo file: " + std::to_string(bytes_.size()) +
           " bytes, shorter than the 28-byte header");
    }
    uint32_t magic = 0;
    std::memcpy(&magic, bytes_.data(), 4);
    if (magic == kMagicSwapped) {
      swapped_ = true;
    } else if (magic != kMagic) {
      std::ostringstream os;
      os << "not a gettext .mo file: magic number 0x" << std::hex << magic
         << " (expected 0x950412de in either byte order)";
      Fail(os.str());
    }
    const uint32_t revision = Word(4);
    if ((revision >> 16) > 1) {
      Fail("unsupported .mo major revision " + std::to_string(revision >> 16) +
           " (relpos reads revisions 0 and 1)");
    }
    count_ = Word(8);
    originals_ = Word(12);
    translations_ = Word(16);
    // Each table must lie inside the file; so N <= size / 8, and nothing
    // below is sized from N before this check.
    const std::string tables = " of " + std::to_string(count_) + " strings";
    CheckRange(("table of original strings" + tables).c_str(), originals_,
               count_ * kDescriptorBytes);
    CheckRange(("table of translations" + tables).c_str(), translations_,
               count_ * kDescriptorBytes);
    // The hash table is not used (entries are read in order), but a file
    // whose hash table lies outside it is corrupt.
    const uint64_t hash_size = Word(20);
    if (hash_size > 0) CheckRange("hash table", Word(24), hash_size * 4);
  }

  // The string of descriptor `index` of the table at `table`.
  std::string_view String(uint64_t table, uint64_t index, const char* which) {
    const uint64_t descriptor = table + index * kDescriptorBytes;
    const uint64_t length = Word(descriptor);
    const uint64_t offset = Word(descriptor + 4);
    if (offset + length + 1 > bytes_.size()) {
      Fail(std::string(which) + " " + std::to_string(index) + " (offset " +
           std::to_string(offset) + ", length " + std::to_string(length) +
           ") extends past the end of the file (" +
           std::to_string(bytes_.size()) + " bytes)");
    }
    if (bytes_[offset + length] != '\0') {
      Fail(std::string(which) + " " + std::to_string(index) +
           " is not NUL-terminated");
    }
    string_bytes_ += length + 1;
    if (string_bytes_ > kMaxStringBytesPerFileByte * bytes_.size()) {
      Fail("its string tables point at " + std::to_string(string_bytes_) +
           "+ bytes of strings, more than 4 times the file's size "
           "(overlapping strings)");
    }
    return bytes_.substr(offset, length);
  }

  std::vector<RawEntry> Entries() {
    std::vector<RawEntry> entries;
    entries.reserve(count_);  // count_ * 16 <= file size (ReadHeader)
    for (uint64_t i = 0; i < count_; ++i) {
      std::string_view original = String(originals_, i, "original string");
      std::string_view translation = String(translations_, i, "translation");
      RawEntry e;
      // "context\4msgid": the context ends at the first EOT.
      const size_t eot = original.find('\4');
      if (eot != std::string_view::npos) {
        e.has_context = true;
        e.context = original.substr(0, eot);
        original.remove_prefix(eot + 1);
      }
      // "msgid\0msgid_plural" and "form0\0form1...": singular forms only.
      const size_t nul = original.find('\0');
      e.plural = nul != std::string_view::npos;
      e.msgid = original.substr(0, nul);
      e.msgstr = translation.substr(0, translation.find('\0'));
      entries.push_back(std::move(e));
    }
    return entries;
  }

 private:
  void CheckRange(const char* what, uint64_t offset, uint64_t length) const {
    if (offset + length > bytes_.size()) {
      Fail(std::string(what) + " (offset " + std::to_string(offset) + ", " +
           std::to_string(length) + " bytes) extends past the end of the " +
           "file (" + std::to_string(bytes_.size()) + " bytes)");
    }
  }

  [[noreturn]] void Fail(const std::string& what) const {
    RELPOS_THROW(FormatError, "gettext catalog " << io::QuotedPath(source_)
                                                 << ": " << what);
  }

  std::string_view bytes_;
  const std::string& source_;
  bool swapped_ = false;
  uint64_t count_ = 0, originals_ = 0, translations_ = 0;
  uint64_t string_bytes_ = 0;
};

}  // namespace

Catalog ParseMo(std::string_view bytes, const std::string& source) {
  MoFile file(bytes, source);
  file.ReadHeader();
  return FinishCatalog(file.Entries(), source);
}

}  // namespace relpos::translate
