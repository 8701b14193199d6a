#include "data/translate/parallel_corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "relpos/error.h"
#include "support/expect_invalid.h"
#include "support/gettext_files.h"
#include "data/tasks/text_corpus.h"

namespace relpos::translate {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::CtxMsg;
using testing::Header;
using testing::MoBytes;
using testing::MoEntry;
using testing::Msg;
using testing::PluralMsg;
using testing::WriteBinaryFile;

// The first `count` names "<prefix><i>" that go to the held-out split (or,
// with held_out false, to training).
std::vector<std::string> Names(const std::string& prefix, bool held_out,
                               int count) {
  std::vector<std::string> names;
  for (int i = 0; static_cast<int>(names.size()) < count; ++i) {
    const std::string name = prefix + std::to_string(i);
    if (HeldOut(name) == held_out) names.push_back(name);
  }
  return names;
}

template <typename F>
std::string FormatErrorOf(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FormatError";
  return "";
}

std::set<std::pair<std::string, std::string>> PairSet(
    const std::vector<TranslationPair>& pairs) {
  std::set<std::pair<std::string, std::string>> s;
  for (const auto& p : pairs) s.insert({p.source, p.target});
  return s;
}

TEST(ParallelCorpusTest, NormaliseTextCollapsesWhitespaceAndRefusesControls) {
  std::string s = "  Usage:\t%s [OPTION]...\n\n  Print  it.\r\n";
  EXPECT_TRUE(NormaliseText(s));
  EXPECT_EQ(s, "Usage: %s [OPTION]... Print it.");
  s = "a\xC2\xA0" "b";  // a no-break space is text, not whitespace to collapse
  EXPECT_TRUE(NormaliseText(s));
  EXPECT_EQ(s, "a\xC2\xA0" "b");
  s = " \n\t ";
  EXPECT_TRUE(NormaliseText(s));
  EXPECT_EQ(s, "");
  for (std::string bad : {"\x1B[1mbold", "bell\a", "del\x7F", "nel\xC2\x85"}) {
    EXPECT_FALSE(NormaliseText(bad)) << bad;
  }
}

TEST(ParallelCorpusTest, PlaceOfReadsLocaleTreePaths) {
  const CatalogPlace tree = PlaceOf("de/LC_MESSAGES/coreutils.mo");
  EXPECT_EQ(tree.language, "de");
  EXPECT_EQ(tree.category, "LC_MESSAGES");
  EXPECT_EQ(tree.domain, "coreutils");
  const CatalogPlace time = PlaceOf("/usr/share/locale/pt_BR/LC_TIME/x.mo");
  EXPECT_EQ(time.language, "pt_BR");
  EXPECT_EQ(time.category, "LC_TIME");
  const CatalogPlace po = PlaceOf("hello/po/de.po");
  EXPECT_EQ(po.language, "");
  EXPECT_EQ(po.category, "");
  EXPECT_EQ(po.domain, "de");
  EXPECT_EQ(PlaceOf("LC_MESSAGES/x.mo").language, "");
}

TEST(ParallelCorpusTest, HeldOutIsTheTextCorpusHashSplit) {
  for (const std::string name : {"coreutils", "bash", "apt", "iso_3166-2"}) {
    EXPECT_EQ(HeldOut(name), tasks::TextCorpus::PathHash(name) % 10 == 0);
  }
  EXPECT_EQ(Names("d", true, 3).size(), 3u);
}

// A locale tree with German and French catalogs: two training domains, one
// held-out domain, and one of each kind of entry the corpus drops.
class LocaleTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTempDir("parallel_corpus_tree");
    train_ = Names("train-", false, 2);
    std::sort(train_.begin(), train_.end());  // the corpus's domain order
    test_ = Names("test-", true, 1)[0];
    const fs::path de = root_ / "de" / "LC_MESSAGES";
    const fs::path fr = root_ / "fr" / "LC_MESSAGES";
    WriteBinaryFile(de / (train_[0] + ".mo"), MoBytes({
        Header("de", "UTF-8"),
        Msg("File", "Datei"),
        Msg("Open %s\n", "%s\n  öffnen"),      // whitespace normalised
        CtxMsg("menu", "Quit", "Beenden"),
        CtxMsg("ctx-only", "", "Nur Kontext"),  // context-only
        PluralMsg("%d file", "%d files", {"%d Datei", "%d Dateien"}),
        Msg("Untranslated", ""),
        Msg("OK", "OK"),                        // identical
        Msg("Bell", "Klingel\a"),               // control character
        Msg(std::string(kMaxPairTextBytes + 1, 'x'), "lang"),
        Msg("Shared", "Geteilt"),
    }));
    WriteBinaryFile(de / (train_[1] + ".mo"), MoBytes({
        Header("de", "ISO-8859-1"),
        Msg("Open file", "Datei \xF6" "ffnen"),
        Msg("Shared", "Geteilt"),               // duplicate of train_[0]'s
    }, {.big_endian = true}));
    WriteBinaryFile(de / (test_ + ".mo"), MoBytes({
        Header("de", "UTF-8"),
        Msg("Shared", "Geteilt"),               // duplicate: training wins
        Msg("Save", "Speichern"),
        Msg("Save all", "Alle speichern"),
    }));
    // Not read: another category, another language (for en -> de), a link.
    WriteBinaryFile(root_ / "de" / "LC_TIME" / (train_[0] + ".mo"),
                    MoBytes({Msg("%H:%M", "%H.%M")}));
    WriteBinaryFile(fr / (train_[0] + ".mo"), MoBytes({
        Header("fr", "UTF-8"),
        Msg("File", "Fichier"),
        CtxMsg("menu", "Quit", "Quitter"),
        Msg("Open file", "Ouvrir le fichier"),  // other domain in German
    }));
    WriteBinaryFile(fr / (test_ + ".mo"), MoBytes({
        Msg("Save", "Enregistrer"),
    }));
    fs::create_symlink(de / (test_ + ".mo"), de / "link-to-test.mo");
    // A hostile catalog: skipped, counted, named.
    WriteBinaryFile(de / "broken.mo", "\xde\x12\x04\x95 truncated");
  }
  void TearDown() override { fs::remove_all(root_); }

  ParallelText Load(const std::string& src, const std::string& tgt) {
    return LoadParallelText({.path = root_.string(),
                             .source_language = src,
                             .target_language = tgt});
  }

  fs::path root_;
  std::vector<std::string> train_;
  std::string test_;
};

