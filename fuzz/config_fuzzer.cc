// libFuzzer target for the model config reader (ModelConfigFromJson in
// src/model/transformer.h), which reads config.json from untrusted
// checkpoints. Contract checked here:
//   - parsing the bytes as JSON and calling ModelConfigFromJson either returns
//     or throws relpos::Error; anything else is a bug;
//   - an accepted config survives ToJson -> ModelConfigFromJson unchanged.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/transformer.h"
#include "relpos/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // allow_exceptions = false: invalid JSON gives a "discarded" value.
  const nlohmann::json json =
      nlohmann::json::parse(data, data + size, nullptr,
                            /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  relpos::model::ModelConfig config;
  try {
    config = relpos::model::ModelConfigFromJson(json);
  } catch (const relpos::Error&) {
    return 0;  // rejected cleanly
  }
  // Accepted: the round trip must be exact (not caught: a throw is a bug).
  const nlohmann::json out = relpos::model::ToJson(config);
  const relpos::model::ModelConfig again =
      relpos::model::ModelConfigFromJson(out);
  if (relpos::model::ToJson(again) != out) __builtin_trap();
  return 0;
}
