// Binding of relpos::Inspect (include/relpos/lab/inspect.h) into
// relpos._relpos_ext: the per-row statistics of a checkpoint's relative
// tables as numpy arrays. relpos_ext.cc's module body calls BindInspect(m)
// once, after registering relpos's exception translator.
#ifndef RELPOS_PYTHON_SRC_INSPECT_EXT_H_
#define RELPOS_PYTHON_SRC_INSPECT_EXT_H_

#include <nanobind/nanobind.h>

namespace relpos {

void BindInspect(nanobind::module_& m);

}  // namespace relpos

#endif  // RELPOS_PYTHON_SRC_INSPECT_EXT_H_
