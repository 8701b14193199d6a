#include "relpos/lab/files.h"

#include "base/io/file_io.h"
#include "base/io/path_text.h"

namespace relpos {

void WriteFileAtomically(const std::string& path, std::string_view bytes) {
  io::AtomicWriteFile(path, bytes);
}

void CheckWritableFile(const std::string& path) { io::CheckReplaceable(path); }

std::string PathText(const std::string& path) { return io::PathText(path); }

struct FolderLock::Impl {
  io::FolderLock lock;
};

FolderLock::FolderLock(const std::string& dir)
    : impl_(std::make_unique<Impl>(Impl{io::FolderLock(dir)})) {}
FolderLock::~FolderLock() = default;
FolderLock::FolderLock(FolderLock&&) noexcept = default;
FolderLock& FolderLock::operator=(FolderLock&&) noexcept = default;

}  // namespace relpos
