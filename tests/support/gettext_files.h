// Test-only writer of GNU gettext .mo files (the layout of the GNU gettext
// manual, "The Format of GNU MO Files"), so the catalog tests build their own
// catalogs -- well-formed and hostile -- instead of depending on what a
// machine has installed under /usr/share/locale.
#ifndef RELPOS_TESTS_SUPPORT_GETTEXT_FILES_H_
#define RELPOS_TESTS_SUPPORT_GETTEXT_FILES_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace relpos::testing {

// One entry as a .mo stores it: "context\4msgid\0plural" -> "form0\0form1".
struct MoEntry {
  std::string original, translation;
};

// A plain entry, one with a context, one with plural forms.
MoEntry Msg(const std::string& msgid, const std::string& msgstr);
MoEntry CtxMsg(const std::string& context, const std::string& msgid,
               const std::string& msgstr);
MoEntry PluralMsg(const std::string& msgid, const std::string& plural,
                  const std::vector<std::string>& forms);
// The header entry (msgid ""): Language and Content-Type charset fields,
// each left out when empty.
MoEntry Header(const std::string& language, const std::string& charset);

struct MoLayout {
  bool big_endian = false;
  uint32_t revision = 0;
  bool sort = true;  // msgfmt sorts the originals (for binary search)
};

// The bytes of a .mo file: the 28-byte header, the table of originals at 28,
// the table of translations after it, then the strings (NUL-terminated).
std::string MoBytes(std::vector<MoEntry> entries, const MoLayout& layout = {});

// Byte offsets of the fields MoBytes writes, for tests that corrupt them.
inline constexpr size_t kMoCountOffset = 8, kMoOriginalsOffset = 12,
                        kMoTranslationsOffset = 16, kMoHashSizeOffset = 20;
// Overwrites the 32-bit little-endian word at `offset`.
void PutWord(std::string& bytes, size_t offset, uint32_t value);

void WriteBinaryFile(const std::filesystem::path& path,
                     const std::string& bytes);
// A fresh empty directory under the test temp directory.
std::filesystem::path FreshTempDir(const std::string& name);

// source<TAB>target lines of a toy language pair: "VERB the ADJ NOUN"
// -> "die ADJ' NOUN' VERB'", one to three clauses joined by "and" / "und"
// (sources of 4, 9 or 14 words); `pairs` lines from `seed`.
std::string ToyCorpus(uint32_t seed, int pairs);

}  // namespace relpos::testing

#endif  // RELPOS_TESTS_SUPPORT_GETTEXT_FILES_H_
