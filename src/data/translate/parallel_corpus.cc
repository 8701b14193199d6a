// LoadParallelText (relpos/data/parallel_text.h): catalogs or a TSV file ->
// filtered, deduplicated translation pairs, split by catalog.
#include "data/translate/parallel_corpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/io/file_io.h"
#include "base/io/path_text.h"
#include "data/tasks/text_corpus.h"
#include "data/translate/catalog.h"
#include "data/translate/utf8.h"

namespace relpos::translate {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kEnglish = "en";
// Most files a directory walk lists (a guard against walking "/").
constexpr int64_t kMaxWalkFiles = int64_t{1} << 20;
// Largest TSV file read, and most text all the catalogs of a corpus may
// hold (a guard against pointing the corpus at a huge tree: the catalogs of
// one language under /usr/share/locale hold about 10 MB).
constexpr int64_t kMaxTsvBytes = int64_t{1} << 30;
constexpr int64_t kMaxCatalogTextBytes = int64_t{1} << 30;

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
         c == '\r';
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.substr(s.size() - suffix.size()) == suffix;
}

bool IsCatalogFile(std::string_view name) {
  return EndsWith(name, ".mo") || EndsWith(name, ".gmo") ||
         EndsWith(name, ".po");
}

// One side of a candidate pair, before the filters.
struct Candidate {
  std::string source, target;
  bool plural = false;
};

// Candidate pairs by catalog domain (sorted by name), and the counts of
// what the filters left out.
class Candidates {
 public:
  explicit Candidates(ParallelTextStats& stats) : stats_(stats) {}

  // Applies the filters of parallel_text.h in order: control characters,
  // empty sides, length, identity. Duplicates are dropped later, once the
  // split is known.
  void Add(const std::string& domain, Candidate c) {
    if (!NormaliseText(c.source) || !NormaliseText(c.target)) {
      ++stats_.bad_text;
    } else if (c.source.empty() || c.target.empty()) {
      ++stats_.untranslated;
    } else if (static_cast<int64_t>(c.source.size()) > kMaxPairTextBytes ||
               static_cast<int64_t>(c.target.size()) > kMaxPairTextBytes) {
      ++stats_.too_long;
    } else if (c.source == c.target) {
      ++stats_.identical;
    } else {
      by_domain_[domain].push_back(std::move(c));
    }
  }

  const std::map<std::string, std::vector<Candidate>>& by_domain() const {
    return by_domain_;
  }

 private:
  ParallelTextStats& stats_;
  std::map<std::string, std::vector<Candidate>> by_domain_;
};

// A catalog read for the corpus, with where it belongs.
struct LoadedCatalog {
  std::string domain;
  std::string language;
  Catalog catalog;
};

// The catalog files of a corpus and the languages it needs.
class CatalogSet {
 public:
  CatalogSet(const ParallelTextOptions& options, ParallelTextStats& stats)
      : options_(options), stats_(stats) {
    for (const std::string* lang :
         {&options.source_language, &options.target_language}) {
      if (*lang != kEnglish) wanted_.insert(*lang);
    }
  }

