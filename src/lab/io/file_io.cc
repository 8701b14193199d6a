// POSIX implementation of the crash-safe write and the bounded read.
#include "io/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/check.h"

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

// Closes a descriptor once (the destructor covers early exits by exception).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, returning close()'s errno (0 on success): close can report a
  // deferred write error (e.g. on NFS), which must not be ignored.
  int Close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

}  // namespace

void AtomicWriteFile(const std::string& path, std::string_view bytes) {
  RELPOS_CHECK_ARG(!path.empty(), "AtomicWriteFile: path must not be empty");
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
    RELPOS_THROW(IoError, "cannot create a temporary file next to '"
                              << path << "' (" << temp << "): " << ErrnoText(err));
  }
  Fd file(fd);

  // From here on, every failure removes the temporary file.
  auto fail = [&](const char* step, int err) {
    if (file.get() >= 0) file.Close();
    ::unlink(temp.c_str());
    RELPOS_THROW(IoError, "cannot write '" << path << "': " << step
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
    RELPOS_THROW(IoError, "cannot open directory '" << dir << "' to fsync '"
                                                     << path << "': "
                                                     << ErrnoText(err));
  }
  Fd dir_file(dir_fd);
  if (::fsync(dir_file.get()) != 0) {
    const int err = errno;
    // Some file systems do not support fsync on directories; that is not a
    // failure of this write.
    if (err != EINVAL && err != ENOTSUP) {
      RELPOS_THROW(IoError, "cannot fsync directory '" << dir << "' after writing '"
                                                       << path << "': "
                                                       << ErrnoText(err));
    }
  }
}

std::string ReadFileBounded(const std::string& path, int64_t max_bytes) {
  RELPOS_CHECK_ARG(max_bytes >= 0,
                   "ReadFileBounded: max_bytes must be >= 0 (got " << max_bytes
                                                                   << ")");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    RELPOS_THROW(IoError, "cannot open '" << path << "': " << ErrnoText(err));
  }
  Fd file(fd);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) {
    const int err = errno;
    RELPOS_THROW(IoError, "cannot stat '" << path << "': " << ErrnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    RELPOS_THROW(IoError, "'" << path << "' is not a regular file");
  }
  if (st.st_size > max_bytes) {
    RELPOS_THROW(IoError, "'" << path << "' is too large: " << st.st_size
                              << " bytes (limit " << max_bytes << ")");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(file.get(), out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      RELPOS_THROW(IoError, "cannot read '" << path << "': " << ErrnoText(err));
    }
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  // The file may also have grown since fstat; whatever is beyond the size we
  // checked is not read, so the bound holds either way.
  return out;
}

}  // namespace relpos::io
