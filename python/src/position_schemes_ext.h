// Bindings of the position-scheme pieces (include/relpos/position_schemes.h:
// T5 and clip bucket maps, ALiBi slopes; include/relpos/rope.h: RoPE) into
// relpos._relpos_ext. The module's NB_MODULE body (relpos_ext.cc) calls
// BindPositionSchemes(m) once, after registering relpos's exception
// translator, so InvalidArgument raised here becomes ValueError too.
#ifndef RELPOS_PYTHON_SRC_POSITION_SCHEMES_EXT_H_
#define RELPOS_PYTHON_SRC_POSITION_SCHEMES_EXT_H_

#include <nanobind/nanobind.h>

namespace relpos {

void BindPositionSchemes(nanobind::module_& m);

}  // namespace relpos

#endif  // RELPOS_PYTHON_SRC_POSITION_SCHEMES_EXT_H_
