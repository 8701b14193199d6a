// POSIX implementation of the file helpers of file_io.h.
#include "base/io/file_io.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>

#include "base/check.h"
#include "base/io/path_text.h"

namespace relpos::io {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// Directory part of `path` ("." when it has none), for the temp file and the
// directory fsync.
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// "a FIFO", "a folder", ... for "'x' is not a regular file (it is ...)".
const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

[[noreturn]] void ThrowNotRegular(const std::string& path, mode_t mode) {
  RELPOS_THROW(IoError, QuotedPath(path) << " is not a regular file (it is "
                                         << KindOf(mode) << ")");
}

[[noreturn]] void ThrowCannotOpen(const std::string& path, int err) {
  RELPOS_THROW(IoError,
               "cannot open " << QuotedPath(path) << ": " << ErrnoText(err));
}

// Reads from `fd` to the end of the file or until `limit` + 1 bytes have
// been read, appending to *out; returns the count. `expected` (the size
// fstat reported) sizes the one allocation a file of that size needs; files
// that report 0 (/proc) or grow meanwhile are read on in 64 KiB steps,
// never past limit + 1.
int64_t ReadUpTo(int fd, const std::string& path, int64_t expected,
                 int64_t limit, std::string* out) {
  const size_t start = out->size();
  const int64_t cap = limit + 1;
  // The expected size plus one byte, to see the end of the file.
  const int64_t first =
      std::min<int64_t>(std::max<int64_t>(expected, 0), limit) + 1;
  out->resize(start + static_cast<size_t>(first));
  int64_t done = 0;
  char chunk[1 << 16];
  while (done < cap) {
    const bool in_place = done < first;
    char* dst = in_place ? out->data() + start + done : chunk;
    const int64_t room =
        in_place ? first - done : std::min<int64_t>(sizeof chunk, cap - done);
    const ssize_t n = ::read(fd, dst, static_cast<size_t>(room));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      out->resize(start);
      RELPOS_THROW(IoError, "cannot read " << QuotedPath(path) << ": "
                                           << ErrnoText(err));
    }
    if (n == 0) break;
    if (!in_place) {
      out->resize(start + static_cast<size_t>(done));
      out->append(chunk, static_cast<size_t>(n));
    }
    done += n;
  }
  out->resize(start + static_cast<size_t>(done));
  return done;
}

// ---- the folder locks of this process (FolderLock is reentrant) ----

struct HeldLock {
  int fd = -1;
  int count = 0;
  pid_t pid = 0;  // a child made by fork() inherits the table, not the lock
};
std::mutex& LockMutex() {
  static std::mutex m;
  return m;
}
std::map<std::pair<uint64_t, uint64_t>, HeldLock>& HeldLocks() {
  static auto* locks = new std::map<std::pair<uint64_t, uint64_t>, HeldLock>;
  return *locks;
}

// The pid holding a flock on the file (dev, ino), from /proc/locks
// ("1: FLOCK  ADVISORY  WRITE 4242 08:02:1311 0 EOF"); -1 if not found.
long LockHolder(dev_t dev, ino_t ino) {
  std::string text;
  try {
    text = ReadFileBounded("/proc/locks", int64_t{4} << 20);
  } catch (const Error&) {
    return -1;
  }
  char want[64];
  std::snprintf(want, sizeof want, "%02x:%02x:%" PRIu64, major(dev), minor(dev),
                static_cast<uint64_t>(ino));
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("->") != std::string::npos) continue;  // a waiter
    std::istringstream words(line);
    std::string id, kind, mode, access, pid, file;
    words >> id >> kind >> mode >> access >> pid >> file;
    if (kind == "FLOCK" && file == want) {
      return std::strtol(pid.c_str(), nullptr, 10);
    }
  }
  return -1;
}

}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

int FileDescriptor::Close() {
  const int fd = fd_;
  fd_ = -1;
  return fd < 0 || ::close(fd) == 0 ? 0 : errno;
}

