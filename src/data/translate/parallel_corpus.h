// The parallel corpus behind LoadParallelText (relpos/data/parallel_text.h):
// finding catalogs, pairing their messages, the filters, the held-out split
// and the deduplication. The pieces that tests and other readers reuse are
// declared here.
#ifndef RELPOS_SRC_DATA_TRANSLATE_PARALLEL_CORPUS_H_
#define RELPOS_SRC_DATA_TRANSLATE_PARALLEL_CORPUS_H_

#include <string>
#include <string_view>
#include <vector>

#include "relpos/data/parallel_text.h"

namespace relpos::translate {

using relpos::ParallelText;
using relpos::ParallelTextOptions;
using relpos::ParallelTextStats;
using relpos::TranslationPair;

// Normalises one side of a pair in place: every run of ASCII whitespace
// (space, \t, \n, \v, \f, \r) becomes one space and the ends are trimmed.
// Returns false (leaving `text` unspecified) if it holds other control
// characters (U+0000..U+001F, U+007F, U+0080..U+009F). `text` must be
// well-formed UTF-8.
bool NormaliseText(std::string& text);

// Where a catalog file sits: "<lang>/LC_<CATEGORY>/<domain>.mo" gives its
// language and category; any other path gives neither (the header's
// "Language:" then decides).
struct CatalogPlace {
  std::string language;  // "" if the path does not say
  std::string category;  // "LC_MESSAGES", ...; "" if the path does not say
  std::string domain;    // the file name without its extension
};
CatalogPlace PlaceOf(std::string_view relative_path);

// The split a name (catalog domain, or the source text of a single-domain
// corpus) goes to: held out when FNV-1a-64(name) % 10 == 0, the hash of the
// LM corpus's split by file (TextCorpus::PathHash).
bool HeldOut(std::string_view name);

}  // namespace relpos::translate

#endif  // RELPOS_SRC_DATA_TRANSLATE_PARALLEL_CORPUS_H_
