// `fsdpsim check`: files and directories of .seq files replayed, their
// expectations compared on every backend that ran, and the backends compared
// with each other. Text lines (PASS/FAIL/BAD/BROKE/INTERRUPTED) or, with --json, one
// check_file record per file and a check_summary; --junit FILE: a testcase per file.
#include <chrono>
#include <iomanip>
#include <iostream>

#include "sim/cli/commands.hpp"
#include "sim/cli/interrupt.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/junit.hpp"
#include "sim/cli/progress.hpp"
#include "sim/core/crosscheck.hpp"
#include "sim/findings/expectations.hpp"

namespace fsdpsim::cli {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What became of one file, as every output form reports it.
struct FileOutcome {
  enum class Status { Pass, Fail, Diverged, Broken, Bad, Interrupted };
  std::string file;
  Status status = Status::Pass;
  std::string message;  // Broken, Bad, Interrupted: why
  std::vector<std::string> failures, divergences;
  std::vector<std::string> unjudged;  // fields a value backend could not settle: neither agreement nor divergence
  int ops = -1, world = 0, findings = 0;  // ops < 0: the file did not parse
  std::string profile;
  double seconds = 0;
};

const char* status_name(FileOutcome::Status s) {
  static const char* kNames[] = {"pass", "fail", "diverged", "broken", "bad", "interrupted"};
  return kNames[static_cast<int>(s)];
}

FileOutcome check_one(const std::string& file, const Args& a, RealPools& pools) {
  FileOutcome out;
  out.file = file;
  try {
    SeqFile f = parse_seq_file(file, /*allow_model=*/true);
    apply_overrides(f, a, file);
    check_memory(f, a, file);
    out.ops = static_cast<int>(f.ops.size()), out.world = f.scenario.world, out.profile = f.scenario.profile;
    BackendRun res = run_backend(f, a.backends, pools);
    if (!res.skipped.empty() && !a.json) std::cout << "note: " << file << ": " << res.skipped << "\n";
    arm_interrupts();  // a backend started in this run installed its own handler: ours again
    if (res.infra_failure) {
      // A run a signal cut short (the pool stopped for it) is not a broken backend.
      out.status = interrupted() ? FileOutcome::Status::Interrupted : FileOutcome::Status::Broken;
      out.message = interrupted() ? "cut short by signal " + std::to_string(interrupted()) + " (" + res.infra_message + ")" : res.infra_message;
      return out;
    }
    out.findings = static_cast<int>(res.findings.size());
    // The expectations hold on every backend that ran; with several, each
    // failure names its backend.
    for (const auto& run : res.runs)
      for (auto& x : check_expectations(f, run.observations, run.findings, file))
        out.failures.push_back((res.runs.size() > 1 ? std::string("[") + backend_name(run.backend) + "] " : "") + x.text);
    out.divergences = res.divergences;
    out.unjudged = res.unjudged;
    if (!res.divergences.empty()) out.status = FileOutcome::Status::Diverged;
    else if (!out.failures.empty()) out.status = FileOutcome::Status::Fail;
    if (!a.json && out.status != FileOutcome::Status::Pass) {
      std::cout << red("FAIL") << " " << file << "\n";
      for (const auto& x : out.failures) std::cout << "  " << x << "\n";
      print_divergences(std::cout, res);
    }
  } catch (const SourceError& e) {
    out.status = FileOutcome::Status::Bad, out.message = e.what();
  }
  return out;
}

// The lines check printed before --json, PASS, BAD and BROKE (FAIL's come from check_one, beside its run).
void print_text(const FileOutcome& o, const Args& a) {
  switch (o.status) {
    case FileOutcome::Status::Pass:
      std::cout << green("PASS") << " " << o.file << "  (" << o.ops << " ops, world " << o.world << ", " << o.profile << ", backend "
                << a.backend << ", " << o.findings << " findings as expected"
                << (o.unjudged.empty() ? "" : ", " + std::to_string(o.unjudged.size()) + " fields unjudged") << ")\n";
      break;
    case FileOutcome::Status::Broken: std::cout << red("BROKE") << " " << o.file << ": " << o.message << "\n"; break;
    case FileOutcome::Status::Interrupted: std::cout << "INTERRUPTED " << o.file << ": " << o.message << "\n"; break;
    case FileOutcome::Status::Bad: std::cout << red("BAD") << "  " << o.message << "\n"; break;
    default: break;
  }
}

void print_json(const FileOutcome& o, const Args& a) {
  JsonRecord r("check_file");
  r.str("file", o.file).str("status", status_name(o.status)).str("backend", a.backend);
  if (o.ops >= 0) r.num("ops", o.ops).num("world", o.world).str("profile", o.profile);
  if (o.status != FileOutcome::Status::Bad && o.status != FileOutcome::Status::Broken && o.status != FileOutcome::Status::Interrupted)
    r.num("findings", o.findings);
  r.strs("failures", o.failures).strs("divergences", o.divergences).strs("unjudged", o.unjudged).str("message", o.message).real("seconds", o.seconds).print(std::cout);
}

JunitCase junit_case(const FileOutcome& o) {
  JunitCase c;
  c.classname = "check", c.name = o.file, c.seconds = o.seconds;
  std::string text;
  for (const auto& x : o.failures) text += x + "\n";
  for (const auto& x : o.divergences) text += x + "\n";
  switch (o.status) {
    case FileOutcome::Status::Pass: break;
    case FileOutcome::Status::Fail:
      c.outcome = JunitCase::Outcome::Failure, c.message = std::to_string(o.failures.size()) + " failed expectations";
      break;
    case FileOutcome::Status::Diverged:
      c.outcome = JunitCase::Outcome::Failure, c.message = std::to_string(o.divergences.size()) + " divergences between backends";
      break;
    case FileOutcome::Status::Broken: c.outcome = JunitCase::Outcome::Error, c.message = "broken run", text = o.message; break;
    case FileOutcome::Status::Bad: c.outcome = JunitCase::Outcome::Error, c.message = "bad input", text = o.message; break;
    case FileOutcome::Status::Interrupted: c.outcome = JunitCase::Outcome::Error, c.message = "interrupted", text = o.message; break;
  }
  c.text = text;
  return c;
}

}  // namespace

