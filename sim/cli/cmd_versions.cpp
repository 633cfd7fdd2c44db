// `fsdpsim versions PATH... [--matrix NAME | --upstream SET] [--json]`: each
// file on every release set of a matrix (real_backend/upstream/matrix.txt),
// through the upstream backend on that set's environment (release_env.py),
// spec-checked as `check --backend upstream` does. A cell is `reproduces`
// (every expectation of the file holds, its recorded finding included),
// `does not reproduce`, `cannot run: <reason>` (the set does not install or
// import, or the harness calls an API the release lacks), or `broken: <why>`
// (an infrastructure failure: exit 4). Exit 1 when a file reproduces on some
// release: a reproduction is a finding, as everywhere else.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "model/vocab/input_file.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/interrupt.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/progress.hpp"
#include "sim/findings/expectations.hpp"
#include "sim/release/release_matrix.hpp"
#include "sim/cli/versions_run.hpp"

namespace fsdpsim::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<ReleaseSet> sets_of(const Args& a, const VersionsFlags& own, std::string* name) {
  if (!a.upstream_set.empty()) {
    *name = a.upstream_set;
    return {parse_release_set(a.upstream_set)};
  }
  *name = own.matrix;
  return matrix_sets(own.matrix);
}

// Where a pool's error says the harness met an API the release lacks (rank.py's `fail`).
Cell from_infra(const std::string& message) {
  const size_t at = message.find("cannot run: ");
  if (at != std::string::npos) return {"cannot run", message.substr(at + 12)};
  return {"broken", message};
}

}  // namespace

std::string matrix_file() {
  const char* f = std::getenv("FSDPSIM_MATRIX_FILE");
  return f && *f ? f : std::string(FSDPSIM_SOURCE_DIR) + "/real_backend/upstream/matrix.txt";
}

std::vector<ReleaseSet> matrix_sets(const std::string& name) {
  const std::string file = matrix_file();
  return find_matrix(parse_matrix_file(read_input_file(file, kTextInput), file), name, file).sets;
}

Cell run_file(const std::string& file, RealPools& pools) {
  SeqFile f = parse_seq_file(file);
  BackendRun res = run_backend(f, {Backend::Upstream}, pools);
  arm_interrupts();  // the pool installed its own handler
  if (res.infra_failure) return from_infra(res.infra_message);
  std::vector<ExpectFailure> failed = check_expectations(f, res.runs.front().observations, res.runs.front().findings, file);
  if (failed.empty()) return {"reproduces", ""};
  return {"does not reproduce", failed.front().text + (failed.size() > 1 ? " (+" + std::to_string(failed.size() - 1) + " more)" : "")};
}

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The test seam's answer for `file` on `set` ($FSDPSIM_FAKE_RELEASES: lines
// "SET[ FILE-STEM] = VERDICT[: DETAIL]", the file's own line first); false when unset.
bool fake_cell(const std::string& file, const std::string& set, Cell* out) {
  const char* path = std::getenv("FSDPSIM_FAKE_RELEASES");
  if (!path || !*path) return false;
  std::istringstream in(read_input_file(path, kTextInput));
  const std::string stem = std::filesystem::path(file).stem().string();
  std::map<std::string, std::string> answers;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t eq = line.find(" = ");
    if (trimmed(line).empty()) continue;
    if (eq == std::string::npos) throw SourceError(path, {n, 1}, "expected SET[ FILE-STEM] = VERDICT[: DETAIL], got '" + line + "'");
    answers[trimmed(line.substr(0, eq))] = trimmed(line.substr(eq + 3));
  }
  auto it = answers.find(set + " " + stem);
  if (it == answers.end()) it = answers.find(set);
  if (it == answers.end()) {
    *out = {"broken", "FSDPSIM_FAKE_RELEASES has no line for " + set};
    return true;
  }
  const size_t colon = it->second.find(": ");
  *out = {it->second.substr(0, colon), colon == std::string::npos ? "" : it->second.substr(colon + 2)};
  return true;
}

std::string label(const ReleaseSet& s) {
  if (!s.path.empty()) return "peft " + std::filesystem::path(s.path).filename().string();
  std::string out;
  for (const auto& [name, version] : s.pins) out += (out.empty() ? "" : " ") + name + " " + version;
  return s.pins.size() == 1 ? "peft " + s.pins.at("peft") : out;
}