TEST_F(LocaleTreeTest, EnglishToGermanCountsEveryDropReason) {
  const ParallelText text = Load("en", "de");
  const ParallelTextStats& s = text.stats;
  EXPECT_EQ(s.files_found, 4);  // three catalogs + the broken one
  EXPECT_EQ(s.catalogs_read, 3);
  EXPECT_EQ(s.catalogs_skipped, 1);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_THAT(s.skipped[0], HasSubstr("broken.mo"));
  EXPECT_EQ(s.same_file, 1);
  EXPECT_EQ(s.messages, 11 + 3 + 4);  // headers included
  EXPECT_EQ(s.header, 3);
  EXPECT_EQ(s.context_only, 1);
  EXPECT_EQ(s.untranslated, 1);
  EXPECT_EQ(s.identical, 1);
  EXPECT_EQ(s.bad_text, 1);
  EXPECT_EQ(s.too_long, 1);
  EXPECT_EQ(s.duplicate, 2);
  EXPECT_EQ(s.fuzzy, 0);
  EXPECT_EQ(s.unmatched, 0);
  EXPECT_EQ(s.plural, 1);
  EXPECT_EQ(s.train_catalogs, 2);
  EXPECT_EQ(s.test_catalogs, 1);
  EXPECT_EQ(text.split, "by catalog");
  // Training: domains by name, messages in file (sorted) order.
  const std::vector<std::pair<std::string, std::string>> train = {
      {"%d file", "%d Datei"}, {"File", "Datei"}, {"Open %s", "%s öffnen"},
      {"Shared", "Geteilt"},   {"Quit", "Beenden"},
      {"Open file", "Datei öffnen"}};
  ASSERT_EQ(text.train.size(), train.size());
  for (size_t i = 0; i < train.size(); ++i) {
    EXPECT_EQ(text.train[i].source, train[i].first) << i;
    EXPECT_EQ(text.train[i].target, train[i].second) << i;
    EXPECT_EQ(text.catalogs[text.train[i].catalog], train_[i < 5 ? 0 : 1]);
    EXPECT_FALSE(text.test_catalog[text.train[i].catalog]);
  }
  ASSERT_EQ(text.test.size(), 2u);
  EXPECT_EQ(text.test[0].source, "Save");
  EXPECT_EQ(text.test[1].target, "Alle speichern");
  EXPECT_EQ(text.catalogs[text.test[0].catalog], test_);
  EXPECT_TRUE(text.test_catalog[text.test[0].catalog]);
  EXPECT_EQ(s.train_pairs + s.test_pairs, s.pairs);
  EXPECT_THAT(text.description, HasSubstr("kept 8 pairs"));
  EXPECT_THAT(text.description, HasSubstr("2 duplicates"));
  // Deterministic.
  const ParallelText again = Load("en", "de");
  EXPECT_EQ(PairSet(again.train), PairSet(text.train));
  EXPECT_EQ(again.description, text.description);
}

