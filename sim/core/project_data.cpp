#include "sim/core/project_data.hpp"

#include <cstdlib>
#include <filesystem>

namespace fsdpsim {

namespace fs = std::filesystem;

std::vector<std::string> ProjectData::corpus_dirs() const {
  std::vector<std::string> out;
  for (const char* d : {"/corpus/regressions", "/corpus/divergences"})
    if (std::error_code ec; fs::is_directory(root + d, ec)) out.push_back(root + d);
  return out;
}

bool ProjectData::has_findings() const {
  std::error_code ec;
  return fs::is_directory(findings_dir(), ec);
}

const ProjectData& project_data() {
  static const ProjectData data = [] {
    ProjectData d;
    const char* env = std::getenv(kDataDirVariable);
    d.origin = env && *env ? std::string("$") + kDataDirVariable : "the source tree fsdpsim was built from";
    std::error_code ec;
    const fs::path root = fs::absolute(env && *env ? env : FSDPSIM_SOURCE_DIR, ec).lexically_normal();
    d.root = root.string();
    if (d.root.size() > 1 && d.root.back() == '/') d.root.pop_back();
    return d;
  }();
  return data;
}

std::string shown_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  const fs::path cwd = fs::current_path(ec);
  if (ec) return abs.string();
  const fs::path rel = abs.lexically_relative(cwd);
  if (rel.empty() || *rel.begin() == "..") return abs.string();
  return rel.string();
}

std::string missing_data_line(const std::string& missing_corpus, const std::string& missing_findings) {
  const ProjectData& d = project_data();
  std::string what, without;
  if (!missing_corpus.empty() && !d.has_corpus()) what = "corpus/", without = missing_corpus;
  if (!missing_findings.empty() && !d.has_findings()) {
    what += std::string(what.empty() ? "" : " or ") + "docs/findings/";
    without += std::string(without.empty() ? "" : "; ") + missing_findings;
  }
  if (what.empty()) return "";
  return "no " + what + " under " + d.root + " (" + d.origin + "), so these are unavailable: " + without + ". Set " + kDataDirVariable +
         " to an fsdpsim checkout";
}

}  // namespace fsdpsim