FileDescriptor OpenRegularFile(const std::string& path) {
  // stat first: open() itself blocks on a FIFO without a writer, and has
  // side effects on some devices (a tape rewinds, a terminal becomes the
  // controlling one).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) ThrowCannotOpen(path, errno);
  if (!S_ISREG(st.st_mode)) ThrowNotRegular(path, st.st_mode);
  // O_NONBLOCK: the path may have been replaced by a FIFO since the stat.
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) ThrowCannotOpen(path, errno);
  FileDescriptor file(fd);
  if (::fstat(file.get(), &st) != 0) ThrowCannotOpen(path, errno);
  if (!S_ISREG(st.st_mode)) ThrowNotRegular(path, st.st_mode);
  const int flags = ::fcntl(file.get(), F_GETFL);
  if (flags >= 0) ::fcntl(file.get(), F_SETFL, flags & ~O_NONBLOCK);
  return file;
}

std::string ReadFileBounded(const std::string& path, int64_t max_bytes) {
  RELPOS_CHECK_ARG(
      max_bytes >= 0,
      "ReadFileBounded: max_bytes must be >= 0 (got " << max_bytes << ")");
  const FileDescriptor file = OpenRegularFile(path);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) ThrowCannotOpen(path, errno);
  auto too_large = [&](const std::string& size) {
    RELPOS_THROW(IoError, QuotedPath(path)
                              << " is too large: " << size << " bytes (limit "
                              << max_bytes << ")");
  };
  if (st.st_size > max_bytes) too_large(std::to_string(st.st_size));
  std::string out;
  if (ReadUpTo(file.get(), path, st.st_size, max_bytes, &out) > max_bytes) {
    too_large("more than " + std::to_string(max_bytes));
  }
  return out;
}

void AppendFilePrefix(const std::string& path, int64_t budget, std::string* out,
                      bool* whole) {
  RELPOS_CHECK_ARG(budget >= 0, "AppendFilePrefix: budget must be >= 0 (got "
                                    << budget << ")");
  const FileDescriptor file = OpenRegularFile(path);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) ThrowCannotOpen(path, errno);
  const size_t start = out->size();
  // Reads one byte past the budget, to know whether the file ends there.
  const int64_t n = ReadUpTo(file.get(), path, st.st_size, budget, out);
  *whole = n <= budget;
  out->resize(start + static_cast<size_t>(std::min(n, budget)));
}

void CheckReplaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return;  // a new file (a missing folder fails later)
    RELPOS_THROW(IoError,
                 "cannot write " << QuotedPath(path) << ": " << ErrnoText(err));
  }
  if (S_ISREG(st.st_mode)) return;
  RELPOS_THROW(IoError, "cannot write " << QuotedPath(path) << ": it exists "
                                        << "and is " << KindOf(st.st_mode)
                                        << ", not a regular file (relpos "
                                           "replaces only regular files)");
}

void AtomicWriteFile(const std::string& path, std::string_view bytes) {
  RELPOS_CHECK_ARG(!path.empty(), "AtomicWriteFile: path must not be empty");
  CheckReplaceable(path);
  const std::string dir = DirectoryOf(path);

  // A unique name in the same directory: pid + a process-wide counter, and
  // O_EXCL so a stale file with the same name is never reused. Mode 0666 is
  // reduced by the umask, giving the permissions a plain write would.
  static std::atomic<uint64_t> counter{0};
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temp = path + ".tmp." + std::to_string(::getpid()) + "." +
           std::to_string(counter.fetch_add(1));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    const int err = errno;
    RELPOS_THROW(IoError, "cannot create a temporary file next to "
                              << QuotedPath(path) << " (" << QuotedPath(temp)
                              << "): " << ErrnoText(err));
  }
  FileDescriptor file(fd);

  // From here on, every failure removes the temporary file.
  auto fail = [&](const char* step, int err) {
    file.Close();
    ::unlink(temp.c_str());
    RELPOS_THROW(IoError, "cannot write " << QuotedPath(path) << ": " << step
                                          << " failed: " << ErrnoText(err));
  };

  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n =
        ::write(file.get(), bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(file.get()) != 0) fail("fsync", errno);
  if (const int err = file.Close(); err != 0) fail("close", err);
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("rename", errno);

  // Make the rename durable. The new contents are already in place, so a
  // failure here is still reported (the caller asked for durability) but
  // there is no temporary file left to remove.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    const int err = errno;
    RELPOS_THROW(IoError, "cannot open directory "
                              << QuotedPath(dir) << " to fsync "
                              << QuotedPath(path) << ": " << ErrnoText(err));
  }
  FileDescriptor dir_file(dir_fd);
  if (::fsync(dir_file.get()) != 0) {
    const int err = errno;
    // Some file systems do not support fsync on directories; that is not a
    // failure of this write.
    if (err != EINVAL && err != ENOTSUP) {
      RELPOS_THROW(IoError, "cannot fsync directory "
                                << QuotedPath(dir) << " after writing "
                                << QuotedPath(path) << ": " << ErrnoText(err));
    }
  }
}

