// Small text helpers shared by the printer, the observations and the spec checks.
#pragma once
#include <string>
#include <vector>

namespace fsdpsim {

// "a,b,c" (or with another separator); "" for no names. Texts or Names (model/vocab/name.hpp).
template <typename T>
std::string join(const std::vector<T>& v, const char* sep = ",") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += static_cast<const std::string&>(v[i]);
  }
  return out;
}

// join's inverse: "a,,b" gives {"a", "", "b"}, "" gives {""} (callers reject empty items).
inline std::vector<std::string> split(const std::string& text, char sep = ',') {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at; (at = text.find(sep, start)) != std::string::npos; start = at + 1) out.push_back(text.substr(start, at - start));
  out.push_back(text.substr(start));
  return out;
}

}  // namespace fsdpsim
