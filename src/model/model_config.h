// The settings of model::ModelConfig (declared in model/transformer.h), one
// declaration each: JSON key, command-line flag, help and valid values. The
// JSON reader/writer and Validate in model_config.cc, the command-line flags
// and docs/settings.md are all derived from ModelSettings().
#ifndef RELPOS_SRC_MODEL_MODEL_CONFIG_H_
#define RELPOS_SRC_MODEL_MODEL_CONFIG_H_

#include <vector>

#include "base/io/settings.h"
#include "model/transformer.h"

namespace relpos::model {

// Flag group of the position settings (a verb that sweeps them leaves the
// group out).
inline constexpr const char* kPositionGroup = "position";

const std::vector<io::Setting<ModelConfig>>& ModelSettings();

// "--terms": both|key|value|neither <-> key_term, value_term.
void ApplyTerms(const std::string& terms, ModelConfig* config);
std::string TermsName(const ModelConfig& config);

}  // namespace relpos::model

#endif  // RELPOS_SRC_MODEL_MODEL_CONFIG_H_
