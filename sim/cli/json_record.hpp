// One line of `--json` output: an object whose first key is "type", naming
// the record kind (docs/cli-json.schema.json lists every kind and its keys).
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace fsdpsim::cli {

class JsonRecord {
 public:
  explicit JsonRecord(const std::string& type);
  JsonRecord& str(const char* key, const std::string& v);
  JsonRecord& num(const char* key, int64_t v);
  JsonRecord& real(const char* key, double v);  // non-finite values print as null
  JsonRecord& flag(const char* key, bool v);
  JsonRecord& strs(const char* key, const std::vector<std::string>& v);
  JsonRecord& seeds(const char* key, const std::vector<uint64_t>& v);
  JsonRecord& counts(const char* key, const std::map<std::string, int64_t>& v);
  JsonRecord& raw(const char* key, const std::string& json);  // an already-encoded value
  // Writes the object and a newline to `os`; on std::cout a failed write is a WriteError.
  void print(std::ostream& os) const;

 private:
  JsonRecord& key(const char* k);
  std::string text_;
};

// `json` with `"type":"KIND"` added as its last member: run's records keep the
// key order they had before every record was typed.
std::string with_type_last(const std::string& json, const std::string& kind);

std::string json_quoted(const std::string& s);

}  // namespace fsdpsim::cli
