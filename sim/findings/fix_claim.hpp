// Fix claims derived from a re-run. Wherever fsdpsim says that a profile switch
// "removes" a finding (the report's box, triage's verdict and `# fix:` line, the
// hunt's page, the finding pages), the file was run again on the model with that
// switch and showed no finding of the same root cause; otherwise the findings that
// remain are named. A finding is compared by its root cause (sim/findings/root_cause.hpp),
// not by its op or status: a switch that moves the same corruption to an earlier
// op has not fixed it.
#pragma once
#include <string>
#include <vector>

#include "model/spec/spec_checks.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

// The backend every claim below is checked on (the model: deterministic and fast).
inline constexpr const char* kFixClaimBackend = "model";
// The words a finding page uses for a switch the re-run bore out: "`fsdpsim run X.seq --set S`
// shows the finding gone"; `fsdpsim findings --check` re-runs every page that says them.
inline constexpr const char* kFixClaimShown = "shows the finding gone";

struct FixRerun {
  std::string setting;             // "set_adapter_reshard=unmerge_first", or "profile patched"
  std::string root_cause;          // the id checked
  std::vector<Finding> remaining;  // the re-run's findings of that root cause
  bool valid = true;               // false: the setting does not apply (unknown switch or value)
  bool removes() const { return valid && remaining.empty(); }
};

// The findings of `f`'s model run that `root_cause` explains.
std::vector<Finding> root_cause_findings(const SeqFile& f, const std::string& root_cause);

// `f` with switch `setting` ("name=value") overriding any `set` line of the same switch,
// run on the model; the findings attributed to `root_cause` that remain.
FixRerun rerun_with_switch(const SeqFile& f, const std::string& setting, const std::string& root_cause);
// The same under the `patched` profile (every modelled fix at once), the file's own
// `set` lines dropped.
FixRerun rerun_patched(const SeqFile& f, const std::string& root_cause);

// The first switch (in switch-table order) that, set to its `patched` value, removes every
// finding of `root_cause` from `f`; "" when none does. *runs counts the model runs.
std::string fixing_switch(const SeqFile& f, const std::string& root_cause, int* runs = nullptr);

// The findings that remain, one "S2 step 4 rank 0: ..." per distinct text up to `max`,
// then "and N more": "S2 step 4 rank 0: layer lin0 ...; S2 step 4 rank 1: ... (and 2 more)".
std::string remaining_text(const FixRerun& r, size_t max = 2);

}  // namespace fsdpsim
