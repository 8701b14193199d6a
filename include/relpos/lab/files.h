// File writing as relpos does it for checkpoints and results.
#ifndef RELPOS_LAB_FILES_H_
#define RELPOS_LAB_FILES_H_

#include <string>
#include <string_view>

namespace relpos {

// Writes `bytes` to `path` atomically (temporary file in the same folder,
// fsync, rename, fsync of the folder): after a crash `path` holds the old or
// the new contents, never a mix. IoError naming the path and the step.
void WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace relpos

#endif  // RELPOS_LAB_FILES_H_
