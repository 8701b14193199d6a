// Umbrella header: everything a user of the relpos library needs.
#ifndef RELPOS_RELPOS_H_
#define RELPOS_RELPOS_H_

#include "relpos/attention.h"
#include "relpos/cpu.h"
#include "relpos/error.h"
#include "relpos/params.h"
#include "relpos/position_schemes.h"
#include "relpos/rope.h"
#include "relpos/schemes.h"
#include "relpos/tensor_view.h"
#include "relpos/version.h"

// Link relpos::api for these (include/relpos/ is one API; the attention op
// alone needs only relpos::relpos). The folders mirror src/: data/, model/,
// train/ hold the plain types those layers work on, lab/ the API over them.
#include "relpos/data/metrics.h"
#include "relpos/data/parallel_text.h"
#include "relpos/model/batch.h"
#include "relpos/train/results.h"
#include "relpos/lab/bench.h"
#include "relpos/lab/compare.h"
#include "relpos/lab/config.h"
#include "relpos/lab/files.h"
#include "relpos/lab/generate.h"
#include "relpos/lab/inspect.h"
#include "relpos/lab/layer.h"
#include "relpos/lab/model.h"
#include "relpos/lab/training.h"

#endif  // RELPOS_RELPOS_H_
