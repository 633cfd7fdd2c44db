// Reads back the JSON object print_json writes for one observation: the
// upstream backend's Python ranks report in that form.
#pragma once
#include <string>

#include "model/vocab/json_reader.hpp"
#include "model/vocab/observation.hpp"

namespace fsdpsim {

// Every field print_json writes: the ones it always writes are required, the
// ones it writes only when set (message, grads, index, deltas, saved,
// reload_diff) default as in Observation; unknown keys are ignored. On failure
// returns false with *error naming the field ("params[2].dtype: expected one of
// fp32, bf16, got 'f16'").
bool parse_observation_json(const std::string& line, Observation* out, std::string* error);
bool observation_from_json(const JsonValue& v, Observation* out, std::string* error);

}  // namespace fsdpsim
