#include "io/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "relpos/error.h"

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

// The rename fails after the temporary file was fully written and synced
// (the target is a non-empty directory): the temp file must be removed and
// the target left alone.
TEST_F(FileIoTest, FailedRenameRemovesTheTemporaryFile) {
  fs::create_directories(dir_ / "target");
  std::ofstream(dir_ / "target" / "keep") << "keep";
  try {
    AtomicWriteFile((dir_ / "target").string(), "data");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rename failed"));
  }
  EXPECT_EQ(Listing(), std::vector<std::string>{"target"});
  EXPECT_TRUE(fs::exists(dir_ / "target" / "keep"));
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

}  // namespace
}  // namespace relpos::io
