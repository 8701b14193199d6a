#include "support/gettext_files.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>
#include <stdexcept>

namespace relpos::testing {

MoEntry Msg(const std::string& msgid, const std::string& msgstr) {
  return {msgid, msgstr};
}

MoEntry CtxMsg(const std::string& context, const std::string& msgid,
               const std::string& msgstr) {
  return {context + '\4' + msgid, msgstr};
}

MoEntry PluralMsg(const std::string& msgid, const std::string& plural,
                  const std::vector<std::string>& forms) {
  MoEntry e{msgid + '\0' + plural, ""};
  for (size_t i = 0; i < forms.size(); ++i) {
    if (i > 0) e.translation.push_back('\0');
    e.translation += forms[i];
  }
  return e;
}

MoEntry Header(const std::string& language, const std::string& charset) {
  std::string h = "Project-Id-Version: relpos-test 1.0\n";
  if (!language.empty()) h += "Language: " + language + "\n";
  h += "MIME-Version: 1.0\n";
  if (!charset.empty()) {
    h += "Content-Type: text/plain; charset=" + charset + "\n";
  }
  h += "Plural-Forms: nplurals=2; plural=(n != 1);\n";
  return {"", h};
}

void PutWord(std::string& bytes, size_t offset, uint32_t value) {
  for (int k = 0; k < 4; ++k) {
    bytes[offset + k] = static_cast<char>((value >> (8 * k)) & 0xFF);
  }
}

std::string MoBytes(std::vector<MoEntry> entries, const MoLayout& layout) {
  if (layout.sort) {
    std::stable_sort(entries.begin(), entries.end(),
                     [](const MoEntry& a, const MoEntry& b) {
                       return a.original < b.original;
                     });
  }
  const uint32_t n = static_cast<uint32_t>(entries.size());
  const uint32_t originals = 28, translations = 28 + 8 * n;
  std::string strings;
  std::vector<uint32_t> table(4 * n);  // per entry: len, off (orig), len, off
  uint32_t offset = translations + 8 * n;
  for (int side = 0; side < 2; ++side) {
    for (uint32_t i = 0; i < n; ++i) {
      const std::string& s =
          side == 0 ? entries[i].original : entries[i].translation;
      table[4 * i + 2 * side] = static_cast<uint32_t>(s.size());
      table[4 * i + 2 * side + 1] = offset + static_cast<uint32_t>(strings.size());
      strings += s;
      strings.push_back('\0');
    }
  }
  std::string bytes(offset, '\0');
  const auto word = [&](size_t at, uint32_t v) {
    if (layout.big_endian) v = __builtin_bswap32(v);
    PutWord(bytes, at, v);
  };
  word(0, 0x950412de);
  word(4, layout.revision);
  word(8, n);
  word(12, originals);
  word(16, translations);
  word(20, 0);  // no hash table
  word(24, offset);
  for (uint32_t i = 0; i < n; ++i) {
    word(originals + 8 * i, table[4 * i]);
    word(originals + 8 * i + 4, table[4 * i + 1]);
    word(translations + 8 * i, table[4 * i + 2]);
    word(translations + 8 * i + 4, table[4 * i + 3]);
  }
  return bytes + strings;
}

void WriteBinaryFile(const std::filesystem::path& path,
                     const std::string& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::filesystem::path FreshTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const auto dir = std::filesystem::path(base ? base : "/tmp") /
                   ("relpos_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ToyCorpus(uint32_t seed, int pairs) {
  const std::vector<std::pair<std::string, std::string>> verbs = {
      {"open", "öffnen"}, {"close", "schließen"}, {"copy", "kopieren"},
      {"delete", "löschen"}, {"save", "speichern"}, {"find", "finden"}};
  const std::vector<std::pair<std::string, std::string>> adjs = {
      {"red", "rote"}, {"big", "große"}, {"new", "neue"}, {"old", "alte"}};
  const std::vector<std::pair<std::string, std::string>> nouns = {
      {"file", "Datei"}, {"page", "Seite"}, {"list", "Liste"},
      {"line", "Zeile"}, {"key", "Taste"}};
  std::mt19937 rng(seed);
  std::ostringstream out;
  for (int i = 0; i < pairs; ++i) {
    const int clauses = 1 + static_cast<int>(rng() % 3);
    std::string en, de;
    for (int k = 0; k < clauses; ++k) {
      const auto& v = verbs[rng() % verbs.size()];
      const auto& a = adjs[rng() % adjs.size()];
      const auto& n = nouns[rng() % nouns.size()];
      en += (k ? " and " : "") + v.first + " the " + a.first + " " + n.first;
      de += (k ? " und " : "") + std::string("die ") + a.second + " " +
            n.second + " " + v.second;
    }
    out << en << "\t" << de << "\n";
  }
  return out.str();
}

}  // namespace relpos::testing
