#include "sim/findings/issue_body.hpp"

#include <fmt/format.h>

#include <set>

#include "model/vocab/json_reader.hpp"
#include "model/vocab/profile.hpp"

namespace fsdpsim {
namespace {

std::string json_text(const JsonValue& v, const char* key) {
  const JsonValue* x = v.find(key);
  return x && x->kind == JsonValue::Kind::String ? x->text : "";
}

// The report's source lines and threads over its entry points, each once, in order.
std::vector<SourceEvidence> report_evidence(const FindingReport& r) {
  std::vector<SourceEvidence> out;
  std::set<std::string> seen;
  for (const auto& id : r.entry_points)
    for (const auto& s : root_cause_entry(id).evidence)
      if (seen.insert(s.file + "::" + s.function).second) out.push_back(s);
  return out;
}

std::vector<Citation> report_citations(const FindingReport& r) {
  std::vector<Citation> out;
  std::set<std::string> seen;
  for (const auto& id : r.entry_points)
    for (const auto& c : root_cause_entry(id).citations)
      if (seen.insert(c.ref).second) out.push_back(c);
  return out;
}

std::string versions_block(const ReproRun& run) {
  if (!run.versions.empty()) return "```\n" + run.versions + (run.versions.back() == '\n' ? "" : "\n") + "```\n";
  std::string pins;
  for (UpstreamLibrary lib : {UpstreamLibrary::Torch, UpstreamLibrary::Peft, UpstreamLibrary::Accelerate, UpstreamLibrary::Transformers})
    pins += fmt::format("{} {}\n", upstream_pin(lib).package, upstream_pin(lib).version);
  return "Pinned releases (the environment could not be queried now):\n```\n" + pins + "```\n";
}

std::string reproduction(const FindingReport& r, const std::string& script, const std::string& script_name, const ReproRun& run) {
  std::string md;
  if (script.empty()) return "No standalone script is kept for this report yet.\n";
  md += fmt::format("`{}`:\n\n```python\n{}{}```\n\n", script_name, script, script.back() == '\n' ? "" : "\n");
  if (!run.ran) return md + fmt::format("It could not be run for this draft: {}. Run it before filing.\n", run.not_run);
  // A plain `python` repro starts no process group: gloo is torchrun's.
  const char* where = run.command.rfind("torchrun", 0) == 0 ? "on CPU/gloo" : "on CPU";
  const std::string how = run.timed_out ? fmt::format("`{}` {} did not finish in the time given and was stopped; its output until then:", run.command, where)
                                        : fmt::format("`{}` {} exits {}; its output now:", run.command, where, run.exit_code);
  md += fmt::format("{}\n\n```\n{}{}```\n", how, run.output, run.output.empty() || run.output.back() == '\n' ? "" : "\n");
  return md;
}

std::string details(const FindingReport& r, const std::vector<ReleaseVerdict>& releases) {
  std::string md;
  const RootCauseEntry main = root_cause_entry(r.repro);
  md += "**Mechanism.** " + main.mechanism + "\n\n";
  if (r.entry_points.size() > 1) {
    md += "The same change covers every path that reaches it:\n";
    for (const auto& id : r.entry_points) md += "- " + root_cause_entry(id).title + "\n";
    md += "\n";
  }
  md += fmt::format("**Where to fix it.** [`{}::{}`]({}): {}.", r.fix_site.file, r.fix_site.function,
                    pinned_link(r.fix_site.lib, r.fix_site.file), r.fix_site.shows);
  if (!r.alternative.empty()) md += " Alternatively, " + r.alternative + ".";
  if (const CandidateFix* c = candidate_fix(r); c && c->patch)
    md += fmt::format("\n\n**Candidate patch.** `{}` (against PEFT {}, attached) makes the repro above exit 0. It is a "
                      "candidate for a maintainer to own and rework, not a reviewed change.",
                      candidate_patch_name(r), upstream_pin(UpstreamLibrary::Peft).version);
  md += "\n\n**Source at the pinned releases:**\n";
  for (const auto& s : report_evidence(r))
    md += fmt::format("- [`{}::{}`]({}) ({} {}): {}\n", s.file, s.function, pinned_link(s.lib, s.file), upstream_pin(s.lib).name,
                      upstream_pin(s.lib).tag, s.shows);
  const std::vector<Citation> cites = report_citations(r);
  md += "\n**Related threads:**\n";
  for (const auto& c : cites) md += "- " + citation_text(c) + "\n";
  if (cites.empty()) md += "- none found\n";
  const std::string rel = releases_line(finding_stem(r.repro), releases);
  md += "\n**Affected releases** (the same check on each PEFT release): " + (rel.empty() ? std::string("not measured") : rel.substr(rel.find(':') + 2)) + ".\n";
  return md;
}

}  // namespace

const std::vector<std::string>& internal_words() {
  static const std::vector<std::string> words = [] {
    std::vector<std::string> w = {"S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "fsdpsim", "signature", "blame",
                                  "profile switch", "--set ", "fix_switch", ".seq", "minimal sequence", "root cause",
                                  "corpus", "seed 00", "@R", "upstream backend", "model backend", "spec "};
    for (const SwitchInfo& s : switch_table()) w.emplace_back(s.name);  // every switch, one added later too
    return w;
  }();
  return words;
}

ReproRun parse_repro_run(const std::string& text) {
  ReproRun run;
  JsonValue v;
  std::string err;
  if (!parse_json(text, &v, &err) || v.kind != JsonValue::Kind::Object) {
    run.not_run = "the runner's result is not JSON (" + err + ")";
    return run;
  }
  run.not_run = json_text(v, "not_run");
  run.ran = run.not_run.empty();
  run.command = json_text(v, "command");
  run.output = json_text(v, "output");
  run.versions = json_text(v, "versions");
  if (const JsonValue* c = v.find("exit_code"); c && c->integral) run.exit_code = static_cast<int>(c->integer);
  if (const JsonValue* t = v.find("timed_out"); t && t->kind == JsonValue::Kind::Bool) run.timed_out = t->boolean;
  return run;
}

std::string issue_body(const FindingReport& r, const std::string& script, const std::string& script_name, const ReproRun& run,
                       const std::vector<ReleaseVerdict>& releases) {
  std::string md;
  md += fmt::format("<!-- Title: {} -->\n\n", r.title);
  md += "> **Draft.** Generated from an automated test harness for a person to read, run and own before filing; "
        "nothing here was filed or reviewed by a maintainer.\n\n";
  switch (report_action(r)) {  // whether to file at all
    case ReportAction::File:
      break;
    case ReportAction::FollowUp: {
      std::string threads;
      for (const auto& id : r.entry_points) {
        const RootCauseEntry e = root_cause_entry(id);
        if (is_bug(e.verdict)) threads += (threads.empty() ? "" : "; ") + verdict_text(e);
      }
      md += "> **An upstream thread already covers this** (" + threads + "): add to it rather than filing a new issue.\n\n";
      break;
    }
    case ReportAction::Closed:
      md += "> **Not a bug to file** (" + verdict_text(root_cause_entry(r.repro)) + "); this body is kept for reference.\n\n";
      break;
  }
  const std::string summary = fmt::format("**Expected:** {}\n\n**Actual:** {}\n", r.expected, r.actual);
  const std::string repro = reproduction(r, script, script_name, run);
  const std::string more = details(r, releases);
  switch (r.owner) {
    case UpstreamLibrary::Torch:
      md += "### 🐛 Describe the bug\n\n" + summary + "\n" + repro + "\n" + more + "\n### Versions\n\n" + versions_block(run);
      break;
    case UpstreamLibrary::Accelerate:
      md += "### System Info\n\n" + versions_block(run) + "\n### Information\n\n- [ ] The official example scripts\n"
            "- [x] My own modified scripts\n\n### Tasks\n\n- [ ] One of the scripts in the examples/ folder\n"
            "- [x] My own task or dataset (give details below)\n\n### Reproduction\n\n" + repro + "\n" + more +
            "\n### Expected behavior\n\n" + summary;
      break;
    case UpstreamLibrary::Peft:
    case UpstreamLibrary::Transformers:
      md += "### System Info\n\n" + versions_block(run) + "\n### Who can help?\n\n(left to the person filing)\n\n### Reproduction\n\n" +
            repro + "\n" + more + "\n### Expected behavior\n\n" + summary;
      break;
  }
  return md;
}

}  // namespace fsdpsim
