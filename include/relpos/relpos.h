// Umbrella header: everything a user of the relpos library needs.
#ifndef RELPOS_RELPOS_H_
#define RELPOS_RELPOS_H_

#include "relpos/attention.h"
#include "relpos/error.h"
#include "relpos/params.h"
#include "relpos/position_schemes.h"
#include "relpos/rope.h"
#include "relpos/tensor_view.h"
#include "relpos/version.h"

// Link relpos::api for these (include/relpos/ is one API; the attention op
// alone needs only relpos::relpos).
#include "relpos/bench.h"
#include "relpos/compare.h"
#include "relpos/config.h"
#include "relpos/files.h"
#include "relpos/generate.h"
#include "relpos/inspect.h"
#include "relpos/layer.h"
#include "relpos/model.h"
#include "relpos/training.h"

#endif  // RELPOS_RELPOS_H_
