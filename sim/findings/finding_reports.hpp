// Reports: a level above root causes. One report per upstream fix site and
// owner library, listing its entry points (the root causes whose fix is that
// one change) and the alternative fix site in another library where there is
// one: what a maintainer files as one issue. The table lives in
// finding_reports.cpp; every catalogue entry belongs to exactly one report.
#pragma once
#include <string>
#include <vector>

#include "sim/findings/root_cause_catalogue.hpp"

namespace fsdpsim {

struct FindingReport {
  std::string id;                          // "flag-on-copy"; pages: docs/findings/report-<id>.md
  UpstreamLibrary owner = UpstreamLibrary::Peft;
  std::string title;                       // the issue title: names the mechanism
  SourceEvidence fix_site;                 // where the owner's fix goes
  std::string alternative;                 // the other library's fix site ("" none)
  std::vector<std::string> entry_points;   // root-cause ids (catalogue entries)
  std::string expected, actual;            // one sentence each, for the issue body
  std::string repro;                       // the entry point whose script the issue shows
};

// What to do with a report upstream.
enum class ReportAction {
  File,      // a bug no upstream thread covers at some entry point: file it
  FollowUp,  // bugs every entry point of which has a thread (reported, fix proposed): add to it
  Closed,    // fixed upstream, or not a bug (by design, documented, unsupported use, misuse)
};
const char* report_action_word(ReportAction a);  // "file", "follow-up", "none"

const std::vector<FindingReport>& finding_reports();
// The report listing root cause `id` (nullptr: none does).
const FindingReport* report_of(const std::string& root_cause_id);
// The report named `id` (nullptr: none).
const FindingReport* find_report(const std::string& id);
ReportAction report_action(const FindingReport& r);
// The verdict that decides the report's action: its first entry point's unreported (or regression)
// verdict when it has one, else the most actionable over its entry points (the catalogue's order).
RootVerdict report_verdict(const FindingReport& r);
// "report-flag-on-copy.md".
std::string report_page_name(const FindingReport& r);

// A PEFT-side report's candidate fix: a patch against the pinned PEFT kept beside the pages
// (docs/findings/<id>.patch, checked by ctest findings_patches), or why none is written.
struct CandidateFix {
  bool patch = false;    // docs/findings/<id>.patch exists
  std::string why_none;  // no patch: why, and where the fix would go instead
};
// nullptr: the report is not PEFT's, or is closed (nothing to fix).
const CandidateFix* candidate_fix(const FindingReport& r);
// "<id>.patch".
std::string candidate_patch_name(const FindingReport& r);

}  // namespace fsdpsim