void print_table(const std::vector<std::string>& files, const std::vector<ReleaseSet>& sets,
                 const std::vector<std::vector<Cell>>& cells) {
  size_t w = 4;
  for (const auto& f : files) w = std::max(w, std::filesystem::path(f).stem().string().size());
  std::cout << std::left << std::setw(static_cast<int>(w) + 2) << "file";
  for (const auto& s : sets) std::cout << std::setw(20) << label(s);
  std::cout << "\n";
  for (size_t i = 0; i < files.size(); ++i) {
    std::cout << std::setw(static_cast<int>(w) + 2) << std::filesystem::path(files[i]).stem().string();
    for (size_t k = 0; k < sets.size(); ++k) std::cout << std::setw(20) << (k < cells[i].size() ? cells[i][k].verdict : "-");
    std::cout << "\n";
  }
  std::cout << std::right;
  for (size_t i = 0; i < files.size(); ++i)
    for (size_t k = 0; k < cells[i].size(); ++k)
      if (!cells[i][k].detail.empty())
        std::cout << "  " << files[i] << " on " << sets[k].text() << ": " << cells[i][k].verdict << ": " << cells[i][k].detail << "\n";
}

// --peft: one line (or versions_change record) per file whose verdict on PATH
// differs from the pinned release's; exit 1 when one does, 4 on a broken cell.
int print_local_peft(const std::vector<std::string>& files, const std::vector<ReleaseSet>& sets,
                  const std::vector<std::vector<Cell>>& cells, bool json) {
  int changed = 0, broken = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (cells[i].size() < 2) continue;  // interrupted
    const Cell &was = cells[i][0], &now = cells[i][1];
    for (const Cell* c : {&was, &now})
      if (c->verdict == "broken") {
        ++broken;
        std::cerr << "versions: " << files[i] << ": broken: " << c->detail << "\n";
      }
    if (was.verdict == now.verdict || was.verdict == "broken" || now.verdict == "broken") continue;
    ++changed;
    const std::string stem = std::filesystem::path(files[i]).stem().string();
    if (json) {
      JsonRecord("versions_change").str("file", stem).str("release", sets[1].text()).str("was", was.verdict).str("now", now.verdict)
          .str("detail", now.detail).print(std::cout);
    } else {
      std::cout << "changed: " << files[i] << ": " << was.verdict << " -> " << now.verdict << (now.detail.empty() ? "" : " (" + now.detail + ")")
                << "\n";
    }
  }
  if (!json)
    std::cout << files.size() << " file" << (files.size() == 1 ? "" : "s") << ", " << changed << " changed from " << sets[0].peft() << " to "
              << sets[1].peft() << "\n";
  if (interrupted()) return interrupted_exit(interrupted());
  if (broken) return kInfra;
  return changed ? kFinding : kClean;
}

}  // namespace

Cell run_on_release(const std::string& file, const std::string& set, const Args& a, double* env_seconds) {
  const auto t0 = Clock::now();
  Cell c;
  if (fake_cell(file, set, &c)) return c;
  std::string python, message;
  const int rc = upstream::release_python(set, &python, &message);
  *env_seconds = since(t0);
  if (rc < 0) return {"broken", message};
  if (rc != 0) {
    c = {"cannot run", message.empty() ? "release_env exit " + std::to_string(rc) : message};
  } else {
    RealPools pools(real::RankMode::Processes, std::chrono::milliseconds(a.timeout_ms));
    pools.set_upstream_python(python);
    const auto tf = Clock::now();
    c = run_file(file, pools);
    c.seconds = since(tf);
    pools.stop_upstream();
  }
  if (c.verdict == "cannot run" && c.detail.compare(0, 12, "cannot run: ") == 0) c.detail = c.detail.substr(12);
  return c;
}