int cmd_check(const Args& a, const CheckFlags& own) {
  if (own.near > 0) return cmd_check_near(a, own.near);
  if (a.positional.empty()) throw SourceError("<command line>", {}, "check expects at least one file or directory");
  const auto t0 = Clock::now();
  int count[6] = {0, 0, 0, 0, 0, 0};  // per FileOutcome::Status
  int unjudged = 0;  // passing files with fields a value backend could not settle: not counted as passed
  arm_interrupts();
  RealPools pools = pools_of(a);
  Progress progress("check", a.quiet);
  JunitReport junit("fsdpsim check");
  auto report = [&](const FileOutcome& o) {
    progress.clear();
    if (o.status == FileOutcome::Status::Pass && !o.unjudged.empty()) ++unjudged;
    else ++count[static_cast<int>(o.status)];
    if (a.json) print_json(o, a);
    else print_text(o, a);
    junit.add(junit_case(o));
  };
  std::vector<std::string> problems;
  const std::vector<std::string> files = seq_files(a.positional, &problems);
  for (const auto& p : problems) {
    FileOutcome o;
    o.status = FileOutcome::Status::Bad, o.message = p, o.file = p.substr(0, p.find(": "));
    report(o);
  }
  size_t done = 0;
  for (const auto& file : files) {
    std::cout.flush();  // the previous file's lines, also into a redirected file
    if (interrupted()) break;
    arm_interrupts();
    ++done;
    const auto t = Clock::now();
    progress.clear();  // check_one prints a FAIL file's lines
    FileOutcome o = check_one(file, a, pools);
    o.seconds = since(t);
    report(o);
    progress.status(std::to_string(done) + "/" + std::to_string(files.size()) + " files, " +
                    std::to_string(count[1] + count[2] + count[3] + count[4] + count[5]) + " not passing");
  }
  progress.done();
  const int passed = count[0], failed = count[1], diverged = count[2], broken = count[3], bad = count[4], cut = count[5];
  print_upstream_versions(std::cout, pools, a.json);
  if (a.json) {
    JsonRecord r("check_summary");
    r.num("passed", passed).num("unjudged", unjudged).num("failed", failed).num("diverged", diverged).num("broken", broken).num("bad", bad)
        .num("cut_short", cut);
    r.num("files", static_cast<int64_t>(files.size())).num("done", static_cast<int64_t>(done)).num("interrupted", interrupted());
    if (pools.upstream_started()) r.num("upstream_starts", pools.upstream_starts()).real("upstream_start_seconds", pools.upstream_start_seconds());
    r.real("seconds", since(t0)).print(std::cout);
  } else {
    // Bad input, broken runs and failed expectations are different problems: one count each.
    std::cout << passed << " passed, " << failed << " failed expectations, " << diverged << " diverged, " << broken << " broken runs, "
              << bad << " bad input";
    if (cut) std::cout << ", " << cut << " interrupted";
    if (unjudged) std::cout << "; " << unjudged << " unjudged (no divergence, but fields the values could not settle; not passed)";
    if (interrupted()) std::cout << "; interrupted by signal " << interrupted() << " after " << done << " of " << files.size() << " files";
    std::cout << "\n";
    if (pools.upstream_started())
      std::cout << "upstream pools: " << pools.upstream_starts() << " started, " << std::fixed << std::setprecision(1)
                << pools.upstream_start_seconds() << " s to get ready, of " << since(t0) << " s\n" << std::defaultfloat;
  }
  if (!a.junit.empty()) junit.write(a.junit, since(t0));
  if (interrupted()) return interrupted_exit(interrupted());
  if (bad) return kBadInput;
  if (broken) return kInfra;
  if (diverged) return kDivergence;
  return failed ? kFinding : kClean;
}

}  // namespace fsdpsim::cli
