// Files as relpos writes them for checkpoints and results, and paths as it
// shows them (docs/robustness.md).
#ifndef RELPOS_LAB_FILES_H_
#define RELPOS_LAB_FILES_H_

#include <memory>
#include <string>
#include <string_view>

namespace relpos {

// Writes `bytes` to `path` atomically (temporary file in the same folder,
// fsync, rename, fsync of the folder): after a crash `path` holds the old or
// the new contents, never a mix. Only a regular file is replaced (or a new
// one created): a symbolic link, device node, FIFO or folder at `path` is
// refused. IoError naming the path and the step.
void WriteFileAtomically(const std::string& path, std::string_view bytes);

// The check WriteFileAtomically makes first, without writing: IoError unless
// `path` is absent or a regular file. For failing before long work.
void CheckWritableFile(const std::string& path);

// A path as relpos shows it in messages and JSON: unchanged if it is
// printable UTF-8, else in double quotes with C escapes ("t\xff.txt"), so
// that any byte string prints as one line of valid UTF-8.
std::string PathText(const std::string& path);

// One writer per output folder: an advisory lock on the existing folder
// `dir`, held while the object lives (and released if the process dies).
// IoError "'<dir>' is in use by another relpos process (pid N) ..." when
// another process holds it; nested locks of one process share it.
class FolderLock {
 public:
  explicit FolderLock(const std::string& dir);
  ~FolderLock();
  FolderLock(FolderLock&&) noexcept;
  FolderLock& operator=(FolderLock&&) noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relpos

#endif  // RELPOS_LAB_FILES_H_
