// Binding of the translation data and metrics (include/relpos/lab/
// metrics.h, parallel_text.h) into relpos._relpos_ext, for relpos.translate
// (python/relpos/translate.py). relpos_ext.cc's module body calls
// BindTranslate(m) once, after registering relpos's exception translator.
#ifndef RELPOS_PYTHON_SRC_TRANSLATE_EXT_H_
#define RELPOS_PYTHON_SRC_TRANSLATE_EXT_H_

#include <nanobind/nanobind.h>

namespace relpos {

void BindTranslate(nanobind::module_& m);

}  // namespace relpos

#endif  // RELPOS_PYTHON_SRC_TRANSLATE_EXT_H_
