// The finding pages under docs/findings/: one Markdown page per root cause and
// the index, generated from the catalogue (root_cause_catalogue.hpp), the
// root cause's minimal sequence (docs/findings/<stem>.seq, kept in the
// repository) and the corpus classes triage attributes to it. `fsdpsim
// findings` writes them; `--check` compares them with what is there.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "sim/findings/triage.hpp"

namespace fsdpsim {

// One triaged file: where it came from and its class.
struct TriagedFile {
  std::string file;
  TriageResult t;
};

// One cell of `fsdpsim versions --json` (a versions_cell record): a root cause's
// minimal sequence on one release set. The findings directory keeps the
// default matrix's run in versions.jsonl; the pages show it.
struct ReleaseVerdict {
  std::string stem;     // the sequence's file stem, finding_stem(root cause)
  std::string release;  // "peft==0.17.1"
  std::string verdict;  // "reproduces", "does not reproduce", "cannot run", "broken"
  std::string detail;
};
// The versions_cell records of a --json run (other records skipped); SourceError
// (file:line:1) on a line that is not a JSON object.
std::vector<ReleaseVerdict> parse_release_verdicts(const std::string& jsonl, const std::string& file);

// The release sets in the order the versions run met them (the matrix's order).
std::vector<std::string> release_order(const std::vector<ReleaseVerdict>& rs);
// "peft==0.17.1" -> "0.17.1"; a set pinning more keeps its other pins: "0.15.2 (accelerate==1.6.0)".
std::string release_label(const std::string& release);
// "affected: PEFT 0.15.2-0.21.2 (every release measured); does not reproduce on: ...; cannot run on: ...",
// for the sequence `stem`; "" when the matrix has no cell for it.
std::string releases_line(const std::string& stem, const std::vector<ReleaseVerdict>& rs);

struct FindingPages {
  // File name under the findings directory -> its content: <stem>.md, <stem>.seq, README.md.
  std::map<std::string, std::string> files;
  // Root causes the triaged files reach that have no catalogue entry (no page: listed in the index).
  std::vector<std::string> unreviewed;
};

// `kept`: the minimal sequences already under the findings directory (their root cause
// keeps the same file); `corpus`: every other triaged file (classes, and a minimal sequence
// for a root cause with none kept: the shortest). A catalogue entry reached by neither gets
// a page without a sequence.
// `releases`: versions.jsonl's cells (empty: no release section).
FindingPages render_finding_pages(const std::vector<TriagedFile>& kept, const std::vector<TriagedFile>& corpus,
                                  const std::vector<ReleaseVerdict>& releases = {});

}  // namespace fsdpsim