  // Every catalog of a wanted language under the directory `root`, in path
  // order. A file reached by several paths (links) is read once, through a
  // path that is not a link where there is one (so the domain is the real
  // file's name).
  std::vector<LoadedCatalog> FromDirectory(const std::string& root) {
    struct Found {
      std::string relative;
      CatalogPlace place;
    };
    std::vector<Found> found;
    std::map<std::pair<dev_t, ino_t>, size_t> by_inode;  // -> chosen index
    std::vector<bool> chosen;
    for (std::string& relative : ListCatalogFiles(root)) {
      // The whole path: a corpus that is itself de/LC_MESSAGES/ says "de".
      CatalogPlace place = PlaceOf((fs::path(root) / relative).generic_string());
      if (!place.category.empty() && place.category != "LC_MESSAGES") continue;
      if (!place.language.empty() && !wanted_.count(place.language)) continue;
      const std::string path = (fs::path(root) / relative).string();
      const size_t index = found.size();
      found.push_back({std::move(relative), std::move(place)});
      chosen.push_back(true);
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0) continue;  // fails when read
      const auto [it, first] = by_inode.emplace(
          std::pair<dev_t, ino_t>{st.st_dev, st.st_ino}, index);
      if (first) continue;
      ++stats_.same_file;
      std::error_code ec;
      if (fs::is_symlink(fs::path(root) / found[it->second].relative, ec) &&
          !fs::is_symlink(path, ec)) {
        chosen[it->second] = false;  // the real file replaces the link
        it->second = index;
      } else {
        chosen[index] = false;
      }
    }
    std::vector<LoadedCatalog> out;
    for (size_t i = 0; i < found.size(); ++i) {
      if (chosen[i]) Load(root, found[i].relative, found[i].place, out);
    }
    return out;
  }

  // A single catalog file: errors are the caller's; its language must be
  // the non-English one asked for (a catalog that does not say is taken to
  // be).
  std::vector<LoadedCatalog> FromFile(const std::string& path) {
    RELPOS_CHECK_ARG(wanted_.size() == 1,
                     "a single catalog "
                         << io::QuotedPath(path) << " cannot pair "
                         << options_.source_language << " with "
                         << options_.target_language
                         << "; give a directory with catalogs of both");
    const std::string& want = *wanted_.begin();
    ++stats_.files_found;
    Catalog catalog = ReadCatalog(path);
    const CatalogPlace place = PlaceOf(path);
    std::string language =
        !place.language.empty() ? place.language : catalog.language;
    if (language.empty()) language = want;
    if (language != want) {
      RELPOS_THROW(FormatError, "gettext catalog "
                                    << io::QuotedPath(path) << " is a '"
                                                    << language
                                                    << "' catalog, not '"
                                                    << want << "'");
    }
    ++stats_.catalogs_read;
    return {{place.domain, language, std::move(catalog)}};
  }

 private:
  // Reads one catalog of a directory into `out`, or counts it as skipped.
  void Load(const std::string& root, const std::string& relative,
            const CatalogPlace& place, std::vector<LoadedCatalog>& out) {
    const std::string path = (fs::path(root) / relative).string();
    Catalog catalog;
    try {
      catalog = ReadCatalog(path);
    } catch (const Error& e) {
      ++stats_.files_found;
      ++stats_.catalogs_skipped;
      stats_.skipped.push_back(MessageBody(e));
      return;
    }
    const std::string language =
        place.language.empty() ? catalog.language : place.language;
    if (language.empty()) {
      ++stats_.no_language;  // neither its path nor its header says
      return;
    }
    if (!wanted_.count(language)) return;  // another language's catalog
    ++stats_.files_found;
    ++stats_.catalogs_read;
    for (const CatalogMessage& m : catalog.messages) {
      text_bytes_ += static_cast<int64_t>(m.context.size() + m.msgid.size() +
                                          m.msgstr.size());
    }
    if (text_bytes_ > kMaxCatalogTextBytes) {
      RELPOS_THROW(FormatError, "translation corpus: the catalogs under "
                                    << io::QuotedPath(root)
                                    << " hold more than "
                                    << kMaxCatalogTextBytes
                                    << " bytes of text; point the corpus at "
                                       "a smaller tree");
    }
    out.push_back({DomainOf(root, relative, place, language), language,
                   std::move(catalog)});
  }

  // The .mo / .po files under `root`, relative, '/'-separated, sorted.
  // Links to directories are not followed (no loops); a broken entry is
  // listed and fails when read.
  std::vector<std::string> ListCatalogFiles(const std::string& root) const {
    std::vector<std::string> files;
    std::error_code ec;
    fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
    int64_t listed = 0;
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      std::error_code type_ec;
      if (it->is_directory(type_ec)) continue;
      RELPOS_CHECK_ARG(++listed <= kMaxWalkFiles,
                       "corpus directory " << io::QuotedPath(root)
                                           << " holds more than "
                                            << kMaxWalkFiles
                                            << " files; point the corpus at "
                                               "a smaller tree");
      if (!IsCatalogFile(it->path().filename().string())) continue;
      files.push_back(it->path().lexically_relative(root).generic_string());
    }
    if (ec) {
      RELPOS_THROW(IoError, "cannot list corpus directory "
                                << io::QuotedPath(root) << ": "
                                << ec.message());
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  // The domain: the file's name without extension ("coreutils"), or, for a
  // file named after its language (a project's po/de.po), the folder that
  // holds it ("hello/po"; the corpus folder's own name at the top).
  static std::string DomainOf(const std::string& root,
                              const std::string& relative,
                              const CatalogPlace& place,
                              const std::string& language) {
    if (place.domain != language) return place.domain;
    const std::string parent = fs::path(relative).parent_path().generic_string();
    if (!parent.empty()) return parent;
    return fs::weakly_canonical(fs::path(root)).filename().string();
  }

  const ParallelTextOptions& options_;
  ParallelTextStats& stats_;
  std::set<std::string> wanted_;
  int64_t text_bytes_ = 0;  // of the catalogs read so far
};

