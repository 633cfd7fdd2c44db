// `fsdpsim findings [--out DIR] [--check] [PATH...]`: the finding pages
// (sim/finding_pages.hpp) from the catalogue, the minimal sequences kept in DIR
// and the corpus (corpus/regressions, corpus/divergences and any PATH given).
// Without --check it writes them; --check (ctest findings_pages) exits 1 when DIR differs.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "model/vocab/input_file.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/output.hpp"
#include "sim/finding_pages.hpp"

namespace fsdpsim::cli {

namespace {

// Triage of one file, keeping its recorded class (a minimal sequence often shows several findings).
bool triage_file(const std::string& file, TriagedFile* out) {
  SeqFile f = parse_seq_file(file);
  const std::string recorded = signature_comment(f);
  out->file = file;
  return triage(f, &out->t, {}, recorded.substr(0, recorded.find(' ')));
}

}  // namespace

int cmd_findings(const Args& a) {
  const bool check = a.check;
  const std::string dir = !a.out.empty() ? a.out : "docs/findings";
  std::vector<std::string> inputs = a.positional;
  for (const char* d : {"corpus/regressions", "corpus/divergences"})
    if (std::filesystem::is_directory(d)) inputs.push_back(d);
  if (inputs.empty()) throw SourceError("<command line>", {}, "findings expects corpus/ in the working directory, or PATH...");
  if (!check) prepare_out_dir(dir);  // exit 3 before the triage, not at the first page
  std::vector<std::string> problems;
  const std::vector<std::string> files = seq_files(inputs, &problems);
  for (const auto& p : problems) std::cerr << "fsdpsim: " << p << "\n";
  if (!problems.empty()) return kBadInput;
  std::vector<TriagedFile> kept, corpus;
  if (std::filesystem::is_directory(dir))
    for (const auto& f : seq_files({dir}, &problems)) {
      TriagedFile t;
      if (triage_file(f, &t)) kept.push_back(std::move(t));
      else std::cerr << "fsdpsim: " << f << ": no finding (a kept minimal sequence must reproduce its root cause)\n";
    }
  for (const auto& f : files) {
    TriagedFile t;
    if (triage_file(f, &t)) corpus.push_back(std::move(t));
  }
  // The default matrix's run (`fsdpsim versions DIR --json > DIR/versions.jsonl`), when kept.
  std::vector<ReleaseVerdict> releases;
  if (std::filesystem::exists(dir + "/versions.jsonl")) releases = parse_release_verdicts(read_input_file(dir + "/versions.jsonl", kJsonInput), dir + "/versions.jsonl");
  const FindingPages pages = render_finding_pages(kept, corpus, releases);
  int code = kClean;
  const std::string rerun = a.out.empty() ? "fsdpsim findings" : "fsdpsim findings --out " + dir;
  if (!check) std::filesystem::create_directories(dir);
  for (const auto& [name, text] : pages.files) {
    const std::string path = dir + "/" + name;
    if (check) {
      if (!std::filesystem::exists(path)) {
        std::cerr << path << ": missing (run `" << rerun << "`)\n";
        code = kFinding;
      } else if (read_input_file(path, kTextInput) != text) {
        std::cerr << path << ": stale (run `" << rerun << "`)\n";
        code = kFinding;
      }
      continue;
    }
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::cerr << "fsdpsim: cannot write " << path << "\n";
      return kInfra;
    }
  }
  // A page or sequence whose root cause left the catalogue.
  if (std::filesystem::is_directory(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      const std::string ext = e.path().extension().string();
      if ((ext == ".md" || ext == ".seq") && !pages.files.count(name)) {
        std::cerr << dir << "/" << name << ": no catalogue entry generates it\n";
        if (check) code = kFinding;
        else std::filesystem::remove(e.path());
      }
    }
  for (const auto& u : pages.unreviewed) std::cerr << "fsdpsim: root cause " << u << " has no catalogue entry (sim/root_cause_catalogue.cpp)\n";
  if (check && !pages.unreviewed.empty()) code = kFinding;
  if (!check) std::cout << pages.files.size() << " files written to " << dir << " (" << kept.size() << " kept sequences, " << corpus.size()
                        << " corpus files triaged)\n";
  else if (code == kClean) std::cout << dir << ": " << pages.files.size() << " files up to date\n";
  return code;
}

}  // namespace fsdpsim::cli
