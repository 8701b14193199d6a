#include "base/io/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "relpos/error.h"
#include "support/subprocess.h"

namespace relpos::io {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("relpos_file_io_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  // Names in dir_, to check that no temporary file was left behind.
  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

TEST_F(FileIoTest, WritesReadsAndReplaces) {
  const std::string path = (dir_ / "out.bin").string();
  const std::string first("hello\0world", 11);  // embedded NUL survives
  AtomicWriteFile(path, first);
  EXPECT_EQ(ReadFileBounded(path, 100), first);
  AtomicWriteFile(path, "second, longer contents");
  EXPECT_EQ(ReadFileBounded(path, 100), "second, longer contents");
  AtomicWriteFile(path, "");
  EXPECT_EQ(ReadFileBounded(path, 0), "");
  EXPECT_EQ(Listing(), std::vector<std::string>{"out.bin"});
}

TEST_F(FileIoTest, NewFileGetsUmaskPermissionsNotTempFilePermissions) {
  const mode_t old_mask = ::umask(022);
  AtomicWriteFile((dir_ / "f").string(), "x");
  ::umask(old_mask);
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(FileIoTest, MissingDirectoryIsAnIoError) {
  const std::string path = (dir_ / "no" / "such" / "file").string();
  try {
    AtomicWriteFile(path, "data");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  }
  EXPECT_TRUE(Listing().empty());
}

// A folder at the target: refused before anything is written (no
// temporary file), the folder left alone.
TEST_F(FileIoTest, FolderAtTheTargetIsRefusedBeforeWriting) {
  fs::create_directories(dir_ / "target");
  std::ofstream(dir_ / "target" / "keep") << "keep";
  try {
    AtomicWriteFile((dir_ / "target").string(), "data");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("it exists and is a folder"));
  }
  EXPECT_EQ(Listing(), std::vector<std::string>{"target"});
  EXPECT_TRUE(fs::exists(dir_ / "target" / "keep"));
}

// Atomic replacement is for regular files: a device node, a FIFO or a
// symbolic link at the path is refused and stays what it was (rename()
// would otherwise turn /dev/null into a regular file).
TEST_F(FileIoTest, ReplacesOnlyRegularFiles) {
  const fs::path fifo = dir_ / "fifo", link = dir_ / "link";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  AtomicWriteFile((dir_ / "real").string(), "old");
  fs::create_symlink("real", link);
  for (const auto& [path, kind] :
       {std::pair<std::string, std::string>{fifo.string(), "a FIFO"},
        {link.string(), "a symbolic link"},
        {"/dev/null", "a character device"}}) {
    try {
      CheckReplaceable(path);
      AtomicWriteFile(path, "new");
      FAIL() << "expected IoError for " << path;
    } catch (const IoError& e) {
      EXPECT_THAT(e.what(), HasSubstr("is " + kind + ", not a regular file"));
    }
  }
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_TRUE(fs::is_character_file(fs::status("/dev/null")));
  EXPECT_EQ(ReadFileBounded((dir_ / "real").string(), 10), "old");
  EXPECT_EQ(Listing(), (std::vector<std::string>{"fifo", "link", "real"}));
}

TEST_F(FileIoTest, UnwritableDirectoryLeavesNoFile) {
  if (::geteuid() == 0) {
    GTEST_SKIP() << "root ignores directory permissions";
  }
  const std::string path = (dir_ / "locked" / "out.bin").string();
  fs::create_directories(dir_ / "locked");
  AtomicWriteFile(path, "old");
  fs::permissions(dir_ / "locked", fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_THROW(AtomicWriteFile(path, "new"), IoError);
  fs::permissions(dir_ / "locked", fs::perms::owner_all, fs::perm_options::add);
  EXPECT_EQ(ReadFileBounded(path, 100), "old");  // untouched
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_ / "locked")) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"out.bin"});
}

TEST_F(FileIoTest, ReadFileBoundedChecksSizeAndKind) {
  const std::string path = (dir_ / "ten").string();
  AtomicWriteFile(path, "0123456789");
  EXPECT_EQ(ReadFileBounded(path, 10), "0123456789");  // the bound is inclusive
  try {
    ReadFileBounded(path, 9);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("too large: 10 bytes (limit 9)"));
  }
  try {
    ReadFileBounded((dir_ / "missing").string(), 10);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot open"));
    EXPECT_THAT(e.what(), HasSubstr("missing"));
  }
  try {
    ReadFileBounded(dir_.string(), 10);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
  }
  EXPECT_THROW(ReadFileBounded(path, -1), InvalidArgument);
}

