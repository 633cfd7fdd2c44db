// `fsdpsim findings [--out DIR] [--check] [PATH...]`: the finding pages
// (sim/finding_pages.hpp) from the catalogue, the minimal sequences kept in DIR
// and the corpus (corpus/regressions, corpus/divergences and any PATH given).
// Without --check it writes them; --check (ctest findings_pages) exits 1 when DIR differs.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include "real_backend/upstream/pool_client.hpp"
#include "sim/cli/commands.hpp"
#include "sim/finding_pages.hpp"
#include "sim/issue_body.hpp"

namespace fsdpsim::cli {

namespace {

// Triage of one file, keeping its recorded class (a minimal sequence often shows several findings).
bool triage_file(const std::string& file, TriagedFile* out) {
  SeqFile f = parse_seq_file(file);
  const std::string recorded = signature_comment(f);
  out->file = file;
  return triage(f, &out->t, {}, recorded.substr(0, recorded.find(' ')));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --issue REPORT: the report's draft issue body on stdout; its repro (DIR/<stem>.py) run now through
// fsdpsim_upstream.issue_run unless --no-run, within --timeout (300 s when not given).
int print_issue(const Args& a, const std::string& dir) {
  const FindingReport* r = find_report(a.issue);
  if (!r) {
    throw SourceError("<command line>", {}, "--issue expects a report id from docs/findings/README.md's reports (" +
                                                std::to_string(finding_reports().size()) + ", e.g. " + finding_reports()[0].id + ", " +
                                                finding_reports()[1].id + "), got '" + a.issue + "'");
  }
  const std::string name = finding_stem(r->repro) + ".py";
  const std::string script_path = dir + "/" + name;
  const std::string script = std::filesystem::exists(script_path) ? read_file(script_path) : "";
  ReproRun run;
  if (script.empty()) run.not_run = "no script is kept at " + script_path;
  else if (a.no_run) run.not_run = "--no-run was given";
  else {
    std::string tmp = (std::filesystem::temp_directory_path() / "fsdpsim-issue-XXXXXX").string();
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0) {
      std::cerr << "fsdpsim: cannot create a temporary file in " << std::filesystem::temp_directory_path() << "\n";
      return kInfra;
    }
    ::close(fd);
    const int seconds = a.timeout_ms == kDefaultTimeoutMs ? 300 : std::max(1, a.timeout_ms / 1000);
    std::string error;
    const int rc = upstream::run_python_module(
        "fsdpsim_upstream.issue_run", {std::filesystem::absolute(script_path).string(), "--out", tmp, "--timeout", std::to_string(seconds)}, &error);
    if (rc == 0) run = parse_repro_run(read_file(tmp));
    else run.not_run = rc < 0 ? error : "the runner exited " + std::to_string(rc);
    std::remove(tmp.c_str());
  }
  std::vector<ReleaseVerdict> releases;
  if (std::filesystem::exists(dir + "/versions.jsonl")) releases = parse_release_verdicts(read_file(dir + "/versions.jsonl"), dir + "/versions.jsonl");
  std::cout << issue_body(*r, script, name, run, releases);
  if (!run.ran) std::cerr << "fsdpsim: the repro did not run: " << run.not_run << "\n";
  return kClean;
}

}  // namespace

int cmd_findings(const Args& a) {
  const bool check = a.check;
  const std::string dir = !a.out.empty() ? a.out : "docs/findings";
  if (!a.issue.empty()) return print_issue(a, dir);
  std::vector<std::string> inputs = a.positional;
  for (const char* d : {"corpus/regressions", "corpus/divergences"})
    if (std::filesystem::is_directory(d)) inputs.push_back(d);
  if (inputs.empty()) throw SourceError("<command line>", {}, "findings expects corpus/ in the working directory, or PATH...");
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
  if (std::filesystem::exists(dir + "/versions.jsonl")) releases = parse_release_verdicts(read_file(dir + "/versions.jsonl"), dir + "/versions.jsonl");
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
      } else if (read_file(path) != text) {
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
  for (const auto& u : pages.unreviewed) std::cerr << "fsdpsim: root cause " << u << " has no catalogue entry (sim/root_cause_table.cpp)\n";
  if (check && !pages.unreviewed.empty()) code = kFinding;
  if (!check) std::cout << pages.files.size() << " files written to " << dir << " (" << kept.size() << " kept sequences, " << corpus.size()
                        << " corpus files triaged)\n";
  else if (code == kClean) std::cout << dir << ": " << pages.files.size() << " files up to date\n";
  return code;
}

}  // namespace fsdpsim::cli
