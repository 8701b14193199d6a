// GNU gettext catalogs: the .mo reader (binary, untrusted), the .po reader
// (text) and what both share: the header's fields and the conversion of
// every string to UTF-8. The result types are the public API's
// (relpos/data/parallel_text.h).
//
// The .mo format (GNU gettext manual, "The Format of GNU MO Files"): a
// 28-byte header of 32-bit words in the writer's byte order -- magic
// 0x950412de, revision (major << 16 | minor), N strings, offset O of the
// table of original strings, offset T of the table of translations, hash
// table size S and offset H -- then the tables, each N (length, offset)
// pairs of 32-bit words, each string NUL-terminated (the length does not
// count the NUL). An original "ctxt\4msgid\0msgid_plural" carries an optional
// context and plural; a translation "form0\0form1..." the plural forms.
// Revision 1 (minor) adds system-dependent strings in separate tables; they
// are not read (their messages hold <PRIu64>-style placeholders that only a
// C library expands).
#ifndef RELPOS_SRC_DATA_TRANSLATE_CATALOG_H_
#define RELPOS_SRC_DATA_TRANSLATE_CATALOG_H_

#include <string>
#include <string_view>
#include <vector>

#include "relpos/data/parallel_text.h"

namespace relpos::translate {

using relpos::Catalog;
using relpos::CatalogMessage;

// An entry as a file holds it, before conversion to UTF-8.
struct RawEntry {
  std::string context, msgid, msgstr;  // msgstr: the first form only
  bool has_context = false, plural = false, fuzzy = false;
};

// Parses the bytes of a .mo file; `source` names it in errors. FormatError
// for: fewer than 28 bytes; a bad magic number; a major revision other than
// 0 or 1; a string table or hash table that extends past the end of the
// file; a string whose offset + length + 1 passes the end or that lacks its
// terminating NUL; strings that add up to more than 4 times the file's size
// (tables that point many entries at one large string); an unknown charset.
// Memory: the entries (bounded as just said), nothing sized from a count
// before the count is checked against the file's size.
Catalog ParseMo(std::string_view bytes, const std::string& source);

// Parses the text of a .po file. FormatError "source:LINE: ..." for an
// unknown keyword, a bad or unterminated string, an unknown escape, a NUL
// in a string, keywords out of order (msgstr before msgid, msgstr[N] without
// msgid_plural, ...), an entry without msgstr; also for an unknown charset.
// Obsolete entries (#~) are comments; "#, fuzzy" sets CatalogMessage::fuzzy.
Catalog ParsePo(std::string_view text, const std::string& source);

// The value of `field` ("Language", "Content-Type") in a catalog header
// ("Field: value\n" lines), trimmed; "" if absent.
std::string HeaderField(std::string_view header, std::string_view field);

// Builds the catalog from raw entries: reads language and charset from the
// header entry (msgid "" without context, dropped from the entries), and
// converts every string to UTF-8 (iconv from the declared charset; none
// declared, or the template placeholder "CHARSET": UTF-8 assumed). An entry
// that does not convert, or is not well-formed UTF-8, is counted in
// bad_encoding and left out. FormatError naming `source` for a charset iconv
// does not know.
Catalog FinishCatalog(std::vector<RawEntry> entries, const std::string& source);

}  // namespace relpos::translate

#endif  // RELPOS_SRC_DATA_TRANSLATE_CATALOG_H_
