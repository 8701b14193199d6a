#include "data/translate/catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <string>
#include <vector>

#include "relpos/error.h"
#include "support/gettext_files.h"

namespace relpos::translate {
namespace {

using ::testing::HasSubstr;
using namespace std::string_literals;
using testing::CtxMsg;
using testing::Header;
using testing::MoBytes;
using testing::MoEntry;
using testing::Msg;
using testing::PluralMsg;
using testing::PutWord;

// Expects parse(bytes, file) to throw FormatError whose message has the
// file's name and `needle`.
template <typename Parse>
void ExpectFormatError(Parse parse, const std::string& bytes,
                       const std::string& file, const std::string& needle) {
  try {
    parse(bytes, file);
    ADD_FAILURE() << "no FormatError; expected '" << needle << "'";
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr(file)) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

void ExpectMoError(const std::string& bytes, const std::string& needle) {
  ExpectFormatError(ParseMo, bytes, "hostile.mo", needle);
}

void ExpectPoError(const std::string& text, const std::string& needle) {
  ExpectFormatError(ParsePo, text, "bad.po", needle);
}

std::vector<MoEntry> SampleEntries() {
  return {Header("de", "UTF-8"), Msg("File", "Datei"),
          Msg("Open %s", "%s öffnen"), CtxMsg("menu", "Open", "Öffnen"),
          PluralMsg("%d file", "%d files", {"%d Datei", "%d Dateien"}),
          Msg("Untranslated", "")};
}

TEST(MoReaderTest, ReadsEntriesInBothByteOrders) {
  for (const bool big_endian : {false, true}) {
    const Catalog c =
        ParseMo(MoBytes(SampleEntries(), {.big_endian = big_endian}), "x.mo");
    EXPECT_TRUE(c.has_header);
    EXPECT_EQ(c.language, "de");
    EXPECT_EQ(c.charset, "UTF-8");
    EXPECT_EQ(c.bad_encoding, 0);
    // Sorted by original, as msgfmt writes them; the header is not a message.
    ASSERT_EQ(c.messages.size(), 5u);
    EXPECT_EQ(c.messages[0].msgid, "%d file");
    EXPECT_TRUE(c.messages[0].plural);
    EXPECT_EQ(c.messages[0].msgstr, "%d Datei");  // the singular form
    EXPECT_EQ(c.messages[1].msgid, "File");
    EXPECT_EQ(c.messages[1].msgstr, "Datei");
    EXPECT_FALSE(c.messages[1].has_context);
    EXPECT_EQ(c.messages[2].msgid, "Open %s");
    EXPECT_EQ(c.messages[2].msgstr, "%s öffnen");
    EXPECT_EQ(c.messages[3].msgid, "Untranslated");
    EXPECT_EQ(c.messages[3].msgstr, "");
    EXPECT_TRUE(c.messages[4].has_context);
    EXPECT_EQ(c.messages[4].context, "menu");
    EXPECT_EQ(c.messages[4].msgid, "Open");
    EXPECT_EQ(c.messages[4].msgstr, "Öffnen");
  }
}

TEST(MoReaderTest, AcceptsRevisionsZeroAndOneRejectsMajorTwo) {
  for (const uint32_t revision : {0u, 1u, 0x10000u, 0x10001u}) {
    EXPECT_EQ(ParseMo(MoBytes(SampleEntries(), {.revision = revision}), "x.mo")
                  .messages.size(),
              5u);
  }
  ExpectMoError(MoBytes(SampleEntries(), {.revision = 0x20000}),
                "major revision 2");
}

TEST(MoReaderTest, EmptyCatalogAndNoHeader) {
  const Catalog empty = ParseMo(MoBytes({}), "empty.mo");
  EXPECT_FALSE(empty.has_header);
  EXPECT_TRUE(empty.messages.empty());
  const Catalog bare = ParseMo(MoBytes({Msg("a", "b")}), "bare.mo");
  EXPECT_FALSE(bare.has_header);
  EXPECT_EQ(bare.charset, "");
  ASSERT_EQ(bare.messages.size(), 1u);
}

TEST(MoReaderTest, RejectsShortFilesAndBadMagic) {
  ExpectMoError("", "shorter than the 28-byte header");
  ExpectMoError(std::string(27, '\0'), "shorter than the 28-byte header");
  std::string bytes = MoBytes(SampleEntries());
  bytes[0] = 'x';
  ExpectMoError(bytes, "magic number");
  ExpectMoError(std::string(100, '\0'), "magic number 0x0");
}

TEST(MoReaderTest, RejectsTablesAndStringsOutsideTheFile) {
  const std::string good = MoBytes(SampleEntries());
  // A huge count: the tables cannot fit (checked before any allocation).
  for (const uint32_t count : {0xFFFFFFFFu, 0x10000000u, 1000u}) {
    std::string bytes = good;
    PutWord(bytes, testing::kMoCountOffset, count);
    ExpectMoError(bytes, "extends past the end of the file");
  }
  std::string bytes = good;
  PutWord(bytes, testing::kMoOriginalsOffset, 0xFFFFFFF0u);
  ExpectMoError(bytes, "table of original strings");
  bytes = good;
  PutWord(bytes, testing::kMoTranslationsOffset,
          static_cast<uint32_t>(good.size()) - 8);
  ExpectMoError(bytes, "table of translations");
  bytes = good;
  PutWord(bytes, testing::kMoHashSizeOffset, 0x40000000u);
  ExpectMoError(bytes, "hash table");
  // The first original's length, then its offset, past the end; and both at
  // their maximum (a sum that would overflow 32 bits).
  for (const auto& [length, offset] :
       {std::pair<uint32_t, uint32_t>{1000000, 28},
        {1, static_cast<uint32_t>(good.size())},
        {0xFFFFFFFF, 0xFFFFFFFF}}) {
    bytes = good;
    PutWord(bytes, 28, length);
    PutWord(bytes, 32, offset);
    ExpectMoError(bytes, "original string 0");
  }
}

TEST(MoReaderTest, RejectsStringsWithoutNul) {
  std::string bytes = MoBytes({Msg("abc", "xyz")});
  // The last byte is the translation's terminating NUL.
  bytes.back() = '!';
  ExpectMoError(bytes, "translation 0 is not NUL-terminated");
}

TEST(MoReaderTest, RejectsTablesThatRepeatOneLargeString) {
  // 1000 descriptors all pointing at one 10 000-byte string: 10 MB of strings
  // from a 26 kB file.
  const uint32_t n = 1000;
  std::string hostile(28 + 16 * n, '\0');
  PutWord(hostile, 0, 0x950412de);
  PutWord(hostile, 8, n);
  PutWord(hostile, 12, 28);
  PutWord(hostile, 16, 28 + 8 * n);
  const uint32_t text = static_cast<uint32_t>(hostile.size());
  for (uint32_t i = 0; i < 2 * n; ++i) {
    PutWord(hostile, 28 + 8 * i, 10000);
    PutWord(hostile, 32 + 8 * i, text);
  }
  hostile += std::string(10000, 'a') + '\0';
  ExpectMoError(hostile, "more than 4 times the file's size");
}

TEST(MoReaderTest, EveryTruncationAndByteFlipIsACleanResult) {
  const std::string good = MoBytes(SampleEntries());
  for (size_t size = 0; size < good.size(); ++size) {
    EXPECT_THROW(ParseMo(good.substr(0, size), "cut.mo"), FormatError)
        << "size " << size;
  }
  // Every byte set to 0xFF and to 0x00 in turn: parsed or rejected cleanly.
  int rejected = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (const char value : {'\xFF', '\0'}) {
      std::string bytes = good;
      bytes[i] = value;
      try {
        ParseMo(bytes, "flip.mo");
      } catch (const FormatError&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(MoReaderTest, ConvertsDeclaredCharsetsToUtf8) {
  // "Datei öffnen" in ISO-8859-1: ö is the single byte 0xF6.
  const Catalog latin = ParseMo(
      MoBytes({Header("de", "ISO-8859-1"), Msg("Open file", "Datei \xF6" "ffnen")}),
      "latin.mo");
  ASSERT_EQ(latin.messages.size(), 1u);
  EXPECT_EQ(latin.messages[0].msgstr, "Datei öffnen");
  EXPECT_EQ(latin.charset, "ISO-8859-1");
  // Declared UTF-8 (or nothing) but not UTF-8: that entry is dropped, counted.
  for (const std::string charset : {"UTF-8", "utf8", "", "CHARSET"}) {
    const Catalog bad = ParseMo(
        MoBytes({Header("de", charset), Msg("Open file", "Datei \xF6" "ffnen"),
                 Msg("File", "Datei")}),
        "bad.mo");
    EXPECT_EQ(bad.bad_encoding, 1) << charset;
    ASSERT_EQ(bad.messages.size(), 1u);
    EXPECT_EQ(bad.messages[0].msgid, "File");
  }
  ExpectMoError(MoBytes({Header("de", "NO-SUCH-CHARSET-42"), Msg("a", "b")}),
                "unknown charset 'NO-SUCH-CHARSET-42'");
}

TEST(CatalogTest, HeaderFields) {
  const std::string header =
      "Project-Id-Version: x\nLanguage: pt_BR\nContent-Type: text/plain; "
      "charset=ISO-8859-15\nLanguage-Team: none\n";
  EXPECT_EQ(HeaderField(header, "Language"), "pt_BR");
  EXPECT_EQ(HeaderField(header, "Language-Team"), "none");
  EXPECT_EQ(HeaderField(header, "Content-Type"),
            "text/plain; charset=ISO-8859-15");
  EXPECT_EQ(HeaderField(header, "Missing"), "");
  EXPECT_EQ(HeaderField("Language:\n", "Language"), "");
}

TEST(CatalogTest, ReadCatalogByExtensionAndNamesMissingFiles) {
  const auto dir = testing::FreshTempDir("catalog_test");
  testing::WriteBinaryFile(dir / "x.mo", MoBytes(SampleEntries()));
  testing::WriteBinaryFile(dir / "x.po",
                           "msgid \"File\"\nmsgstr \"Datei\"\n");
  EXPECT_EQ(ReadCatalog((dir / "x.mo").string()).messages.size(), 5u);
  EXPECT_EQ(ReadCatalog((dir / "x.po").string()).messages.size(), 1u);
  try {
    ReadCatalog((dir / "missing.mo").string());
    ADD_FAILURE() << "no IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing.mo"));
  }
  // A .po read as .mo is a bad magic number, naming the file.
  testing::WriteBinaryFile(dir / "text.mo",
                           "msgid \"File\"\nmsgstr \"Datei\"\n\n"
                           "msgid \"Edit\"\nmsgstr \"Bearbeiten\"\n");
  try {
    ReadCatalog((dir / "text.mo").string());
    ADD_FAILURE() << "no FormatError";
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("text.mo"));
    EXPECT_THAT(e.what(), HasSubstr("magic"));
  }
}

// Catalogs are read through io::ReadFileBounded: a FIFO is refused at once
// (never waited on), so is a device, and a name that is not UTF-8 is shown
// escaped in the one-line message.
TEST(CatalogTest, ReadCatalogRefusesFifosDevicesAndEscapesNames) {
  const auto dir = testing::FreshTempDir("catalog_test");
  const std::string fifo = (dir / "fifo.mo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    try {
      ReadCatalog(path);
      ADD_FAILURE() << "no IoError for " << path;
    } catch (const IoError& e) {
      EXPECT_THAT(e.what(), HasSubstr("not a regular file")) << e.what();
    }
  }
  const std::string odd = (dir / "t\xff.po").string();
  testing::WriteBinaryFile(odd, "msgid \"File\"\nbogus\n");
  try {
    ReadCatalog(odd);
    ADD_FAILURE() << "no FormatError";
  } catch (const FormatError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr("t\\xff.po")) << message;
    EXPECT_EQ(message.find('\xff'), std::string::npos) << message;
  }
}

constexpr char kSamplePo[] = R"(# German translation.
msgid ""
msgstr ""
"Project-Id-Version: hello 1.0\n"
"Language: de\n"
"Content-Type: text/plain; charset=UTF-8\n"

#: src/main.c:10
#, c-format
msgid "Hello, %s!\n"
msgstr "Hallo, %s!\n"

msgid ""
"Two "
"lines"
msgstr "Zwei "
"Zeilen"

msgctxt "menu"
msgid "Open"
msgstr "\326ffnen \x41 \"q\" \\ \t|"

#, fuzzy, c-format
msgid "Fuzzy"
msgstr "Unscharf"

msgid "%d file"
msgid_plural "%d files"
msgstr[0] "%d Datei"
msgstr[1] "%d Dateien"

#~ msgid "Obsolete"
#~ msgstr "Veraltet"
msgid "Last"
msgstr "Letzte")";

