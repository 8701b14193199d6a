// Moved to relpos/data/parallel_text.h, the public headers of src/data/; this path stays so
// that existing includes compile. Include relpos/data/parallel_text.h.
#ifndef RELPOS_LAB_PARALLEL_TEXT_H_
#define RELPOS_LAB_PARALLEL_TEXT_H_

#include "relpos/data/parallel_text.h"  // IWYU pragma: export

#endif  // RELPOS_LAB_PARALLEL_TEXT_H_
