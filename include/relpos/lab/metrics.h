// Moved to relpos/data/metrics.h, the public headers of src/data/; this path stays so
// that existing includes compile. Include relpos/data/metrics.h.
#ifndef RELPOS_LAB_METRICS_H_
#define RELPOS_LAB_METRICS_H_

#include "relpos/data/metrics.h"  // IWYU pragma: export

#endif  // RELPOS_LAB_METRICS_H_