TEST(PoReaderTest, ReadsEntriesContinuationsEscapesAndFlags) {
  // The octal escape \326 is ISO-8859-1 'Ö'; so declare that charset.
  std::string text = kSamplePo;
  text.replace(text.find("UTF-8"), 5, "ISO-8859-1");
  const Catalog c = ParsePo(text, "hello.po");
  EXPECT_TRUE(c.has_header);
  EXPECT_EQ(c.language, "de");
  EXPECT_EQ(c.charset, "ISO-8859-1");
  ASSERT_EQ(c.messages.size(), 6u);
  EXPECT_EQ(c.messages[0].msgid, "Hello, %s!\n");
  EXPECT_EQ(c.messages[0].msgstr, "Hallo, %s!\n");
  EXPECT_FALSE(c.messages[0].fuzzy);
  EXPECT_EQ(c.messages[1].msgid, "Two lines");
  EXPECT_EQ(c.messages[1].msgstr, "Zwei Zeilen");
  EXPECT_TRUE(c.messages[2].has_context);
  EXPECT_EQ(c.messages[2].context, "menu");
  EXPECT_EQ(c.messages[2].msgstr, "Öffnen A \"q\" \\ \t|");
  EXPECT_EQ(c.messages[3].msgid, "Fuzzy");
  EXPECT_TRUE(c.messages[3].fuzzy);
  EXPECT_TRUE(c.messages[4].plural);
  EXPECT_EQ(c.messages[4].msgstr, "%d Datei");
  EXPECT_EQ(c.messages[5].msgid, "Last");  // after the obsolete entry
  EXPECT_FALSE(c.messages[5].fuzzy);
}