TEST_F(LocaleTreeTest, GermanToEnglishReverses) {
  const ParallelText en_de = Load("en", "de");
  const ParallelText de_en = Load("de", "en");
  ASSERT_EQ(de_en.train.size(), en_de.train.size());
  for (size_t i = 0; i < en_de.train.size(); ++i) {
    EXPECT_EQ(de_en.train[i].source, en_de.train[i].target);
    EXPECT_EQ(de_en.train[i].target, en_de.train[i].source);
  }
}

TEST_F(LocaleTreeTest, TwoNonEnglishLanguagesJoinOnMsgidWithinADomain) {
  const ParallelText text = Load("de", "fr");
  EXPECT_EQ(text.stats.files_found, 6);  // 4 German (one broken), 2 French
  // "File" and "Quit" (same context) pair in train_[0]; "Open file" is in
  // another domain in French, so it does not pair; "Save" pairs in test_.
  EXPECT_EQ(PairSet(text.train),
            (std::set<std::pair<std::string, std::string>>{
                {"Datei", "Fichier"}, {"Beenden", "Quitter"}}));
  EXPECT_EQ(PairSet(text.test),
            (std::set<std::pair<std::string, std::string>>{
                {"Speichern", "Enregistrer"}}));
  EXPECT_GT(text.stats.unmatched, 0);
}

TEST_F(LocaleTreeTest, ErrorsNameTheProblem) {
  const std::string none = FormatErrorOf([&] { Load("en", "xx"); });
  EXPECT_THAT(none, HasSubstr("no translation pairs"));
  EXPECT_THAT(none, HasSubstr("en -> xx"));
  EXPECT_EQ(none.find('\n'), std::string::npos) << none;
  ExpectInvalid([&] { Load("de", "de"); }, {"both 'de'"});
  ExpectInvalid([&] { Load("", "de"); }, {"locale name"});
  EXPECT_THROW(LoadParallelText({.path = (root_ / "missing").string()}),
               IoError);
}

