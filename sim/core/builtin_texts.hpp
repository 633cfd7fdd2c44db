// The built-in scenario files (sim/core/builtin/NAME.seq) compiled into the binary by
// sim/core/builtin_texts.cmake: each as kBuiltin_NAME, and all of them in name order.
#pragma once

namespace fsdpsim {

struct BuiltinText {
  const char* name;  // the file's name without .seq
  const char* text;  // the whole file
};

extern const BuiltinText kBuiltinTexts[];
extern const int kBuiltinTextCount;
extern const char kBuiltin_seed000_merged_raf_false[];  // the default scenario (default_scenario.cpp)

}  // namespace fsdpsim
