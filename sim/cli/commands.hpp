// The `fsdpsim` subcommands. Each returns the process exit code:
// 0 clean, 1 finding or failed expectation, 2 model/real divergence,
// 3 bad input or usage, 4 infrastructure failure.
#pragma once
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/vocab/seq.hpp"
#include "sim/core/crosscheck.hpp"
#include "sim/core/generator.hpp"

namespace fsdpsim::cli {

enum Exit : int { kClean = 0, kFinding = 1, kDivergence = 2, kBadInput = 3, kInfra = 4 };

// An infrastructure failure found before any work (a release set that cannot be
// installed): main prints "fsdpsim: <what>" and exits 4.
struct InfraError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Command-line arguments after the subcommand, with the common flags parsed.
struct Args {
  std::vector<std::string> positional;
  std::string backend = "model";  // as written: "both", "model,upstream"
  BackendList backends = {Backend::Model};  // --backend, --backends or --against (a backend), parsed
  std::string profile;                                       // empty: the file's own
  std::vector<std::pair<std::string, std::string>> sets;     // --set k=v
  int world = 0;                                             // 0: the file's own
  bool json = false;   // --json: one typed JSON object per line (docs/cli-json.schema.json)
  bool quiet = false;  // --quiet: no progress lines on stderr
  bool wide = false;   // --wide: tables with every cell whole (default: within 120 columns)
  std::string junit;   // --junit FILE: JUnit XML (check, crosscheck, hunt)
  uint64_t seed = 0;
  bool have_seed = false;
  bool have_seconds = false;
  int count = 1;
  bool count_given = false;          // --count was given (coverage's default differs)
  int worlds_lo = 1, worlds_hi = 4;  // coverage --worlds A-B
  std::string out;
  double seconds = 2.0;
  std::string ranks = "processes";  // real backend: processes | threads
  int64_t memory_budget = 0;  // --memory-budget BYTES (K/M/G suffixes); 0: default_memory_budget()
  int timeout_ms = kDefaultTimeoutMs;  // one default for the real ranks and the upstream pool
  bool model_only = false;  // bench: skip the real backend; hunt: no confirmation
  bool stability = false;   // bench --stability: the hunts' root-cause stability figure
  bool discovery = false;   // bench --discovery: time to each seed's root cause, root causes in 10 s and T s
  std::string fuzzer;       // bench --discovery --fuzzer PATH: the lifecycle_fuzzer binary to measure too
  bool scripts = false;     // hunt --scripts: each root cause's repro script run under torchrun
  bool python = false;      // export: a torchrun script
  bool no_shrink = false;   // export: the file as written, not its triaged minimal sequence
  bool divergence = false;  // shrink: keep a divergence between backends, not a finding
  bool fail_on_unreported = false;  // hunt: exit 1 when a root cause has no upstream report (--fail-on-new too)
  bool fail_on_uncatalogued = false;  // hunt: exit 1 when a class has no regression file in --corpus
  std::string corpus;  // hunt --corpus DIR: the regressions the catalogue is checked against
  bool check = false;        // triage: compare with each file's `# signature:` line
  std::string issue;         // findings --issue REPORT: print that report's draft issue body
  bool no_run = false;       // findings --issue --no-run: do not run the repro script
  // explore
  std::string builtin;        // --builtin NAME
  int depth = 6;              // --depth D
  int64_t max_states = 0;     // --max-states N (0: ExploreOptions' default)
  std::string dot, svg;       // --dot FILE, --svg FILE
  bool rank_ops = false;      // --rank-ops
  bool full_alphabet = false; // --full
  std::vector<std::string> ops;  // --ops a,b (op kinds or op texts)
  std::string html;         // report: the page to write
  int shard_index = 0;      // crosscheck --shard I/N: this job runs block I (0-based) of N
  int shard_count = 1;
  std::string results;      // crosscheck: the JSON results file (merge-results reads them)
  std::string draw;         // crosscheck, random: --draw checkpoint=P,... (GenOptions' optional draws)
  std::string upstream_set; // --upstream peft==X[,...]: the release set the upstream pool runs (normalized)
  std::string matrix = "default";  // versions --matrix NAME (real_backend/upstream/matrix.txt)
  std::string bisect;       // versions --bisect FILE: the first release it reproduces on, the first it is gone
  std::string releases;     // versions --releases A..B or A,B,C (PEFT versions; "peft==" prefix allowed)
  std::string compare;      // versions --compare KEPT NEW: a matrix run against the kept one
  std::string peft_path;    // versions --peft PATH: a local PEFT checkout or wheel compared with the pinned release
};

struct Command;  // command_table.hpp
// The flags of `argv` that command `c` takes (its row of the command table, and --quiet).
// Throws SourceError("<command line>: ...") on a bad flag: an unknown one names the command.
Args parse_args(const std::vector<std::string>& argv, const Command& c);

// Applies --profile/--set/--world to a parsed file (throws SourceError).
void apply_overrides(SeqFile& f, const Args& a, const std::string& file);

// With --upstream, the set's environment is made first (InfraError when it cannot be).
RealPools pools_of(const Args& a);
// Whether a triaged minimal sequence's recorded finding shows on the real libraries at world 1 with no
// fully_shard (cmd_export.cpp): its script is then plain `python`. `export --python` and `hunt --scripts` ask.
bool fsdp_independent(const SeqFile& f, const Args& a);
// Before the real or upstream backend runs `f`: refuses it (SourceError, exit 3)
// when its peak by the cost model is over --memory-budget. Nothing for the model alone.
void check_memory(const SeqFile& f, const Args& a, const std::string& file);
// --draw's list onto opt (parse_args checked it; "" leaves opt as it is).
void apply_draws_or_default(const std::string& draw, GenOptions* opt);
// Files and directories (their .seq files, recursively, sorted) as file paths;
// unreadable paths are reported in `problems`.
std::vector<std::string> seq_files(const std::vector<std::string>& paths, std::vector<std::string>* problems);
inline bool uses(const BackendList& list, Backend b) {
  for (Backend x : list)
    if (x == b) return true;
  return false;
}
// "divergences (model vs upstream): N" and the first 40 of each comparison.
void print_divergences(std::ostream& os, const BackendRun& res);
// After a run that used the upstream pool: "upstream: torch X, peft Y, ..." or,
// with json, {"upstream_versions":{...}}. Nothing when the pool never started.
void print_upstream_versions(std::ostream& os, RealPools& pools, bool json);

int cmd_run(const Args& a);
int cmd_findings(const Args& a);
int cmd_bench_stability(const Args& a);
int cmd_bench_discovery(const Args& a);
int cmd_check(const Args& a);
int cmd_profiles(const Args& a);
int cmd_random(const Args& a);
int cmd_fingerprint(const Args& a);
int cmd_coverage(const Args& a);
int cmd_bench(const Args& a);
int cmd_crosscheck(const Args& a);
int cmd_worker(const Args& a);
int cmd_shrink(const Args& a);
int cmd_expect(const Args& a);
int cmd_cost(const Args& a);
int cmd_main_job(const Args& a);  // `fsdpsim demo`: seed 000 under both profiles
int cmd_hunt(const Args& a);
int cmd_triage(const Args& a);
int cmd_export(const Args& a);
int cmd_explore(const Args& a);
// bench: each built-in scenario explored to depth 4 (at most `budget` seconds each);
// a table, or with json one bench_explorer record per scenario.
void bench_explorer(std::ostream& os, double budget, bool json);
int cmd_report(const Args& a);
int cmd_merge_results(const Args& a);
int cmd_versions(const Args& a);

}  // namespace fsdpsim::cli
