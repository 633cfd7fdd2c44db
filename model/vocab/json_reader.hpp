// A small JSON reader: objects (keys kept in order), arrays, strings with
// escapes (\uXXXX, surrogate pairs as UTF-8), numbers, true, false, null.
// Enough for the observation lines and the upstream pool's control lines.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fsdpsim {

struct JsonValue {
  enum class Kind : uint8_t { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  bool integral = false;  // the number was written without fraction or exponent and fits int64
  int64_t integer = 0;    // its value when integral
  std::string text;       // String
  std::vector<JsonValue> items;                             // Array
  std::vector<std::pair<std::string, JsonValue>> members;  // Object, in order

  // The member named key (the first one), nullptr when absent or not an object.
  const JsonValue* find(const std::string& key) const;
};

const char* json_kind_name(JsonValue::Kind k);  // "null", "bool", "number", "string", "array", "object"

// Parses one JSON text (surrounding whitespace allowed, nothing else after it).
// On failure returns false and sets *error to "offset N: what was expected".
bool parse_json(const std::string& text, JsonValue* out, std::string* error);

}  // namespace fsdpsim
