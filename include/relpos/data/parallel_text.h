// Parallel text for translation, from the GNU gettext message catalogs every
// Debian system ships (/usr/share/locale/<lang>/LC_MESSAGES/*.mo: English
// msgid -> translated msgstr), from a directory of .mo / .po files, or from
// a TSV file of source<TAB>target lines (docs/translation.md, "Corpus").
//
//   relpos::ParallelText text =
//       relpos::LoadParallelText({.source_language = "en",
//                                 .target_language = "de"});
//   std::cout << text.description << "\n";   // the counts
//   for (const auto& pair : text.train) ... pair.source, pair.target
//
// Catalogs are untrusted files: ReadCatalog checks every offset, length and
// count against the file's size before it uses it (docs/translation.md,
// "What the .mo reader checks") and throws FormatError naming the file.
#ifndef RELPOS_DATA_PARALLEL_TEXT_H_
#define RELPOS_DATA_PARALLEL_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace relpos {

// One entry of a catalog, converted to UTF-8 (the header entry is not one).
struct CatalogMessage {
  std::string context;  // msgctxt (has_context says whether there was one)
  std::string msgid;    // the untranslated text (singular form)
  std::string msgstr;   // its translation (msgstr[0] of a plural entry)
  bool has_context = false;
  bool plural = false;  // the entry had msgid_plural
  bool fuzzy = false;   // .po: flagged "#, fuzzy" (a .mo never holds these)
};

// A catalog as read from its file.
struct Catalog {
  std::string source;    // the path, for messages
  std::string language;  // the header's "Language:" field ("" if none)
  std::string charset;   // the header's charset ("" if none: UTF-8 assumed)
  bool has_header = false;
  std::vector<CatalogMessage> messages;  // file order
  // Entries left out while reading: text that is not valid in the declared
  // charset (or, for UTF-8, not well-formed UTF-8).
  int64_t bad_encoding = 0;
};

// Reads a .mo (GNU binary catalog; either byte order, revision 0 or 1) or a
// .po file (by its extension: .mo / .gmo binary, anything else text), at
// most kMaxCatalogBytes. IoError if it cannot be read or is too large;
// FormatError naming the file for anything malformed, and for a charset
// iconv does not know.
Catalog ReadCatalog(const std::string& path);
inline constexpr int64_t kMaxCatalogBytes = int64_t{64} << 20;

struct TranslationPair {
  std::string source, target;  // UTF-8, one line each (see below)
  int32_t catalog = 0;         // index into ParallelText::catalogs
};

struct ParallelTextOptions {
  // A locale tree (<lang>/LC_MESSAGES/*.mo, the default), any directory of
  // .mo / .po files (walked recursively; a file's language is its
  // <lang>/LC_MESSAGES/ folder, else its header's "Language:"), a single
  // .mo / .po file, or a TSV file (any other file).
  std::string path = "/usr/share/locale";
  // "en" is the msgid side; any other code names catalogs of that language
  // (the <lang> directory, or a file's "Language:" header, exactly). Two
  // non-English languages are joined on (msgctxt, msgid) within a domain.
  // A TSV file is already directed: the languages are only labels.
  std::string source_language = "en";
  std::string target_language = "de";
};

// What LoadParallelText read and why it left things out.
struct ParallelTextStats {
  int64_t files_found = 0;       // catalog files of the languages asked for
  int64_t catalogs_read = 0;     // of which parsed
  int64_t catalogs_skipped = 0;  // unreadable or malformed: see `skipped`
  int64_t same_file = 0;         // links to a file already read
  // Catalogs in a directory whose language neither their path
  // (<lang>/LC_MESSAGES/) nor their header's "Language:" says: not used.
  int64_t no_language = 0;
  std::vector<std::string> skipped;  // "path: reason", one per skipped file
  int64_t messages = 0;          // entries read on the source side (with
                                 // the headers; TSV: well-formed lines)
  // Left out, by reason (docs/translation.md, "What is dropped"):
  int64_t header = 0;        // the catalog's header entry (msgid "")
  int64_t fuzzy = 0;         // .po entries flagged fuzzy
  int64_t context_only = 0;  // a msgctxt with an empty msgid
  int64_t untranslated = 0;  // empty msgstr (or empty source)
  int64_t unmatched = 0;     // no entry for the msgid in the other language
  int64_t bad_text = 0;      // bad encoding, control characters
  int64_t too_long = 0;      // a side longer than kMaxPairTextBytes
  int64_t identical = 0;     // target == source
  int64_t duplicate = 0;     // an exact (source, target) pair seen before
  int64_t plural = 0;        // kept pairs that came from plural entries
  int64_t pairs = 0;         // kept = train_pairs + test_pairs
  int64_t train_pairs = 0, test_pairs = 0;
  int64_t train_catalogs = 0, test_catalogs = 0;
  int64_t tsv_lines = 0;     // TSV: non-blank lines read
};

struct ParallelText {
  std::vector<TranslationPair> train, test;
  // Catalog domains (a TSV file is one), sorted by name; test_catalog[i]
  // says which split domain i went to.
  std::vector<std::string> catalogs;
  std::vector<bool> test_catalog;
  // How the split was made: "by catalog" or, with a single catalog, "by
  // message".
  std::string split;
  ParallelTextStats stats;
  // The counts in a few lines, for printing.
  std::string description;
};

// Longest kept side of a pair, in bytes.
inline constexpr int64_t kMaxPairTextBytes = 4096;

// Reads the corpus. Text is normalised (every run of whitespace becomes one
// space, the ends trimmed) and pairs are dropped as ParallelTextStats says.
// The held-out split is by catalog domain: a domain is held out when the
// FNV-1a-64 hash of its name is 0 modulo 10 (if none is, the one with the
// smallest hash; if all are, the one with the largest hash trains), so test
// messages come from programs never seen in training. A single domain is
// split by message (hash of the source text). Exact duplicates are dropped
// across the whole corpus, training pairs taking precedence, so no test pair
// is also a training pair. The order is deterministic: domains by name,
// messages in file order.
// Errors: IoError for a missing or unreadable path; FormatError for a single
// bad catalog or TSV file (naming it, and the line), or when no pair is left
// for the languages; InvalidArgument for equal or empty languages. A bad
// catalog inside a directory is skipped and counted, never fatal.
ParallelText LoadParallelText(const ParallelTextOptions& options);

}  // namespace relpos

#endif  // RELPOS_DATA_PARALLEL_TEXT_H_
