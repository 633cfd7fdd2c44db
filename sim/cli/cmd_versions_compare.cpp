// `fsdpsim versions --compare KEPT NEW [--json]`: a matrix run (NEW, `versions
// ... --json` output) against the one kept (KEPT, docs/findings/versions.jsonl):
// every file whose verdict on a release changed where both had one, and the
// fix checks on NEW (sim/release/release_checks.hpp). Exit 1 on a change or a
// contradicted fix, 0 otherwise: the nightly's gate.
#include <fstream>
#include <iostream>
#include <sstream>

#include "model/vocab/input_file.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/versions_run.hpp"
#include "sim/release/release_checks.hpp"

namespace fsdpsim::cli {

namespace {

std::vector<ReleaseVerdict> read_verdicts(const std::string& path) {
  return parse_release_verdicts(read_input_file(path, kJsonInput), path);
}

}  // namespace

int print_changes_and_fixes(const std::vector<VerdictChange>& changes, const std::vector<FixCheck>& fixes, bool json) {
  int contradicted = 0;
  for (const auto& f : fixes) contradicted += f.status == "contradicted";
  for (const auto& c : changes) {
    if (json) {
      JsonRecord("versions_change").str("file", c.stem).str("release", c.release).str("was", c.was).str("now", c.now)
          .str("detail", c.detail).print(std::cout);
    } else {
      std::cout << "changed: " << c.stem << " on " << c.release << ": " << c.was << " -> " << c.now
                << (c.detail.empty() ? "" : " (" + c.detail + ")") << "\n";
    }
  }
  for (const auto& f : fixes) {
    if (json) JsonRecord("versions_fix").str("root_cause", f.root_cause).str("switch", f.fix_switch).str("status", f.status).str("line", f.line).print(std::cout);
    else std::cout << "fix check: " << f.line << "\n";
  }
  if (!json) std::cout << changes.size() << " changed, " << contradicted << " contradicted fix" << (contradicted == 1 ? "" : "es") << "\n";
  return changes.empty() && contradicted == 0 ? kClean : kFinding;
}

int cmd_versions_compare(const Args& a, const VersionsFlags& own) {
  if (a.positional.size() != 1)
    throw SourceError("<command line>", {}, "versions --compare KEPT expects one NEW file (a `versions --json` output), got " +
                                                 std::to_string(a.positional.size()) + " paths");
  const std::vector<ReleaseVerdict> kept = read_verdicts(own.compare), now = read_verdicts(a.positional.front());
  if (now.empty()) throw SourceError(a.positional.front(), {}, "expected versions_cell records, got none");
  return print_changes_and_fixes(verdict_changes(kept, now), check_fixes(root_cause_catalogue(), fixes_shipped(), now), a.json);
}

}  // namespace fsdpsim::cli