// The (context, msgid) key two languages' catalogs are joined on.
std::string JoinKey(const CatalogMessage& m) {
  return (m.has_context ? "1" + m.context : std::string("0")) + '\4' + m.msgid;
}

// Counts and drops what is never a pair: the header, fuzzy and context-only
// entries, untranslated ones. True if `m` may pair.
bool Usable(const CatalogMessage& m, ParallelTextStats& stats) {
  if (m.fuzzy) {
    ++stats.fuzzy;
  } else if (m.msgid.empty()) {
    ++stats.context_only;  // (the header is not a message)
  } else if (m.msgstr.empty()) {
    ++stats.untranslated;
  } else {
    return true;
  }
  return false;
}

void CountCatalog(const Catalog& c, ParallelTextStats& stats) {
  stats.messages += static_cast<int64_t>(c.messages.size()) + c.bad_encoding +
                    c.has_header;
  stats.bad_text += c.bad_encoding;
  stats.header += c.has_header;
}

// English on one side: (msgid, msgstr), or reversed.
void PairWithEnglish(const std::vector<LoadedCatalog>& catalogs,
                     bool english_source, ParallelTextStats& stats,
                     Candidates& out) {
  for (const LoadedCatalog& c : catalogs) {
    CountCatalog(c.catalog, stats);
    for (const CatalogMessage& m : c.catalog.messages) {
      if (!Usable(m, stats)) continue;
      Candidate pair{english_source ? m.msgid : m.msgstr,
                     english_source ? m.msgstr : m.msgid, m.plural};
      out.Add(c.domain, std::move(pair));
    }
  }
}

// Two non-English languages: the source catalogs' messages, each with the
// target catalog's translation of the same (context, msgid) in the same
// domain.
void PairThroughMsgid(const std::vector<LoadedCatalog>& catalogs,
                      const std::string& source_language,
                      ParallelTextStats& stats, Candidates& out) {
  std::map<std::string, std::unordered_map<std::string, const CatalogMessage*>>
      target;  // domain -> key -> message (the first usable one)
  for (const LoadedCatalog& c : catalogs) {
    if (c.language == source_language) continue;
    auto& keys = target[c.domain];
    for (const CatalogMessage& m : c.catalog.messages) {
      if (!m.fuzzy && !m.msgid.empty() && !m.msgstr.empty()) {
        keys.emplace(JoinKey(m), &m);
      }
    }
  }
  for (const LoadedCatalog& c : catalogs) {
    if (c.language != source_language) continue;
    CountCatalog(c.catalog, stats);
    const auto domain = target.find(c.domain);
    for (const CatalogMessage& m : c.catalog.messages) {
      if (!Usable(m, stats)) continue;
      const CatalogMessage* other = nullptr;
      if (domain != target.end()) {
        const auto it = domain->second.find(JoinKey(m));
        if (it != domain->second.end()) other = it->second;
      }
      if (other == nullptr) {
        ++stats.unmatched;
        continue;
      }
      out.Add(c.domain, {m.msgstr, other->msgstr, m.plural || other->plural});
    }
  }
}

// A TSV file: one "source<TAB>target" pair per line; blank lines are
// skipped; any other line without exactly one tab, or not UTF-8, is bad and
// makes the file an error that lists the first bad lines.
void ReadTsv(const std::string& path, ParallelTextStats& stats,
             Candidates& out, std::string* domain) {
  const std::string text = io::ReadFileBounded(path, kMaxTsvBytes);
  *domain = fs::path(path).filename().string();
  std::vector<std::string> bad;
  int64_t bad_lines = 0, line_number = 0;
  std::vector<Candidate> pairs;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (std::all_of(line.begin(), line.end(), IsAsciiSpace)) continue;
    ++stats.tsv_lines;
    const size_t tabs = std::count(line.begin(), line.end(), '\t');
    const char* problem = tabs == 0   ? "no tab"
                          : tabs > 1  ? "more than one tab"
                          : !IsValidUtf8(line) ? "not UTF-8"
                                               : nullptr;
    if (problem != nullptr) {
      if (++bad_lines <= 5) {
        bad.push_back(std::to_string(line_number) + " (" + problem + ")");
      }
      continue;
    }
    const size_t tab = line.find('\t');
    pairs.push_back({std::string(line.substr(0, tab)),
                     std::string(line.substr(tab + 1)), false});
  }
  if (bad_lines > 0) {
    std::ostringstream os;
    for (size_t i = 0; i < bad.size(); ++i) os << (i ? ", " : "") << bad[i];
    if (bad_lines > 5) os << ", ...";
    RELPOS_THROW(FormatError, "TSV corpus "
                                  << io::QuotedPath(path) << ": " << bad_lines
                                  << " bad lines (each must be "
                                     "source<TAB>target in UTF-8): line "
                                  << os.str());
  }
  stats.messages = static_cast<int64_t>(pairs.size());
  for (Candidate& c : pairs) out.Add(*domain, std::move(c));
}