int cmd_versions(const Args& a, const VersionsFlags& own) {
  if (!own.bisect.empty()) return cmd_versions_bisect(a, own);
  if (!own.compare.empty()) return cmd_versions_compare(a, own);
  if (a.positional.empty()) throw SourceError("<command line>", {}, "versions expects at least one file or directory");
  const auto t0 = Clock::now();
  std::string matrix_name;
  // --peft PATH: the pinned release and the local PEFT, and only what changed between them.
  const bool local_peft = !own.peft_path.empty();
  if (local_peft && !a.upstream_set.empty()) throw SourceError("<command line>", {}, "versions --peft takes no --upstream: it runs the pinned release and PATH");
  // Built a step at a time, not as a braced list: GCC 12 mis-destroys a braced list's elements when
  // a later one throws (parse_release_set on a missing PATH; ASan: stack-use-after-scope).
  const std::vector<ReleaseSet> sets = [&] {
    if (!local_peft) return sets_of(a, own, &matrix_name);
    std::vector<ReleaseSet> out;
    out.push_back(matrix_sets("pinned").front());
    out.push_back(parse_release_set("peft=" + own.peft_path));
    return out;
  }();
  std::vector<std::string> problems;
  const std::vector<std::string> files = seq_files(a.positional, &problems);
  for (const auto& p : problems) std::cerr << p << "\n";
  if (!problems.empty()) return kBadInput;
  for (const auto& file : files) parse_seq_file(file);  // bad input before any environment is made
  arm_interrupts();
  Progress progress("versions", a.quiet);
  std::vector<std::vector<Cell>> cells(files.size());
  double env_seconds = 0;
  int counts[4] = {0, 0, 0, 0};  // reproduces, does not reproduce, cannot run, broken
  for (const auto& set : sets) {
    if (interrupted()) break;
    const auto te = Clock::now();
    std::string python, message;
    const bool fake = std::getenv("FSDPSIM_FAKE_RELEASES") && *std::getenv("FSDPSIM_FAKE_RELEASES");  // the test seam
    int rc = 0;
    if (!fake) {
      Waiting waiting(progress, set.text() + ": its environment (made on first use: about half a minute)");
      rc = upstream::release_python(set.text(), &python, &message);
    }
    env_seconds += since(te);
    RealPools pools(real::RankMode::Processes, std::chrono::milliseconds(a.timeout_ms));
    pools.set_upstream_python(python);
    std::map<std::string, std::string> versions;
    for (size_t i = 0; i < files.size(); ++i) {
      if (interrupted()) break;
      const auto tf = Clock::now();
      Cell c;
      if (!fake_cell(files[i], set.text(), &c)) {
        Waiting waiting(progress, set.text() + ": " + std::to_string(i + 1) + "/" + std::to_string(files.size()) + " " + files[i]);
        c = rc == 0 ? run_file(files[i], pools) : Cell{"cannot run", message.empty() ? "release_env exit " + std::to_string(rc) : message};
      }
      if (c.verdict == "cannot run" && c.detail.compare(0, 12, "cannot run: ") == 0) c.detail = c.detail.substr(12);
      c.seconds = since(tf);
      ++counts[c.verdict == "reproduces" ? 0 : c.verdict == "does not reproduce" ? 1 : c.verdict == "cannot run" ? 2 : 3];
      if (versions.empty()) versions = pools.upstream_versions();
      if (a.json && !local_peft) {
        JsonRecord r("versions_cell");
        r.str("file", files[i]).str("release", set.text()).str("verdict", c.verdict).str("detail", c.detail);
        if (versions.count("peft")) r.str("peft", versions.at("peft"));
        if (versions.count("transformers")) r.str("transformers", versions.at("transformers"));
        r.real("seconds", c.seconds).print(std::cout);
      }
      cells[i].push_back(std::move(c));
    }
    pools.stop_upstream();
  }
  progress.done();
  if (local_peft) return print_local_peft(files, sets, cells, a.json);
  if (a.json) {
    JsonRecord r("versions_summary");
    r.str("matrix", matrix_name).num("files", static_cast<int64_t>(files.size())).num("releases", static_cast<int64_t>(sets.size()));
    r.num("reproduces", counts[0]).num("does_not_reproduce", counts[1]).num("cannot_run", counts[2]).num("broken", counts[3]);
    r.num("interrupted", interrupted()).real("environment_seconds", env_seconds).real("seconds", since(t0)).print(std::cout);
  } else {
    print_table(files, sets, cells);
    // The fix switches of the root causes measured here, against the release that shipped each fix.
    std::vector<ReleaseVerdict> measured;
    for (size_t i = 0; i < files.size(); ++i)
      for (size_t k = 0; k < cells[i].size(); ++k)
        measured.push_back({std::filesystem::path(files[i]).stem().string(), sets[k].text(), cells[i][k].verdict, cells[i][k].detail});
    for (const auto& f : check_fixes(root_cause_catalogue(), fixes_shipped(), measured)) std::cout << "fix check: " << f.line << "\n";
    std::cout << counts[0] << " reproduce, " << counts[1] << " do not reproduce, " << counts[2] << " cannot run, " << counts[3]
              << " broken; " << std::fixed << std::setprecision(1) << since(t0) << " s (environments " << env_seconds << " s)\n"
              << std::defaultfloat;
  }
  if (interrupted()) return interrupted_exit(interrupted());
  if (counts[3]) return kInfra;
  // A reproduction is a finding, exit 1, as `run` and `check` treat a finding (docs/guide/command-line.md).
  return counts[0] ? kFinding : kClean;
}

}  // namespace fsdpsim::cli
