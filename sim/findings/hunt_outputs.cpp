// What a hunt leaves behind: its regressions matched by signature to the corpus, the class
// files it wrote (its manifest, so the next hunt removes only those) and summary.json
// (docs/guide/command-line.md, `hunt`). The search itself is hunt.cpp.
#include "sim/findings/hunt.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "model/vocab/input_file.hpp"

namespace fsdpsim {
namespace {

void json_field(std::ostream& os, const char* name, const std::string& v, bool comma = true) {
  os << (comma ? "," : "") << "\"" << name << "\":";
  print_json_string(os, v);
}

void json_strings(std::ostream& os, const char* name, const std::vector<std::string>& v) {
  os << ",\"" << name << "\":[";
  for (size_t k = 0; k < v.size(); ++k) {
    os << (k ? "," : "");
    print_json_string(os, v[k]);
  }
  os << "]";
}

}  // namespace

std::map<std::string, std::string> corpus_signatures(const std::vector<std::string>& files) {
  const std::string prefix = "# signature: ";
  std::map<std::string, std::string> out;
  for (const auto& f : files) {
    std::istringstream in(read_input_file(f, kSeqInput));
    for (std::string line; std::getline(in, line);) {
      if (line.compare(0, prefix.size(), prefix) != 0) continue;
      out.emplace(line.substr(prefix.size()), f);
      break;
    }
  }
  return out;
}

void attach_regressions(HuntReport& r, const std::map<std::string, std::string>& corpus) {
  for (auto& c : r.classes) {
    auto it = corpus.find(c.t.signature);
    c.regression = it == corpus.end() ? "" : it->second;
  }
}

namespace {

const char* const kManifestHeader = "# the class files fsdpsim hunt wrote here; the next hunt into this directory removes these only\n";

}  // namespace

std::vector<std::string> hunt_manifest(const std::string& dir) {
  std::vector<std::string> names;
  std::string text;
  try {
    text = read_input_file(dir + "/" + kHuntManifest, kTextInput);
  } catch (const SourceError&) {
    return names;  // none (a first hunt, or a directory of the user's): nothing is removed
  }
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    // Names of this directory's own .seq files only: a line naming another place is ignored.
    const bool plain = !line.empty() && line[0] != '#' && line[0] != '.' && line.find('/') == std::string::npos;
    if (plain && line.size() > 4 && line.compare(line.size() - 4, 4, ".seq") == 0) names.push_back(line);
  }
  return names;
}