// Which of the hashed names are held out: HeldOut, except that with two or
// more different names at least one is held out (the smallest hash) and at
// least one trains (the largest hash), so neither split is empty.
std::vector<bool> SplitByHash(const std::vector<std::string_view>& names) {
  std::vector<bool> held(names.size());
  size_t n_held = 0, smallest = 0, largest = 0;
  std::vector<uint64_t> hash(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    hash[i] = tasks::TextCorpus::PathHash(names[i]);
    held[i] = tasks::TextCorpus::HeldOutByHash(hash[i]);
    n_held += held[i];
    const auto before = [&](size_t a, size_t b) {
      return hash[a] != hash[b] ? hash[a] < hash[b] : names[a] < names[b];
    };
    if (before(i, smallest)) smallest = i;
    if (before(largest, i)) largest = i;
  }
  // Equal names (a source text twice) stay in one split.
  const auto set_all = [&](size_t like, bool value) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == names[like]) held[i] = value;
    }
  };
  if (names.size() >= 2 && names[smallest] != names[largest]) {
    if (n_held == 0) set_all(smallest, true);
    if (n_held == names.size()) set_all(largest, false);
  }
  return held;
}

// Splits the candidates (by domain, or by source text when there is one
// domain), then drops exact duplicates, training pairs first.
void SplitAndDeduplicate(const Candidates& candidates, ParallelText& text) {
  const auto& by_domain = candidates.by_domain();
  std::vector<std::string_view> names;
  for (const auto& [domain, pairs] : by_domain) {
    text.catalogs.push_back(domain);
    names.push_back(domain);
  }
  const bool by_catalog = by_domain.size() >= 2;
  text.split = by_catalog ? "by catalog" : "by message";
  text.test_catalog = by_catalog ? SplitByHash(names)
                                 : std::vector<bool>(names.size(), false);
  // Per candidate, in domain order: its split.
  std::vector<std::vector<bool>> held(by_domain.size());
  size_t d = 0;
  for (const auto& [domain, pairs] : by_domain) {
    if (by_catalog) {
      held[d].assign(pairs.size(), text.test_catalog[d]);
    } else {
      std::vector<std::string_view> sources;
      for (const Candidate& c : pairs) sources.push_back(c.source);
      held[d] = SplitByHash(sources);
    }
    ++d;
  }
  ParallelTextStats& stats = text.stats;
  std::unordered_set<std::string> seen;
  for (const bool test : {false, true}) {
    d = 0;
    for (const auto& [domain, pairs] : by_domain) {
      for (size_t i = 0; i < pairs.size(); ++i) {
        if (held[d][i] != test) continue;
        const Candidate& c = pairs[i];
        if (!seen.insert(c.source + '\0' + c.target).second) {
          ++stats.duplicate;
          continue;
        }
        stats.plural += c.plural;
        (test ? text.test : text.train)
            .push_back({c.source, c.target, static_cast<int32_t>(d)});
      }
      ++d;
    }
  }
  for (size_t i = 0; i < text.test_catalog.size(); ++i) {
    ++(text.test_catalog[i] ? stats.test_catalogs : stats.train_catalogs);
  }
  stats.train_pairs = static_cast<int64_t>(text.train.size());
  stats.test_pairs = static_cast<int64_t>(text.test.size());
  stats.pairs = stats.train_pairs + stats.test_pairs;
}

std::string Describe(const ParallelText& text, const std::string& what) {
  const ParallelTextStats& s = text.stats;
  std::ostringstream os;
  os << what << "\n  " << s.messages << " messages";
  const std::pair<const char*, int64_t> drops[] = {
      {"headers", s.header},         {"fuzzy", s.fuzzy},
      {"context-only", s.context_only}, {"untranslated", s.untranslated},
      {"unmatched", s.unmatched},    {"bad text", s.bad_text},
      {"too long", s.too_long},      {"identical", s.identical},
      {"duplicates", s.duplicate}};
  const char* sep = "; dropped ";
  for (const auto& [name, count] : drops) {
    if (count == 0) continue;
    os << sep << count << " " << name;
    sep = ", ";
  }
  os << "\n  kept " << s.pairs << " pairs (" << s.plural
     << " from plural entries): train " << s.train_pairs << " from "
     << s.train_catalogs << " catalogs, test " << s.test_pairs << " from "
     << s.test_catalogs << " (split " << text.split << ")";
  for (size_t i = 0; i < s.skipped.size() && i < 5; ++i) {
    os << "\n  skipped " << s.skipped[i];
  }
  if (s.skipped.size() > 5) {
    os << "\n  ... and " << s.skipped.size() - 5 << " more skipped";
  }
  return os.str();
}

