// The project's own data: the regression corpus (corpus/regressions, corpus/divergences) and
// the finding pages and scripts (docs/findings). They are found in one place whatever the
// working directory: $FSDPSIM_DATA_DIR when set, else the source tree this fsdpsim was built
// from. Paths shown to the user go through shown_path, so each one printed exists from where
// the user stands.
#pragma once
#include <string>
#include <vector>

namespace fsdpsim {

// The environment variable that points fsdpsim at another checkout's data.
inline constexpr const char* kDataDirVariable = "FSDPSIM_DATA_DIR";

struct ProjectData {
  std::string root;    // absolute, normalized
  std::string origin;  // "FSDPSIM_DATA_DIR" or "the source tree fsdpsim was built from"
  std::string findings_dir() const { return root + "/docs/findings"; }
  // corpus/regressions and corpus/divergences, those that are directories.
  std::vector<std::string> corpus_dirs() const;
  bool has_findings() const;
  bool has_corpus() const { return !corpus_dirs().empty(); }
};

const ProjectData& project_data();

// `path` relative to the working directory when it lies under it ("docs/findings/x.md" from
// the repository root), else absolute: never a relative path that does not lead there.
std::string shown_path(const std::string& path);

// One line naming what is missing under the data root and which outputs go without it
// (`missing_corpus`: "the regression column"; `missing_findings`: "the repro column"), with
// the way to point fsdpsim at a checkout; "" when nothing asked for is missing.
std::string missing_data_line(const std::string& missing_corpus, const std::string& missing_findings);

}  // namespace fsdpsim