TEST(ParallelCorpusTest, SingleCatalogFileSplitsByMessage) {
  const fs::path dir = testing::FreshTempDir("parallel_corpus_single");
  std::vector<MoEntry> entries = {Header("de", "UTF-8")};
  for (int i = 0; i < 100; ++i) {
    entries.push_back(Msg("message " + std::to_string(i),
                          "Nachricht " + std::to_string(i)));
  }
  WriteBinaryFile(dir / "app.mo", MoBytes(entries));
  const ParallelText text =
      LoadParallelText({.path = (dir / "app.mo").string()});
  EXPECT_EQ(text.split, "by message");
  EXPECT_EQ(text.stats.pairs, 100);
  ASSERT_FALSE(text.test.empty());
  for (const auto& p : text.test) EXPECT_TRUE(HeldOut(p.source)) << p.source;
  for (const auto& p : text.train) EXPECT_FALSE(HeldOut(p.source));
  // A catalog that says it is French is not German; two non-English
  // languages cannot come from one file.
  EXPECT_THAT(FormatErrorOf([&] {
                LoadParallelText({.path = (dir / "app.mo").string(),
                                  .target_language = "fr"});
              }),
              HasSubstr("is a 'de' catalog, not 'fr'"));
  ExpectInvalid(
      [&] {
        LoadParallelText({.path = (dir / "app.mo").string(),
                          .source_language = "de",
                          .target_language = "fr"});
      },
      {"give a directory"});
  // A single hostile catalog is an error naming it (not a skip).
  WriteBinaryFile(dir / "bad.mo", std::string(40, '\x7F'));
  EXPECT_THAT(FormatErrorOf([&] {
                LoadParallelText({.path = (dir / "bad.mo").string()});
              }),
              HasSubstr("bad.mo"));
  fs::remove_all(dir);
}

TEST(ParallelCorpusTest, ALanguageFolderSaysTheLanguageOfItsCatalogs) {
  // A copy of one language's LC_MESSAGES: catalogs without a Language header
  // are that language; outside such a folder they are of unknown language.
  const fs::path dir = testing::FreshTempDir("parallel_corpus_folder");
  const fs::path de = dir / "de" / "LC_MESSAGES";
  for (const std::string& domain : Names("app-", false, 2)) {
    WriteBinaryFile(de / (domain + ".mo"), MoBytes({Msg("File", "Datei " + domain)}));
  }
  WriteBinaryFile(de / (Names("app-", true, 1)[0] + ".mo"),
                  MoBytes({Msg("Save", "Speichern")}));
  const ParallelText text = LoadParallelText({.path = de.string()});
  EXPECT_EQ(text.stats.catalogs_read, 3);
  EXPECT_EQ(text.stats.no_language, 0);
  EXPECT_EQ(text.stats.pairs, 3);
  fs::copy(de, dir / "flat");
  const std::string error = FormatErrorOf(
      [&] { LoadParallelText({.path = (dir / "flat").string()}); });
  EXPECT_THAT(error, HasSubstr("3 of unknown language"));
  fs::remove_all(dir);
}

TEST(ParallelCorpusTest, PoDirectoryUsesHeaderLanguageAndFolderDomain) {
  const fs::path dir = testing::FreshTempDir("parallel_corpus_po");
  std::string de = "msgid \"\"\nmsgstr \"Language: de\\n\"\n\n";
  std::string fr = "msgid \"\"\nmsgstr \"Language: fr\\n\"\n\n";
  for (int i = 0; i < 40; ++i) {
    const std::string n = std::to_string(i);
    de += "msgid \"item " + n + "\"\nmsgstr \"Eintrag " + n + "\"\n\n";
    fr += "msgid \"item " + n + "\"\nmsgstr \"article " + n + "\"\n\n";
  }
  de += "#, fuzzy\nmsgid \"guess\"\nmsgstr \"Vermutung\"\n";
  WriteBinaryFile(dir / "hello" / "po" / "de.po", de);
  WriteBinaryFile(dir / "hello" / "po" / "fr.po", fr);
  const ParallelText en_de = LoadParallelText({.path = dir.string()});
  EXPECT_EQ(en_de.catalogs, std::vector<std::string>{"hello/po"});
  EXPECT_EQ(en_de.stats.pairs, 40);
  EXPECT_EQ(en_de.stats.fuzzy, 1);
  const ParallelText de_fr = LoadParallelText(
      {.path = dir.string(), .source_language = "de", .target_language = "fr"});
  EXPECT_EQ(de_fr.stats.pairs, 40);
  EXPECT_EQ(de_fr.train[0].source.substr(0, 8), "Eintrag ");
  EXPECT_EQ(de_fr.train[0].target.substr(0, 8), "article ");
  fs::remove_all(dir);
}

