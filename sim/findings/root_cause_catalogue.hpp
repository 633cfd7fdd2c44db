// The root-cause catalogue: per root-cause id (sim/findings/root_cause.hpp), what a
// maintainer receiving the finding needs: a title naming the mechanism, a
// verdict with the pinned source lines it rests on, the upstream issues and
// PRs with how each was checked, who is affected, a workaround and the fix.
// The data lives in root_cause_table.cpp, kept by hand from the trackers and
// the pinned releases' installed source; the finding pages under
// docs/findings/ are generated from it (`fsdpsim findings`), never edited.
// Root causes sharing one upstream fix site are grouped into reports
// (finding_reports.hpp).
#pragma once
#include <string>
#include <vector>

#include "sim/findings/upstream_library.hpp"

namespace fsdpsim {

// What a maintainer would answer. The order is the catalogue's sort order.
enum class RootVerdict {
  FixedIn,         // bug, fixed in a release or merged PR
  FixProposed,     // bug, a fix PR is open
  Reported,        // bug, an issue exists, no fix
  Regression,      // bug that a named release introduced (the release matrix shows it), no upstream report found
  Unreported,      // bug, no upstream issue or PR found
  ByDesign,        // the library means it (a maintainer or a merged PR defines it so)
  Documented,      // documented upstream behaviour (a docstring or the docs say it)
  UnsupportedUse,  // a use the library does not support (the supported path behaves)
  Misuse,          // the user did something outside the libraries' contract
  Unreviewed,      // no catalogue entry yet: nobody has read it against upstream
};

// "bug, fixed in", "bug, fix proposed", ..., "unreviewed".
const char* root_verdict_name(RootVerdict v);
// The same in one word, for tables: "fixed", "fix-proposed", ..., "unreviewed".
const char* root_verdict_word(RootVerdict v);
// Counted by --fail-on-unreported: a bug nobody upstream knows of (a regression found here
// included), or a root cause nobody here has read against upstream.
inline bool is_unreported(RootVerdict v) {
  return v == RootVerdict::Unreported || v == RootVerdict::Regression || v == RootVerdict::Unreviewed;
}
// A bug a maintainer would fix (the verdicts before ByDesign).
inline bool is_bug(RootVerdict v) { return v < RootVerdict::ByDesign; }

// How a cited thread was checked.
enum class CitationCheck {
  Tracker,         // looked up in the issue tracker: its state there is recorded
  ReporterThread,  // known only from a reporter's thread that names it; not independently verified
};

struct Citation {
  std::string ref;    // "huggingface/peft#3565"
  CitationCheck check = CitationCheck::ReporterThread;
  std::string state;  // Tracker: the state found there ("merged", "open", "closed"); ReporterThread: empty
  std::string says;   // what it shows for this root cause
};

// One pinned source line a verdict rests on: the function in the installed release.
struct SourceEvidence {
  UpstreamLibrary lib = UpstreamLibrary::Peft;
  std::string file;      // relative to the installed package root: "peft/tuners/tuners_utils.py"
  std::string function;  // "BaseTunerLayer.delete_adapter"; its last name is a `def` in the file
  std::string shows;     // what the line shows
};

struct RootCauseEntry {
  std::string id;
  std::string title;       // names the mechanism
  RootVerdict verdict = RootVerdict::Unreviewed;
  std::string verdict_detail;              // the release, PR, issue or document the verdict rests on
  std::vector<SourceEvidence> evidence;    // the pinned source lines the verdict rests on
  std::vector<Citation> citations;         // the upstream threads, each with how it was checked
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
// "huggingface/peft#3565 (merged; verified in the tracker): what it says", or, for a thread
// known only from a reporter: "huggingface/peft#3872: what it says (from the reporter's thread;
// not independently verified)".
std::string citation_text(const Citation& c);
std::vector<std::string> citation_lines(const RootCauseEntry& e);
// "peft/tuners/tuners_utils.py::BaseTunerLayer.delete_adapter (PEFT v0.21.2)".
std::string evidence_label(const SourceEvidence& s);

}  // namespace fsdpsim
