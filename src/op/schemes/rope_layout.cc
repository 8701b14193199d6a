// The names of RoPE's two layouts (include/relpos/rope.h), apart from the
// kernels: configuration readers (the model config, the fuzzers) use them
// without linking the SIMD code.
#include <string>

#include "base/check.h"
#include "relpos/rope.h"

namespace relpos {

const char* RopeLayoutName(RopeLayout layout) {
  return layout == RopeLayout::kInterleaved ? "interleaved" : "split_halves";
}

RopeLayout ParseRopeLayout(const std::string& name, const char* what) {
  if (name == "split_halves") return RopeLayout::kSplitHalves;
  if (name == "interleaved") return RopeLayout::kInterleaved;
  RELPOS_THROW(InvalidArgument, what << " must be 'split_halves' or "
                                        "'interleaved' (got '"
                                     << name << "')");
}

}  // namespace relpos
