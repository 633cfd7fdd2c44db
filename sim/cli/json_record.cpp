#include "sim/cli/json_record.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "model/vocab/observation.hpp"
#include "sim/cli/output.hpp"

namespace fsdpsim::cli {

std::string json_quoted(const std::string& s) {
  std::ostringstream os;
  print_json_string(os, s);
  return os.str();
}

JsonRecord::JsonRecord(const std::string& type) : text_("{\"type\":" + json_quoted(type)) {}

JsonRecord& JsonRecord::key(const char* k) {
  text_ += ",";
  text_ += json_quoted(k);
  text_ += ":";
  return *this;
}

JsonRecord& JsonRecord::str(const char* k, const std::string& v) {
  key(k).text_ += json_quoted(v);
  return *this;
}

JsonRecord& JsonRecord::num(const char* k, int64_t v) {
  fmt::format_to(std::back_inserter(key(k).text_), "{}", v);
  return *this;
}

JsonRecord& JsonRecord::real(const char* k, double v) {
  key(k);
  if (!std::isfinite(v)) {
    text_ += "null";
    return *this;
  }
  fmt::format_to(std::back_inserter(text_), "{:.6g}", v);  // six significant digits, as printf's %.6g
  return *this;
}

JsonRecord& JsonRecord::flag(const char* k, bool v) {
  key(k).text_ += v ? "true" : "false";
  return *this;
}

JsonRecord& JsonRecord::strs(const char* k, const std::vector<std::string>& v) {
  key(k).text_ += "[";
  for (size_t i = 0; i < v.size(); ++i) fmt::format_to(std::back_inserter(text_), "{}{}", i ? "," : "", json_quoted(v[i]));
  text_ += "]";
  return *this;
}

JsonRecord& JsonRecord::seeds(const char* k, const std::vector<uint64_t>& v) {
  key(k).text_ += "[";
  for (size_t i = 0; i < v.size(); ++i) fmt::format_to(std::back_inserter(text_), "{}{}", i ? "," : "", v[i]);
  text_ += "]";
  return *this;
}

JsonRecord& JsonRecord::counts(const char* k, const std::map<std::string, int64_t>& v) {
  key(k).text_ += "{";
  bool comma = false;
  for (const auto& [name, n] : v) {
    fmt::format_to(std::back_inserter(text_), "{}{}:{}", comma ? "," : "", json_quoted(name), n);
    comma = true;
  }
  text_ += "}";
  return *this;
}

JsonRecord& JsonRecord::raw(const char* k, const std::string& json) {
  key(k).text_ += json;
  return *this;
}

void JsonRecord::print(std::ostream& os) const {
  errno = 0;
  os << text_ << "}\n";
  if (&os == &std::cout) check_stdout(errno);
}

std::string with_type_last(const std::string& json, const std::string& kind) {
  const size_t close = json.find_last_of('}');
  if (close == std::string::npos) return json;
  return fmt::format("{},\"type\":{}{}", json.substr(0, close), json_quoted(kind), json.substr(close));
}

}  // namespace fsdpsim::cli
