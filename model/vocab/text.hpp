// Small text helpers shared by the printer, the observations and the spec checks.
#pragma once
#include <string>
#include <vector>

namespace fsdpsim {

// "a,b,c" (or with another separator); "" for no names.
inline std::string join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace fsdpsim
