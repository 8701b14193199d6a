// Small, careful file helpers: the one place relpos opens, reads, writes and
// locks files. Every file the library reads goes through OpenRegularFile
// (directly, or through ReadFileBounded / AppendFilePrefix), every file it
// writes through AtomicWriteFile, and every output folder is guarded by a
// FolderLock. New code that touches files should use them too, so that the
// checks below hold everywhere:
//
//   const std::string text = io::ReadFileBounded(path, int64_t{1} << 20);
//   io::AtomicWriteFile(path, bytes);
//   io::FolderLock lock(out_dir);   // one writer per folder
//
// - Reading never blocks on a FIFO or a device and never reads one: only
//   regular files are opened (stat first, then open(O_NONBLOCK), then fstat
//   the descriptor), everything else is refused with IoError naming the path
//   and what it is ("a FIFO").
// - Reading is bounded: the size is checked before anything is read, and
//   the read stops at the bound even if the file grows meanwhile (files in
//   /proc, whose size reads as 0, are read up to the bound).
// - Writing is atomic (temporary file, fsync, rename, fsync of the folder)
//   and replaces only a regular file or creates a new one: a symbolic link,
//   device node, FIFO or folder at the path is refused, never renamed over.
// - Paths in every message are shown with io::QuotedPath (io/path_text.h),
//   so a name that is not UTF-8 cannot break a message or a JSON document.
#ifndef RELPOS_SRC_BASE_IO_FILE_IO_H_
#define RELPOS_SRC_BASE_IO_FILE_IO_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace relpos::io {

// An owned file descriptor, closed by the destructor (or by Close, which
// reports close()'s errno: close can report a deferred write error).
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.fd_) {
    other.fd_ = -1;
  }
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes now; 0 on success, else close()'s errno.
  int Close();
  // Gives up ownership: returns the descriptor, which the caller closes.
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Opens the regular file at `path` (symbolic links followed) for reading,
// without blocking: IoError "cannot open '<path>': <strerror>", or
// "'<path>' is not a regular file (it is a FIFO)" for a FIFO, device,
// socket or folder, whose open() could block or have side effects.
FileDescriptor OpenRegularFile(const std::string& path);

// Reads the whole regular file at `path`. IoError if it cannot be opened or
// read, is not a regular file, or holds more than `max_bytes` (checked
// against its size before reading anything, and again while reading).
std::string ReadFileBounded(const std::string& path, int64_t max_bytes);

// Appends the first min(size, budget) bytes of the regular file at `path`
// to *out, and sets *whole to whether that was the whole file. IoError as
// ReadFileBounded (*out unchanged then).
void AppendFilePrefix(const std::string& path, int64_t budget,
                      std::string* out, bool* whole);

// Writes `bytes` to `path` atomically: a temporary file in the same
// directory (so rename() cannot cross file systems), write everything,
// fsync it, rename it over `path`, then fsync the directory so the rename
// itself is durable. After a crash `path` holds either the old or the new
// contents, never a mix. IoError naming the path and the failing step (with
// strerror); the temporary file is removed on failure, and `path` is left
// untouched. `path` must be absent or a regular file (CheckReplaceable).
void AtomicWriteFile(const std::string& path, std::string_view bytes);

// The check AtomicWriteFile makes first, for callers that want to fail
// before doing the work whose result they will write: IoError unless
// `path` is absent or a regular file (a symbolic link is refused, not
// followed).
void CheckReplaceable(const std::string& path);

// AtomicWriteFile's temporary files are "<name>.tmp.<pid>.<n>"; a process
// killed during a write leaves one behind. If `file_name` is such a name,
// returns <name>; else "".
std::string TemporaryFileTarget(const std::string& file_name);

// Removes the leftover temporary files in `dir` whose target name satisfies
// `ours` (regular files only; best effort: errors are ignored). Call it
// only while holding the folder's FolderLock, so that no live writer's
// temporary file can be removed.
void RemoveTemporaryFiles(const std::string& dir,
                          const std::function<bool(const std::string&)>& ours);

// One writer per output folder: an advisory lock (flock(2), LOCK_EX) on the
// folder `dir` (which must exist), held while this object lives and
// released by the kernel if the process dies. A second process is refused
// with IoError "'<dir>' is in use by another relpos process (pid N) ...".
// Within one process the lock is reentrant: nested FolderLocks of the same
// folder share it (so a library call that locks its output folder can run
// under a caller that already holds the lock). On a file system without
// flock on folders (some network file systems) no lock is taken.
class FolderLock {
 public:
  FolderLock() = default;
  explicit FolderLock(const std::string& dir);
  ~FolderLock();
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  // False when the file system offered no lock.
  bool held() const { return held_; }

 private:
  void Release();
  bool held_ = false;
  uint64_t dev_ = 0, ino_ = 0;
};

}  // namespace relpos::io

#endif  // RELPOS_SRC_BASE_IO_FILE_IO_H_
