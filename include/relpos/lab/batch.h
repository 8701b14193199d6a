// Moved to relpos/model/batch.h, the public headers of src/model/; this path stays so
// that existing includes compile. Include relpos/model/batch.h.
#ifndef RELPOS_LAB_BATCH_H_
#define RELPOS_LAB_BATCH_H_

#include "relpos/model/batch.h"  // IWYU pragma: export

#endif  // RELPOS_LAB_BATCH_H_