TEST(PoReaderTest, RejectsMalformedTextNamingTheLine) {
  ExpectPoError("msgid \"a\"\nmsgstr \"b\"\nmsgfoo \"c\"\n",
                "line 3: unknown keyword 'msgfoo'");
  ExpectPoError("msgid \"a\nmsgstr \"b\"\n", "line 1: unterminated string");
  ExpectPoError("msgid \"a\\q\"\nmsgstr \"b\"\n", "line 1: unknown escape \\q");
  ExpectPoError("msgid \"a\\0\"\nmsgstr \"b\"\n", "line 1: NUL byte");
  ExpectPoError("msgid \"a\" x\nmsgstr \"b\"\n", "text after the closing quote");
  ExpectPoError("msgstr \"b\"\n", "line 1: msgstr must follow msgid");
  ExpectPoError("msgid \"a\"\n\nmsgstr \"b\"\n", "line 2: msgid without msgstr");
  ExpectPoError("msgid \"a\"\n", "msgid without msgstr");
  ExpectPoError("msgid \"a\"\nmsgid \"b\"\n", "line 2: msgid without msgstr");
  ExpectPoError("\"orphan\"\n", "line 1: a string continues no keyword");
  ExpectPoError("msgid \"a\"\nmsgstr[0] \"b\"\n", "msgstr[N] needs msgid_plural");
  ExpectPoError("msgid \"a\"\nmsgid_plural \"as\"\nmsgstr \"b\"\n",
                "needs msgstr[N]");
  ExpectPoError("msgid \"a\"\nmsgid_plural \"as\"\nmsgstr[1] \"b\"\n",
                "plural forms out of order");
  ExpectPoError("msgid \"a\"\nmsgid_plural \"as\"\nmsgstr[x] \"b\"\n",
                "bad plural index");
  ExpectPoError("msgctxt \"c\"\n\n", "msgctxt without msgid");
  ExpectPoError("msgid a\nmsgstr \"b\"\n", "expected a quoted string");
  ExpectPoError("msgid \"a\\x\"\nmsgstr \"b\"\n", "\\x without hex digits");
}

TEST(PoReaderTest, EveryTruncationIsACleanResult) {
  const std::string text = kSamplePo;
  for (size_t size = 0; size <= text.size(); ++size) {
    try {
      ParsePo(text.substr(0, size), "cut.po");
    } catch (const FormatError&) {
    }
  }
}

}  // namespace
}  // namespace relpos::translate
