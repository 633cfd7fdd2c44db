// The root-cause catalogue's functions (root_cause_catalogue.hpp); its data is
// root_cause_table.cpp.
#include "sim/findings/root_cause_catalogue.hpp"

#include "model/vocab/enum_names.hpp"

namespace fsdpsim {

const char* root_verdict_name(RootVerdict v) {
  return enum_names<RootVerdict>("bug, fixed in", "bug, fix proposed", "bug, reported", "bug, regression in", "bug, unreported",
                                 "by design", "documented behaviour", "unsupported use", "misuse", "unreviewed")[v];
}

const char* root_verdict_word(RootVerdict v) {
  return enum_names<RootVerdict>("fixed", "fix-proposed", "reported", "regression", "unreported", "by-design", "documented",
                                 "unsupported", "misuse", "unreviewed")[v];
}

std::string finding_stem(const std::string& id) {
  std::string s = id;
  for (char& c : s)
    if (c == '/') c = '.';
  return s;
}

RootCauseEntry root_cause_entry(const std::string& id) {
  for (const auto& e : root_cause_catalogue())
    if (e.id == id) return e;
  RootCauseEntry e;
  e.id = id;
  e.title = "no catalogue entry: " + id;
  e.verdict = RootVerdict::Unreviewed;
  e.verdict_detail = "not yet read against upstream";
  return e;
}

std::string verdict_text(const RootCauseEntry& e) {
  std::string v = root_verdict_name(e.verdict);
  if (e.verdict == RootVerdict::Unreviewed || e.verdict_detail.empty()) return v;
  // "bug, fixed in X", "bug, regression in X"; the others read "verdict: why".
  const bool joined = e.verdict == RootVerdict::FixedIn || e.verdict == RootVerdict::FixProposed || e.verdict == RootVerdict::Reported ||
                      e.verdict == RootVerdict::Regression;
  return v + (joined ? " " : ": ") + e.verdict_detail;
}

std::string citation_text(const Citation& c) {
  if (c.check == CitationCheck::Tracker) return c.ref + " (" + c.state + "; verified in the tracker): " + c.says;
  return c.ref + ": " + c.says + " (from the reporter's thread; not independently verified)";
}

std::vector<std::string> citation_lines(const RootCauseEntry& e) {
  std::vector<std::string> out;
  for (const auto& c : e.citations) out.push_back(citation_text(c));
  return out;
}

std::string evidence_label(const SourceEvidence& s) {
  const UpstreamPin& p = upstream_pin(s.lib);
  return s.file + "::" + s.function + " (" + p.name + " " + p.tag + ")";
}

}  // namespace fsdpsim