bool write_hunt_outputs(HuntReport& r, const std::string& dir, int exit_code, std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    *error = dir + ": " + ec.message();
    return false;
  }
  // The class files an earlier hunt wrote here go, by its manifest: the directory holds this
  // catalogue only, and a file the hunt did not write (a user's S2-mine.seq) is never removed.
  for (const std::string& name : hunt_manifest(dir)) std::filesystem::remove(dir + "/" + name, ec);
  std::string manifest = kManifestHeader;
  for (auto& c : r.classes) {
    manifest += c.stem + ".seq\n";
    c.file = dir + "/" + c.stem + ".seq";
    SeqFile f = c.t.minimal;
    f.comments.insert(f.comments.begin(), "found by fsdpsim hunt (seed " + std::to_string(r.seed) + ", " + c.found_by + "), confirmed: real " +
                                              c.real + ", upstream " + c.upstream);
    std::ofstream out(c.file);
    out << print_seq(f);
    if (!out) {
      *error = c.file + ": cannot write";
      return false;
    }
  }
  // Before the summary: should it fail, the next hunt still knows which class files are its own.
  std::ofstream listing(dir + "/" + kHuntManifest);
  listing << manifest;
  if (!listing.flush()) {
    *error = dir + "/" + kHuntManifest + ": cannot write";
    return false;
  }
  std::ofstream js(dir + "/summary.json");
  js << "{\"seed\":" << r.seed;
  json_field(js, "profile", r.profile);
  js << ",\"world\":" << r.world << ",\"sequences\":" << r.sequences << ",\"with_findings\":" << r.with_findings
     << ",\"explored\":" << r.explored << ",\"triaged\":" << r.triaged << ",\"exit\":" << exit_code << ",\"seconds\":{\"explore\":" << r.t_explore
     << ",\"fuzz\":" << r.t_fuzz << ",\"triage\":" << r.t_triage << ",\"confirm\":" << r.t_confirm << "},\"not_confirmed_budget\":" << unconfirmed_by_budget(r);
  json_field(js, "upstream_versions", r.upstream_versions);
  js << ",\"classes\":[";
  for (size_t i = 0; i < r.classes.size(); ++i) {
    const HuntClass& c = r.classes[i];
    js << (i ? "," : "") << "{";
    json_field(js, "class", c.stem, false);
    json_field(js, "signature", c.t.signature);
    json_field(js, "spec", c.t.spec);
    json_field(js, "key", c.t.key);
    json_field(js, "symptom", c.t.symptom);
    js << ",\"length\":" << c.t.minimal.ops.size() << ",\"world\":" << c.t.minimal.scenario.world
       << ",\"rank_divergent\":" << (c.t.rank_divergent ? "true" : "false") << ",\"hits\":" << c.hits;
    json_field(js, "root_cause", c.t.root_cause.id);
    json_field(js, "verdict", root_verdict_name(root_cause_entry(c.t.root_cause.id).verdict));
    json_field(js, "fix", c.t.fix_switch);
    json_field(js, "fix_cites", c.t.fix_cites);
    json_field(js, "real", c.real);
    json_field(js, "upstream", c.upstream);
    json_field(js, "found_by", c.found_by);
    json_field(js, "file", c.file);
    json_field(js, "regression", c.regression);
    js << "}";
  }
  js << "],\"reports\":[";
  const std::vector<HuntReportRow> reps = reports_of(r);
  for (size_t i = 0; i < reps.size(); ++i) {
    const FindingReport& rep = *reps[i].report;
    js << (i ? "," : "") << "{";
    json_field(js, "id", rep.id, false);
    json_field(js, "title", rep.title);
    json_field(js, "owner", upstream_pin(rep.owner).package);
    json_field(js, "action", report_action_word(report_action(rep)));
    json_field(js, "verdict", root_verdict_name(report_verdict(rep)));
    json_field(js, "fix_site", rep.fix_site.file + "::" + rep.fix_site.function);
    json_field(js, "alternative", rep.alternative);
    json_strings(js, "entry_points", rep.entry_points);
    json_strings(js, "reached", reps[i].reached);
    js << ",\"classes\":" << reps[i].classes;
    json_field(js, "page", "docs/findings/" + report_page_name(rep));
    js << "}";
  }
  js << "],\"root_causes\":[";
  const std::vector<HuntRootCause> rcs = root_causes_of(r);
  for (size_t i = 0; i < rcs.size(); ++i) {
    const HuntRootCause& rc = rcs[i];
    js << (i ? "," : "") << "{";
    json_field(js, "id", rc.entry.id, false);
    json_field(js, "title", rc.entry.title);
    json_field(js, "verdict", root_verdict_name(rc.entry.verdict));
    json_field(js, "verdict_detail", rc.entry.verdict_detail);
    json_strings(js, "citations", citation_lines(rc.entry));
    json_field(js, "specs", rc.specs);
    json_field(js, "blame", rc.how);
    json_field(js, "confirmed", rc.confirmed);
    json_field(js, "page", rc.page);
    json_field(js, "repro", rc.repro);
    json_field(js, "script", rc.script);
    std::vector<std::string> stems;
    for (size_t k : rc.classes) stems.push_back(r.classes[k].stem);
    json_strings(js, "classes", stems);
    js << "}";
  }
  js << "]}\n";
  if (!js) {
    *error = dir + "/summary.json: cannot write";
    return false;
  }
  return true;
}

}  // namespace fsdpsim
