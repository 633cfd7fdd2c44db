// Markdown for reports (finding_reports.hpp): a page per report under
// docs/findings/ linking its entry points' pages, the reports section that
// heads docs/findings/README.md, and the evidence list every page shares.
#pragma once
#include <string>
#include <vector>

#include "sim/findings/finding_pages.hpp"
#include "sim/findings/finding_reports.hpp"

namespace fsdpsim {

// "**Evidence** ...:\n- [file::function](link at the pinned tag): what it shows\n...\n\n"; "" for none.
std::string evidence_list(const std::vector<SourceEvidence>& evidence);
// docs/findings/report-<id>.md.
std::string report_page(const FindingReport& r, const std::vector<ReleaseVerdict>& releases);
// "23 reports over 28 root causes: 9 file, ...\n\n| report | owner | ... |\n...": the index's first section.
std::string reports_index();
// "23 reports over 28 root causes (12 to file, 5 to follow up, 6 closed)": the one line README,
// docs/findings/README.md and the hunt agree on.
std::string reports_count_line();

}  // namespace fsdpsim