TEST(ParallelCorpusTest, TsvPairsAndBadLines) {
  const fs::path dir = testing::FreshTempDir("parallel_corpus_tsv");
  std::string tsv = "\n";
  for (int i = 0; i < 60; ++i) {
    tsv += "line  " + std::to_string(i) + "\tZeile " + std::to_string(i) +
           "\r\n";
  }
  tsv += "line 0\tZeile 0\n";  // a duplicate (after normalisation)
  tsv += "same\tsame\n";        // identical
  tsv += "\tleer\n";            // empty source
  WriteBinaryFile(dir / "pairs.tsv", tsv);
  const ParallelText text =
      LoadParallelText({.path = (dir / "pairs.tsv").string()});
  EXPECT_EQ(text.stats.tsv_lines, 63);
  EXPECT_EQ(text.stats.pairs, 60);
  EXPECT_EQ(text.stats.duplicate, 1);
  EXPECT_EQ(text.stats.identical, 1);
  EXPECT_EQ(text.stats.untranslated, 1);
  EXPECT_EQ(text.split, "by message");
  EXPECT_FALSE(text.test.empty());
  EXPECT_EQ(text.train[0].source, "line 0");
  EXPECT_EQ(text.train[0].target, "Zeile 0");

  WriteBinaryFile(dir / "bad.tsv",
                  "a\tb\nno tab here\nc\td\te\nf\tg\n\xFF\th\n");
  const std::string error = FormatErrorOf([&] {
    LoadParallelText({.path = (dir / "bad.tsv").string()});
  });
  EXPECT_THAT(error, HasSubstr("bad.tsv"));
  EXPECT_THAT(error, HasSubstr("3 bad lines"));
  EXPECT_THAT(error, HasSubstr("2 (no tab), 3 (more than one tab), 5 (not UTF-8)"));
  WriteBinaryFile(dir / "one.tsv", "a\tb\n");
  EXPECT_THAT(FormatErrorOf([&] {
                LoadParallelText({.path = (dir / "one.tsv").string()});
              }),
              HasSubstr("too few translation pairs to split"));
  fs::remove_all(dir);
}

TEST(ParallelCorpusTest, ASourceNeverStraddlesTheSplit) {
  // No source hashes into the held-out split, so the one with the smallest
  // hash is held out -- with every pair that has it.
  const fs::path dir = testing::FreshTempDir("parallel_corpus_straddle");
  const std::vector<std::string> sources = Names("source ", false, 3);
  std::string tsv;
  for (const std::string& s : sources) {
    tsv += s + "\tQuelle eins\n" + s + "\tQuelle zwei\n";
  }
  WriteBinaryFile(dir / "pairs.tsv", tsv);
  const ParallelText text =
      LoadParallelText({.path = (dir / "pairs.tsv").string()});
  EXPECT_EQ(text.test.size(), 2u);
  EXPECT_EQ(text.train.size(), 4u);
  std::set<std::string> train_sources;
  for (const auto& p : text.train) train_sources.insert(p.source);
  for (const auto& p : text.test) EXPECT_FALSE(train_sources.count(p.source));
  fs::remove_all(dir);
}

TEST(ParallelCorpusTest, HostileCatalogsInADirectoryAreSkippedNeverFatal) {
  const fs::path dir = testing::FreshTempDir("parallel_corpus_hostile");
  const fs::path de = dir / "de" / "LC_MESSAGES";
  std::string huge_count = MoBytes({Msg("a", "b")});
  testing::PutWord(huge_count, testing::kMoCountOffset, 0xFFFFFFFF);
  WriteBinaryFile(de / "empty.mo", "");
  WriteBinaryFile(de / "count.mo", huge_count);
  WriteBinaryFile(de / "text.po", "msgid \"a\"\nmsgstr oops\n");
  fs::create_symlink(de / "nowhere.mo", de / "dangling.mo");
  const std::string error =
      FormatErrorOf([&] { LoadParallelText({.path = dir.string()}); });
  EXPECT_THAT(error, HasSubstr("no translation pairs"));
  EXPECT_THAT(error, HasSubstr("4 skipped"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace relpos::translate
