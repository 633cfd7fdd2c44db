// What `fsdpsim versions` checks on measured release verdicts (versions_cell
// records, as docs/findings/versions.jsonl keeps them):
// - each `patched` switch that models an upstream fix, against the release the
//   catalogue says first shipped it: that release must not reproduce the root
//   cause (confirmed), or the catalogue or the model is wrong (contradicted);
// - a new run against a kept one (`versions --compare OLD NEW`, the nightly):
//   a file whose verdict on a release changed, where both runs had one.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "sim/findings/finding_pages.hpp"
#include "sim/findings/root_cause_catalogue.hpp"

namespace fsdpsim {

struct FixCheck {
  std::string root_cause;
  std::string fix_switch;  // "set_adapter_reshard=unmerge_first"
  std::string status;      // "confirmed", "contradicted", "not in the matrix", "no verdict", "not shipped"
  std::string line;        // one line for the table's foot
};

// Root cause id -> the first PEFT release holding the fix its switch models
// ("0.22.0"), from the release's notes or tag. Kept by hand beside the catalogue.
const std::map<std::string, std::string>& fixes_shipped();

// One check per catalogue entry with a fix switch whose minimal sequence has a
// verdict among `cells` (root causes the run did not measure are left out).
std::vector<FixCheck> check_fixes(const std::vector<RootCauseEntry>& catalogue, const std::map<std::string, std::string>& shipped,
                                  const std::vector<ReleaseVerdict>& cells);

struct VerdictChange {
  std::string stem, release, was, now, detail;  // detail: the new run's reason or first failed expectation
};

// The (file stem, release) pairs both runs have a verdict for, whose verdict differs
// ("broken" counts as no verdict). A pair only one run has is not a change.
std::vector<VerdictChange> verdict_changes(const std::vector<ReleaseVerdict>& kept, const std::vector<ReleaseVerdict>& now);

}  // namespace fsdpsim
