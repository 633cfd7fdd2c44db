// What `fsdpsim versions`' modes share (cmd_versions.cpp defines it): one file
// on one release set through the upstream backend, as a verdict.
#pragma once
#include <string>

#include "sim/cli/commands.hpp"
#include "sim/release/release_checks.hpp"
#include "sim/release/release_matrix.hpp"

namespace fsdpsim::cli {

struct Cell {
  std::string verdict;  // "reproduces", "does not reproduce", "cannot run", "broken"
  std::string detail;   // the reason, or the first failed expectation
  double seconds = 0;
};

// real_backend/upstream/matrix.txt, or $FSDPSIM_MATRIX_FILE.
std::string matrix_file();
// The named matrix of the matrix file (SourceError on a bad file or name).
std::vector<ReleaseSet> matrix_sets(const std::string& name);
// `file` on the pool (its Python already set to the release's environment).
Cell run_file(const std::string& file, RealPools& pools);
// `file` on a release set: its environment made or reused, then run_file.
// *env_seconds: the time release_env.py took. A set that does not install or
// import is `cannot run`. $FSDPSIM_FAKE_RELEASES (a test seam: lines
// "VERSION VERDICT[: DETAIL]") answers from that file instead, building and running nothing.
Cell run_on_release(const std::string& file, const std::string& set, const Args& a, double* env_seconds);

int cmd_versions_bisect(const Args& a, const VersionsFlags& own);   // cmd_versions_bisect.cpp
int cmd_versions_compare(const Args& a, const VersionsFlags& own);  // cmd_versions_compare.cpp
// The changes (versions_change) and fix checks (versions_fix) as lines or
// records; kFinding when something changed or a fix is contradicted.
int print_changes_and_fixes(const std::vector<VerdictChange>& changes, const std::vector<FixCheck>& fixes, bool json);

}  // namespace fsdpsim::cli
