// Bindings of relpos::Model and relpos::Training into relpos._relpos_ext
// (python/src/model_ext.cc). The module's NB_MODULE body (relpos_ext.cc)
// calls BindModel(m) once, after registering relpos's exception translator.
#ifndef RELPOS_PYTHON_SRC_MODEL_EXT_H_
#define RELPOS_PYTHON_SRC_MODEL_EXT_H_

#include <nanobind/nanobind.h>

namespace relpos {

void BindModel(nanobind::module_& m);

}  // namespace relpos

#endif  // RELPOS_PYTHON_SRC_MODEL_EXT_H_