void CheckLanguages(const ParallelTextOptions& o) {
  for (const std::string* lang : {&o.source_language, &o.target_language}) {
    RELPOS_CHECK_ARG(!lang->empty() && lang->size() <= 64 &&
                         lang->find_first_of("/\\") == std::string::npos,
                     "a language must be a locale name such as 'de' or "
                     "'pt_BR' (got '"
                         << *lang << "')");
  }
  RELPOS_CHECK_ARG(o.source_language != o.target_language,
                   "source and target language are both '"
                       << o.source_language << "'");
}

}  // namespace

bool NormaliseText(std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool space = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (IsAsciiSpace(static_cast<char>(c))) {
      space = !out.empty();
      continue;
    }
    // C0 controls and DEL; C1 controls are U+0080..U+009F = C2 80..C2 9F.
    if (c < 0x20 || c == 0x7F) return false;
    if (c == 0xC2 && i + 1 < text.size() &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      return false;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(static_cast<char>(c));
  }
  text = std::move(out);
  return true;
}

CatalogPlace PlaceOf(std::string_view relative_path) {
  const fs::path path(relative_path);
  CatalogPlace place;
  place.domain = path.stem().string();
  const fs::path parent = path.parent_path();
  const std::string category = parent.filename().string();
  if (category.size() > 3 && category.substr(0, 3) == "LC_" &&
      parent.has_parent_path()) {
    place.category = category;
    place.language = parent.parent_path().filename().string();
  }
  return place;
}

bool HeldOut(std::string_view name) {
  return tasks::TextCorpus::HeldOutByHash(tasks::TextCorpus::PathHash(name));
}

}  // namespace relpos::translate

namespace relpos {

ParallelText LoadParallelText(const ParallelTextOptions& options) {
  using namespace translate;
  CheckLanguages(options);
  std::error_code ec;
  const fs::file_status st = fs::status(options.path, ec);
  if (ec || !fs::exists(st)) {
    RELPOS_THROW(IoError, "translation corpus: cannot open "
                              << io::QuotedPath(options.path) << ": "
                              << (ec ? ec.message() : "no such file"));
  }
  ParallelText text;
  Candidates candidates(text.stats);
  std::ostringstream what;
  const std::string pair =
      options.source_language + " -> " + options.target_language;
  if (!fs::is_directory(st) && !IsCatalogFile(options.path)) {
    std::string domain;
    ReadTsv(options.path, text.stats, candidates, &domain);
    what << "TSV file " << options.path << " (" << pair
         << "): " << text.stats.tsv_lines << " lines";
  } else {
    CatalogSet set(options, text.stats);
    const std::vector<LoadedCatalog> catalogs =
        fs::is_directory(st) ? set.FromDirectory(options.path)
                             : set.FromFile(options.path);
    if (options.source_language == kEnglish ||
        options.target_language == kEnglish) {
      PairWithEnglish(catalogs, options.source_language == kEnglish,
                      text.stats, candidates);
    } else {
      PairThroughMsgid(catalogs, options.source_language, text.stats,
                       candidates);
    }
    const ParallelTextStats& s = text.stats;
    what << "gettext catalogs " << options.path << " (" << pair
         << "): " << s.files_found << " catalog files, " << s.catalogs_read
         << " read, " << s.catalogs_skipped << " skipped";
    if (s.same_file > 0) what << ", " << s.same_file << " links to files read";
    if (s.no_language > 0) {
      what << ", " << s.no_language << " of unknown language";
    }
  }
  SplitAndDeduplicate(candidates, text);
  text.description = Describe(text, what.str());
  if (text.train.empty() || text.test.empty()) {
    // One line: the first line of the description says what was read.
    RELPOS_THROW(FormatError,
                 "translation corpus: "
                     << (text.stats.pairs == 0
                             ? "no translation pairs"
                             : "too few translation pairs to split ("
                               + std::to_string(text.stats.pairs) + ")")
                     << " in " << what.str());
  }
  return text;
}

}  // namespace relpos
