// `fsdpsim findings [--out DIR] [--check] [PATH...]`: the finding pages
// (sim/findings/finding_pages.hpp) from the catalogue, the minimal sequences kept in DIR
// and the corpus (the project's corpus/regressions and corpus/divergences, sim/core/project_data.hpp, and any PATH given).
// Without --check it writes them; --check (ctest findings_pages) exits 1 when DIR differs.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "real_backend/upstream/pool_client.hpp"
#include "model/vocab/input_file.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/output.hpp"
#include "sim/findings/finding_pages.hpp"
#include "sim/findings/issue_body.hpp"
#include "sim/findings/fix_claim.hpp"
#include "sim/core/project_data.hpp"
#include "sim/findings/root_cause_catalogue.hpp"

namespace fsdpsim::cli {

namespace {

// Triage of one file, keeping its recorded class (a minimal sequence often shows several findings).
bool triage_file(const std::string& file, TriagedFile* out) {
  SeqFile f = parse_seq_file(file);
  const std::string recorded = signature_comment(f);
  out->file = file;
  return triage(f, &out->t, {}, recorded.substr(0, recorded.find(' ')));
}

// Text this command reads (a kept script, a page) through the one input reader: its type and size checked.
std::string read_file(const std::string& path) { return read_input_file(path, kTextInput); }

// --issue REPORT: the report's draft issue body on stdout; its repro (DIR/<stem>.py) run now through
// fsdpsim_upstream.issue_run unless --no-run, within --timeout (300 s when not given).
int print_issue(const Args& a, const FindingsFlags& own, const std::string& dir) {
  const FindingReport* r = find_report(own.issue);
  if (!r) {
    throw SourceError("<command line>", {}, "--issue expects a report id from docs/findings/README.md's reports (" +
                                                std::to_string(finding_reports().size()) + ", e.g. " + finding_reports()[0].id + ", " +
                                                finding_reports()[1].id + "), got '" + own.issue + "'");
  }
  const std::string name = finding_stem(r->repro) + ".py";
  const std::string script_path = dir + "/" + name;
  const std::string script = std::filesystem::exists(script_path) ? read_file(script_path) : "";
  ReproRun run;
  if (script.empty()) run.not_run = "no script is kept at " + script_path;
  else if (own.no_run) run.not_run = "--no-run was given";
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

// Every page in `dir` that says "`fsdpsim run X.seq --set S` shows the finding gone", checked
// by doing it: X.seq as it lies in `dir`, re-run on the model with S, must show no finding of the
// page's root cause, and without S at least one (sim/findings/fix_claim.hpp). A problem per false claim.
std::vector<std::string> unborne_fix_claims(const std::string& dir) {
  std::vector<std::string> problems;
  const std::regex claim("`fsdpsim run ([^ `]+)\\.seq --set ([^ `]+)` " + std::string(kFixClaimShown));
  for (const auto& e : root_cause_catalogue()) {
    const std::string page = dir + "/" + finding_stem(e.id) + ".md";
    if (!std::filesystem::exists(page)) continue;
    const std::string text = read_file(page);
    for (std::sregex_iterator m(text.begin(), text.end(), claim), end; m != end; ++m) {
      const std::string seq = dir + "/" + (*m)[1].str() + ".seq", setting = (*m)[2].str();
      const std::string head = page + ": claims `fsdpsim run " + (*m)[1].str() + ".seq --set " + setting + "` " + kFixClaimShown;
      if (!std::filesystem::exists(seq)) {
        problems.push_back(head + ", but " + seq + " is missing");
        continue;
      }
      const SeqFile f = parse_seq_file(seq);
      const FixRerun with = rerun_with_switch(f, setting, e.id);
      if (!with.valid) problems.push_back(head + ", but the model has no switch value " + setting);
      else if (!with.removes())
        problems.push_back(head + "; a re-run on the " + kFixClaimBackend + " still shows " + std::to_string(with.remaining.size()) +
                           " finding(s) of root cause " + e.id + ": " + remaining_text(with));
      else if (root_cause_findings(f, e.id).empty())
        problems.push_back(head + ", but " + seq + " shows no finding of root cause " + e.id + " even without it");
    }
  }
  return problems;
}

}  // namespace

int cmd_findings(const Args& a, const FindingsFlags& own) {
  const bool check = own.check;
  // The project's pages and corpus (sim/core/project_data.hpp), shown as the user reaches them.
  const ProjectData& data = project_data();
  const std::string dir = !a.out.empty() ? a.out : shown_path(data.findings_dir());
  if (!own.issue.empty()) return print_issue(a, own, dir);
  std::vector<std::string> inputs = a.positional;
  for (const auto& d : data.corpus_dirs()) inputs.push_back(shown_path(d));
  if (inputs.empty()) throw SourceError("<command line>", {}, "findings expects PATH... or " + missing_data_line("the corpus", ""));
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
  if (check)  // what the pages on disk claim, re-run: a false claim fails even where the text is current
    for (const auto& p : unborne_fix_claims(dir)) {
      std::cerr << p << "\n";
      code = kFinding;
    }
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
  for (const auto& u : pages.unreviewed) std::cerr << "fsdpsim: root cause " << u << " has no catalogue entry (sim/findings/root_cause_table.cpp)\n";
  if (check && !pages.unreviewed.empty()) code = kFinding;
  if (!check) std::cout << pages.files.size() << " files written to " << dir << " (" << kept.size() << " kept sequences, " << corpus.size()
                        << " corpus files triaged)\n";
  else if (code == kClean) std::cout << dir << ": " << pages.files.size() << " files up to date\n";
  return code;
}

}  // namespace fsdpsim::cli