// A FIFO is refused without blocking (open() of a FIFO with no writer waits
// forever), in a child with a deadline so that a regression fails instead
// of hanging; so is a device, whose open could have side effects.
TEST_F(FileIoTest, NeverOpensAFifoOrADevice) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    const relpos::testing::ChildResult r = relpos::testing::RunInChild(
        [&] {
          std::string out;
          bool whole = false;
          int refused = 0;
          for (int i = 0; i < 3; ++i) {
            try {
              if (i == 0) ReadFileBounded(path, 100);
              if (i == 1) AppendFilePrefix(path, 100, &out, &whole);
              if (i == 2) OpenRegularFile(path);
            } catch (const IoError& e) {
              refused += std::string(e.what()).find("not a regular file") !=
                         std::string::npos;
            }
          }
          return refused == 3 ? 0 : 1;
        },
        std::chrono::seconds(10));
    EXPECT_FALSE(r.timed_out) << path << ": the read blocked";
    EXPECT_EQ(r.exit_code, 0) << path;
  }
}

// Files whose size reads as 0 (/proc) are read to their end; a regular file
// is read to its end within the bound.
TEST_F(FileIoTest, ReadsProcFilesAndPrefixes) {
  EXPECT_NE(ReadFileBounded("/proc/self/status", 1 << 20).find("Pid:"),
            std::string::npos);
  EXPECT_THROW(ReadFileBounded("/proc/self/status", 10), IoError);
  const std::string path = (dir_ / "text").string();
  AtomicWriteFile(path, "0123456789");
  std::string out = "x";
  bool whole = true;
  AppendFilePrefix(path, 4, &out, &whole);
  EXPECT_EQ(out, "x0123");
  EXPECT_FALSE(whole);
  AppendFilePrefix(path, 10, &out, &whole);
  EXPECT_EQ(out, "x01230123456789");
  EXPECT_TRUE(whole);
}

// Leftover "<name>.tmp.<pid>.<n>" files of a killed write are recognised
// and removed for the names a caller owns, and nothing else.
TEST_F(FileIoTest, RemovesLeftoverTemporaryFiles) {
  EXPECT_EQ(TemporaryFileTarget("config.json.tmp.123.4"), "config.json");
  EXPECT_EQ(TemporaryFileTarget("a.tmp.b.tmp.1.2"), "a.tmp.b");
  for (const char* name : {"config.json", "config.json.tmp.1", "x.tmp.1.y",
                           ".tmp.1.2", "x.tmp..2"}) {
    EXPECT_EQ(TemporaryFileTarget(name), "") << name;
  }
  for (const char* name : {"mine.tmp.1.2", "other.tmp.3.4", "mine"}) {
    std::ofstream(dir_ / name) << "x";
  }
  fs::create_directories(dir_ / "mine.tmp.5.6");  // not a regular file
  RemoveTemporaryFiles(dir_.string(),
                       [](const std::string& t) { return t == "mine"; });
  EXPECT_EQ(Listing(), (std::vector<std::string>{"mine", "mine.tmp.5.6",
                                                 "other.tmp.3.4"}));
}

// One writer per folder: a second process is refused while the first holds
// the lock (and may lock once it is released); within one process the lock
// nests.
TEST_F(FileIoTest, FolderLockAdmitsOneProcess) {
  const std::string dir = dir_.string();
  auto other_process_locks = [&] {
    return relpos::testing::RunInChild([&] {
      try {
        FolderLock lock(dir);
        return 0;
      } catch (const IoError& e) {
        const std::string what = e.what();
        return what.find("in use by another relpos process (pid " +
                         std::to_string(::getppid()) + ")") !=
                       std::string::npos
                   ? 3
                   : 4;
      }
    });
  };
  {
    FolderLock lock(dir);
    ASSERT_TRUE(lock.held());
    {
      FolderLock nested(dir);  // the same process: shares the lock
      EXPECT_TRUE(nested.held());
    }
    EXPECT_EQ(other_process_locks().exit_code, 3);  // still held
    FolderLock moved = std::move(lock);
    EXPECT_EQ(other_process_locks().exit_code, 3);
  }
  EXPECT_EQ(other_process_locks().exit_code, 0);  // released
  EXPECT_THROW(FolderLock((dir_ / "missing").string()), IoError);
  EXPECT_TRUE(Listing().empty());  // the lock leaves no file
}

}  // namespace
}  // namespace relpos::io
