// The root-cause catalogue: per root-cause id (sim/root_cause.hpp), what a
// maintainer receiving the finding needs: a title naming the mechanism, a
// verdict, the upstream issues and PRs, who is affected, a workaround and the
// fix. The data lives in root_cause_catalogue.cpp, kept by hand from upstream
// threads and source; the finding pages under docs/findings/ are generated
// from it (`fsdpsim findings`), never edited.
#pragma once
#include <string>
#include <vector>

namespace fsdpsim {

enum class RootVerdict {
  FixedIn,      // bug, fixed in a release or merged PR
  FixProposed,  // bug, a fix PR is open
  Reported,     // bug, an issue exists, no fix
  Unreported,   // bug, no upstream issue or PR found
  Documented,   // documented (or designed) upstream behaviour
  Misuse,       // the user did something the libraries do not support
  Unreviewed,   // no catalogue entry yet: nobody has read it against upstream
};

// "bug, fixed in", "bug, fix proposed", ..., "unreviewed".
const char* root_verdict_name(RootVerdict v);
// The same in one word, for tables: "fixed", "fix-proposed", ..., "unreviewed".
const char* root_verdict_word(RootVerdict v);
// Counted by --fail-on-unreported: nobody upstream knows of it (or nobody here has looked).
inline bool is_unreported(RootVerdict v) { return v == RootVerdict::Unreported || v == RootVerdict::Unreviewed; }

struct RootCauseEntry {
  std::string id;
  std::string title;       // names the mechanism
  RootVerdict verdict = RootVerdict::Unreviewed;
  std::string verdict_detail;  // the release, PR, issue or document the verdict rests on
  std::vector<std::string> citations;  // "huggingface/peft#3872: what it says"
  std::string mechanism;   // one paragraph, citing upstream file::function
  std::string affected;    // who meets it
  std::string workaround;  // what a user can do today
  std::string fix;         // the function to change, the PR, or the profile switch that models it
  std::string fix_switch;  // "set_adapter_reshard=unmerge_first" where a profile switch models the fix
};

const std::vector<RootCauseEntry>& root_cause_catalogue();
// The entry for `id`, or an Unreviewed one naming the id when the catalogue has none.
RootCauseEntry root_cause_entry(const std::string& id);
// A root cause's file stem under docs/findings: its id with '/' as '.'.
std::string finding_stem(const std::string& root_cause_id);
// "bug, fix proposed huggingface/peft#3895" (the verdict with its detail).
std::string verdict_text(const RootCauseEntry& e);

}  // namespace fsdpsim
