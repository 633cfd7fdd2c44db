// Release sets and matrices (sim/release/release_matrix.hpp). The same set syntax is
// parsed by release_env.py, which builds the environment a set names.
#include "sim/release/release_matrix.hpp"

#include <cctype>
#include <filesystem>
#include <set>
#include <sstream>

namespace fsdpsim {

const char* const kReleasePackages[3] = {"peft", "accelerate", "transformers"};

namespace {

bool is_version(const std::string& v) {
  // digits and dots, optionally a pre/post-release tail (0.18.0rc1, 1.0.post1)
  if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0]))) return false;
  for (char c : v)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.') return false;
  return v.back() != '.';
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

std::string ReleaseSet::peft() const { return "peft " + (path.empty() ? pins.at("peft") : path); }

std::string ReleaseSet::text() const {
  if (!path.empty()) return "peft=" + path;
  std::string out = "peft==" + pins.at("peft");
  for (const auto& [name, version] : pins)  // std::map: by name
    if (name != "peft") out += "," + name + "==" + version;
  return out;
}

ReleaseSet parse_release_set(const std::string& text, const std::string& file, SourcePos pos) {
  ReleaseSet out;
  if (text.compare(0, 5, "peft=") == 0 && text.compare(0, 6, "peft==") != 0) {
    // release_env.py builds it with `pip install PATH`; the path made absolute names one environment
    const std::string path = text.substr(5);
    std::error_code ec;
    // A FIFO or a device is neither a checkout nor a wheel (pip would block on or read it forever).
    const auto type = std::filesystem::status(path, ec).type();
    if (path.empty() || (type != std::filesystem::file_type::directory && type != std::filesystem::file_type::regular))
      throw SourceError(file, {pos.line, pos.column + 5},
                        "expected peft==VERSION, or peft=PATH naming an existing PEFT checkout directory or wheel file, got '" + path + "'");
    out.path = std::filesystem::absolute(path).lexically_normal().string();
    return out;
  }
  size_t start = 0;
  std::string names = "peft, accelerate, transformers";
  while (true) {
    size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const SourcePos at{pos.line, pos.column + static_cast<int>(start)};
    size_t eq = part.find("==");
    if (eq == std::string::npos) throw SourceError(file, at, "expected NAME==VERSION (NAME one of " + names + "), got '" + part + "'");
    std::string name = trim(part.substr(0, eq)), version = trim(part.substr(eq + 2));
    for (char& c : name) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bool known = false;
    for (const char* p : kReleasePackages) known = known || name == p;
    if (!known) throw SourceError(file, at, "expected one of " + names + ", got '" + trim(part.substr(0, eq)) + "'");
    if (!is_version(version)) throw SourceError(file, at, "expected a release number like 0.17.1 after " + name + "==, got '" + version + "'");
    if (out.pins.count(name)) throw SourceError(file, at, "expected each package once, got " + name + " again");
    out.pins[name] = version;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (!out.pins.count("peft")) throw SourceError(file, pos, "expected a set that names peft==VERSION, got '" + text + "'");
  return out;
}

std::vector<ReleaseMatrix> parse_matrix_file(const std::string& text, const std::string& file) {
  std::vector<ReleaseMatrix> out;
  std::istringstream in(text);
  std::string raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    std::string s = raw.substr(0, raw.find('#'));
    const size_t col = s.find_first_not_of(" \t");
    s = trim(s);
    if (s.empty()) continue;
    const SourcePos at{line, static_cast<int>(col) + 1};
    if (s.compare(0, 7, "matrix ") == 0) {
      const std::string name = trim(s.substr(7));
      for (const auto& m : out)
        if (m.name == name) throw SourceError(file, at, "expected each matrix name once, got '" + name + "' again");
      if (name.empty() || name.find_first_of(" \t") != std::string::npos)
        throw SourceError(file, at, "expected `matrix NAME` (one word), got '" + s + "'");
      out.push_back({name, {}});
      continue;
    }
    if (out.empty()) throw SourceError(file, at, "expected `matrix NAME` before the first release set, got '" + s + "'");
    ReleaseSet set = parse_release_set(s, file, at);
    for (const auto& other : out.back().sets)
      if (other.text() == set.text()) throw SourceError(file, at, "expected each set once in matrix " + out.back().name + ", got " + set.text() + " again");
    out.back().sets.push_back(std::move(set));
  }
  for (const auto& m : out)
    if (m.sets.empty()) throw SourceError(file, {}, "expected at least one release set in matrix " + m.name);
  return out;
}

const ReleaseMatrix& find_matrix(const std::vector<ReleaseMatrix>& all, const std::string& name, const std::string& file) {
  std::string names;
  for (const auto& m : all) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  throw SourceError("<command line>", {}, "--matrix expects one of " + file + "'s matrices (" + names + "), got '" + name + "'");
}

}  // namespace fsdpsim
