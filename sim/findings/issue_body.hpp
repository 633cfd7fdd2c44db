// `fsdpsim findings --issue REPORT`: a draft issue body for one report
// (finding_reports.hpp), shaped like the owner's bug template (PEFT's and
// transformers': System Info / Who can help? / Reproduction / Expected
// behavior; PyTorch's: Describe the bug / Versions; accelerate's: System Info /
// Information / Tasks / Reproduction / Expected behavior). It speaks the
// libraries' words only: none of this project's vocabulary reaches it.
#pragma once
#include <string>
#include <vector>

#include "sim/findings/finding_pages.hpp"
#include "sim/findings/finding_reports.hpp"

namespace fsdpsim {

// The repro script run now (fsdpsim_upstream.issue_run), or why it was not.
struct ReproRun {
  bool ran = false;
  std::string command;  // "torchrun --nproc_per_node=2 repro.py"
  int exit_code = 0;
  bool timed_out = false;
  std::string output;   // stdout and stderr together, the tail
  std::string versions; // the collect_env-style summary
  std::string not_run;  // why it did not run ("" when it ran)
};

// Parses issue_run's JSON; a ReproRun with not_run set when the text is not that JSON.
ReproRun parse_repro_run(const std::string& json);

// The body: `script` is the repro's text ("" none kept), `script_name` its file name.
std::string issue_body(const FindingReport& r, const std::string& script, const std::string& script_name, const ReproRun& run,
                       const std::vector<ReleaseVerdict>& releases);

// This project's own words, which an issue body must not carry (a unit test greps every body).
const std::vector<std::string>& internal_words();

}  // namespace fsdpsim