std::string TemporaryFileTarget(const std::string& file_name) {
  // <name>.tmp.<digits>.<digits>
  const size_t at = file_name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return "";
  const std::string rest = file_name.substr(at + 5);
  const size_t dot = rest.find('.');
  auto digits = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  if (dot == std::string::npos || !digits(rest.substr(0, dot)) ||
      !digits(rest.substr(dot + 1))) {
    return "";
  }
  return file_name.substr(0, at);
}

void RemoveTemporaryFiles(const std::string& dir,
                          const std::function<bool(const std::string&)>& ours) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string target = TemporaryFileTarget(name);
    std::error_code type_ec;
    if (target.empty() || !ours(target) ||
        it->symlink_status(type_ec).type() != fs::file_type::regular) {
      continue;
    }
    fs::remove(it->path(), type_ec);
  }
}

FolderLock::FolderLock(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    RELPOS_THROW(IoError, "cannot lock folder " << QuotedPath(dir) << ": "
                                                << ErrnoText(err));
  }
  FileDescriptor file(fd);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) {
    const int err = errno;
    RELPOS_THROW(IoError, "cannot lock folder " << QuotedPath(dir) << ": "
                                                << ErrnoText(err));
  }
  const std::pair<uint64_t, uint64_t> key{st.st_dev, st.st_ino};
  std::lock_guard<std::mutex> guard(LockMutex());
  auto& locks = HeldLocks();
  if (auto it = locks.find(key);
      it != locks.end() && it->second.pid != ::getpid()) {
    // Inherited through fork(): the descriptor shares the parent's lock;
    // this process must take its own.
    ::close(it->second.fd);
    locks.erase(it);
  }
  if (auto it = locks.find(key); it != locks.end()) {
    ++it->second.count;  // this process holds it already
  } else {
    while (::flock(file.get(), LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EWOULDBLOCK) {
        const long pid = LockHolder(st.st_dev, st.st_ino);
        RELPOS_THROW(IoError,
                     QuotedPath(dir)
                         << " is in use by another relpos process"
                         << (pid > 0 ? " (pid " + std::to_string(pid) + ")"
                                     : std::string())
                         << ", which holds the folder's lock; wait for it to "
                            "finish or choose another folder");
      }
      return;  // no flock on this file system: go on without the lock
    }
    // Kept open (the lock lives with the descriptor) until the last
    // FolderLock of this folder is released.
    locks[key] = {.fd = file.Release(), .count = 1, .pid = ::getpid()};
  }
  held_ = true;
  dev_ = key.first;
  ino_ = key.second;
}

void FolderLock::Release() {
  if (!held_) return;
  held_ = false;
  std::lock_guard<std::mutex> guard(LockMutex());
  auto& locks = HeldLocks();
  const auto it = locks.find({dev_, ino_});
  if (it == locks.end() || it->second.pid != ::getpid()) return;
  if (--it->second.count == 0) {
    ::close(it->second.fd);  // releases the flock
    locks.erase(it);
  }
}

FolderLock::~FolderLock() { Release(); }

FolderLock::FolderLock(FolderLock&& other) noexcept
    : held_(other.held_), dev_(other.dev_), ino_(other.ino_) {
  other.held_ = false;
}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    Release();
    held_ = other.held_;
    dev_ = other.dev_;
    ino_ = other.ino_;
    other.held_ = false;
  }
  return *this;
}

}  // namespace relpos::io
