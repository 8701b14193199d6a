// Small, careful file helpers: crash-safe writes and size-bounded reads.
#ifndef RELPOS_SRC_LAB_IO_FILE_IO_H_
#define RELPOS_SRC_LAB_IO_FILE_IO_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace relpos::io {

// Writes `bytes` to `path` atomically: a temporary file in the same directory
// (so rename() cannot cross file systems), write everything, fsync it, rename
// it over `path`, then fsync the directory so the rename itself is durable.
// After a crash `path` holds either the old or the new contents, never a mix.
// IoError naming the path and the failing step (with strerror); the temporary
// file is removed on failure, and `path` is left untouched.
void AtomicWriteFile(const std::string& path, std::string_view bytes);

// Reads the whole regular file at `path`. IoError if it cannot be opened or
// read, is not a regular file, or is larger than `max_bytes` (checked before
// reading anything).
std::string ReadFileBounded(const std::string& path, int64_t max_bytes);

}  // namespace relpos::io

#endif  // RELPOS_SRC_LAB_IO_FILE_IO_H_
