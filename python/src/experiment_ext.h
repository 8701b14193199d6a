// Bindings of the experiment runner (include/relpos/lab/experiment.h) and
// of RunCompare (compare.h) into relpos._relpos_ext, for relpos.experiment
// (python/src/experiment_ext.cc). The module's NB_MODULE body
// (relpos_ext.cc) calls BindExperiment(m) once.
#ifndef RELPOS_PYTHON_SRC_EXPERIMENT_EXT_H_
#define RELPOS_PYTHON_SRC_EXPERIMENT_EXT_H_

#include <nanobind/nanobind.h>

namespace relpos {

void BindExperiment(nanobind::module_& m);

}  // namespace relpos

#endif  // RELPOS_PYTHON_SRC_EXPERIMENT_EXT_H_
