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
#include "sim/cli/args.hpp"

namespace fsdpsim::cli {

enum Exit : int { kClean = 0, kFinding = 1, kDivergence = 2, kBadInput = 3, kInfra = 4 };

// An infrastructure failure found before any work (a release set that cannot be
// installed): main prints "fsdpsim: <what>" and exits 4.
struct InfraError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Applies --profile/--set/--world to a parsed file (throws SourceError).
void apply_overrides(SeqFile& f, const Args& a, const std::string& file);

// With --upstream, the set's environment is made first (InfraError when it cannot be).
RealPools pools_of(const Args& a);
// Whether a triaged minimal sequence's recorded finding shows on the real libraries at world 1 with no
// fully_shard (cmd_export.cpp): its script is then plain `python`. `export --python` and `hunt --scripts` ask.
// POOLS: the caller's, kept between calls (hunt --scripts asks once per root cause: a pool each
// was a coordinator's start each); null: pools of its own for this one call.
bool fsdp_independent(const SeqFile& f, const Args& a, RealPools* pools = nullptr);
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

// The handlers, each after its command's own options (the flags its row stores there,
// command_table.cpp); the common ones are in Args.
int cmd_run(const Args& a);
struct CheckFlags {
  int near = 0;  // --near K: the sequences within K edits of the file (cmd_check_near.cpp); 0: the file alone
};
int cmd_check(const Args& a, const CheckFlags& own);
int cmd_check_near(const Args& a, int k);
int cmd_profiles(const Args& a);
int cmd_random(const Args& a);
int cmd_fingerprint(const Args& a);
int cmd_worker(const Args& a);
int cmd_expect(const Args& a);
int cmd_cost(const Args& a);
int cmd_main_job(const Args& a);  // `fsdpsim demo`: seed 000 under both profiles

struct FindingsFlags {
  bool check = false;  // --check: exit 1 when the pages are stale
  std::string issue;   // --issue REPORT: print that report's draft issue body
  bool no_run = false; // --no-run: with --issue, do not run the repro script
};
int cmd_findings(const Args& a, const FindingsFlags& own);

struct BenchFlags {
  bool model_only = false;  // --model-only: skip the real backend
  bool stability = false;   // --stability: the hunts' root-cause stability figure
  bool discovery = false;   // --discovery: time to each seed's root cause, root causes in 10 s and T s
  std::string fuzzer;       // --discovery --fuzzer PATH: the lifecycle_fuzzer binary to measure too
};
int cmd_bench(const Args& a, const BenchFlags& own);  // picks one of the three below
int cmd_bench_figures(const Args& a, bool model_only);
int cmd_bench_stability(const Args& a);
int cmd_bench_discovery(const Args& a, const std::string& fuzzer);

struct CoverageFlags {
  int worlds_lo = 1, worlds_hi = 4;  // --worlds A-B
};
int cmd_coverage(const Args& a, const CoverageFlags& own);

struct CrosscheckFlags {
  int shard_index = 0;  // --shard I/N: this job runs block I (0-based) of N
  int shard_count = 1;
  std::string results;  // --results FILE: the JSON results (merge-results reads them)
};
int cmd_crosscheck(const Args& a, const CrosscheckFlags& own);

struct ShrinkFlags {
  bool divergence = false;  // --divergence: keep a divergence between backends, not a finding
};
int cmd_shrink(const Args& a, const ShrinkFlags& own);

struct HuntFlags {
  bool model_only = false;            // --model-only: no confirmation on the real and upstream backends
  bool scripts = false;               // --scripts: each root cause's repro script run under torchrun
  bool plain_scripts = false;         // --plain-scripts: only the scripts that need no torchrun (see run_scripts)
  bool fail_on_unreported = false;    // exit 1 when a root cause has no upstream report (--fail-on-new too)
  bool fail_on_uncatalogued = false;  // exit 1 when a class has no regression file in --corpus
  std::string corpus;                 // --corpus DIR: the regressions the catalogue is checked against
  std::string html;                   // --html OUT.html: the catalogue as one page
  int64_t budget_sequences = 0;       // --budget-sequences N: the model's phases bounded by counts (HuntOptions)
  int64_t budget_states = 0;          // --budget-states N: the explorer's states per scenario in such a hunt
};
int cmd_hunt(const Args& a, const HuntFlags& own);

struct TriageFlags {
  bool check = false;  // --check: compare with each file's `# signature:` line
};
int cmd_triage(const Args& a, const TriageFlags& own);

struct ExportFlags {
  bool python = false;     // --python: a torchrun script
  bool no_shrink = false;  // --no-shrink: the file as written, not its triaged minimal sequence
};
int cmd_export(const Args& a, const ExportFlags& own);

struct ExploreFlags {
  std::string builtin;          // --builtin NAME
  int depth = 6;                // --depth D
  int64_t max_states = 0;       // --max-states N (0: ExploreOptions' default)
  std::string dot, svg;         // --dot FILE, --svg FILE
  bool rank_ops = false;        // --rank-ops
  bool full_alphabet = false;   // --full
  std::vector<std::string> ops; // --ops a,b (op kinds or op texts)
};
int cmd_explore(const Args& a, const ExploreFlags& own);
// bench: each built-in scenario explored to depth 4 (at most `budget` seconds each);
// a table, or with json one bench_explorer record per scenario.
void bench_explorer(std::ostream& os, double budget, bool json);

struct ReportFlags {
  std::string html;  // --html OUT.html: the page to write
};
int cmd_report(const Args& a, const ReportFlags& own);

struct RecordFlags {
  int steps = 3;  // --steps N: each loop kept to its first N iterations
};
int cmd_record(const Args& a, const RecordFlags& own);

struct ScenarioFlags {
  bool tree = false;  // --tree: the module tree a `model` line stands for
};
int cmd_scenario(const Args& a, const ScenarioFlags& own);

struct MergeResultsFlags {
  std::string results;  // --results OUT: the merged results
};
int cmd_merge_results(const Args& a, const MergeResultsFlags& own);

struct VersionsFlags {
  std::string matrix = "default";  // --matrix NAME (real_backend/upstream/matrix.txt)
  std::string bisect;     // --bisect FILE: the first release it reproduces on, the first it is gone
  std::string releases;   // --releases A..B or A,B,C (PEFT versions; "peft==" prefix allowed)
  std::string compare;    // --compare KEPT NEW: a matrix run against the kept one
  std::string peft_path;  // --peft PATH: a local PEFT checkout or wheel compared with the pinned release
};
int cmd_versions(const Args& a, const VersionsFlags& own);

}  // namespace fsdpsim::cli
