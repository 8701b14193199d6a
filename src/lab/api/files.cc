#include "relpos/lab/files.h"

#include "io/file_io.h"

namespace relpos {

void WriteFileAtomically(const std::string& path, std::string_view bytes) {
  io::AtomicWriteFile(path, bytes);
}

}  // namespace relpos
