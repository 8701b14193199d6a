// Bindings of relpos::Model and relpos::Training into relpos._relpos_ext
// (python/src/model_ext.cc). The module's NB_MODULE body (relpos_ext.cc)
// calls BindModel(m) once, after registering relpos's exception translator.
#ifndef RELPOS_PYTHON_SRC_MODEL_EXT_H_
#define RELPOS_PYTHON_SRC_MODEL_EXT_H_

#include <cstdint>
#include <string>

#include <nanobind/nanobind.h>

#include "relpos/lab/model.h"

namespace relpos {

void BindModel(nanobind::module_& m);

// The DecodeOptions of the bindings' keyword arguments (bos / eos -1: the
// model's own; threads 0: its training thread count; compute_type "float32"
// or "int8", anything else an InvalidArgument).
DecodeOptions MakeDecodeOptions(int64_t beam_size,
                                const std::string& length_penalty,
                                double alpha, double max_length_ratio,
                                int64_t max_length, int32_t bos, int32_t eos,
                                int threads,
                                const std::string& compute_type = "float32");

}  // namespace relpos

#endif  // RELPOS_PYTHON_SRC_MODEL_EXT_H_
