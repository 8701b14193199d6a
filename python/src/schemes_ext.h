// Bindings of the position-scheme registry (include/relpos/schemes.h) into
// relpos._relpos_ext, for python/relpos/_registry.py. The module's
// NB_MODULE body (relpos_ext.cc) calls BindSchemes(m) once, after
// registering relpos's exception translator, so InvalidArgument raised here
// becomes ValueError too.
#ifndef RELPOS_PYTHON_SRC_SCHEMES_EXT_H_
#define RELPOS_PYTHON_SRC_SCHEMES_EXT_H_

#include <nanobind/nanobind.h>

namespace relpos {

void BindSchemes(nanobind::module_& m);

}  // namespace relpos

#endif  // RELPOS_PYTHON_SRC_SCHEMES_EXT_H_
