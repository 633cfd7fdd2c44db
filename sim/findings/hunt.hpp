// The hunt, the main job: over the built-in scenarios, explore, then fuzz the
// model for the rest of the budget, triage every finding into its class,
// confirm each class's minimal sequence on the real backend and (when .venv is
// installed) on upstream, and print the catalogue of classes.
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <map>
#include <string>
#include <vector>

#include "sim/core/crosscheck.hpp"
#include "sim/findings/finding_reports.hpp"
#include "sim/core/project_data.hpp"
#include "sim/findings/root_cause_catalogue.hpp"
#include "sim/findings/triage.hpp"

namespace fsdpsim {

// A class's confirmation on a backend that the hunt's deadline came before: neither
// confirmed nor a disagreement (hunt_exit_code counts it as neither).
inline const std::string kNotConfirmedBudget = "not confirmed (time budget)";
// One a signal (HuntOptions::stop) came before, or cut short while it ran.
inline const std::string kNotConfirmedInterrupted = "not confirmed (interrupted)";
// One the backend does not implement (the C++ backend refuses the scenario: crosscheck.hpp's
// real_backend_refusal): not asked, so neither confirmed nor a disagreement.
inline const std::string kNotRunThere = "not run (not implemented there)";

struct NamedScenario {
  std::string name;  // "seed000"
  SeqFile file;      // the scenario with its lifecycle's ops
};

// The explorer's hook: the shortest sequences reaching each finding class from
// a scenario's start, within `seconds`. Empty: the hunt fuzzes only.
// The explorer's finding sequences from a scenario, within `seconds` (0: no limit) and
// `max_states` (0: the explorer's own cap).
using ExploreHook = std::function<std::vector<SeqFile>(const SeqFile& scenario, double seconds, int64_t max_states)>;

// The hunt's default budgets (`fsdpsim hunt` without --seconds): the usage, the guide and the hunt's
// first line all print these. The model gets 10 s either way: a third of 30, or all of 10 with --model-only.
constexpr int kHuntDefaultSeconds = 30;
constexpr int kHuntModelOnlyDefaultSeconds = 10;
constexpr int64_t kHuntBudgetStates = 2000;  // per scenario, in a hunt bounded by counts

struct HuntOptions {
  // The whole hunt's budget: explore, fuzz and triage in its first third (all of it when
  // nothing is confirmed), confirmation until it ends (a class the deadline leaves
  // unconfirmed says kNotConfirmedBudget). Not bounded by
  // it: the scenarios' own lifecycles (triaged whatever the budget), one confirmation already
  // under way, an upstream pool's start (about 3 s) already under way.
  double seconds = kHuntDefaultSeconds;
  // The model's phases bounded by counts, whatever the machine's load (0: by `seconds`): the
  // explorer takes up to `budget_states` states per scenario (0: kHuntBudgetStates), the fuzz loop
  // runs this many sequences, triage takes every candidate; `seconds` then bounds the
  // confirmation alone, counted from the end of triage (`hunt --budget-sequences N`).
  int64_t budget_sequences = 0;
  int64_t budget_states = 0;
  int world = 2;
  std::string profile = "upstream";
  uint64_t seed = 1;
  std::vector<NamedScenario> scenarios;
  ExploreHook explore;
  bool confirm_real = true;
  bool confirm_upstream = true;  // only when .venv is installed
  std::function<void(const std::string&)> progress;  // one line each: the phases
  // How far a phase is (fuzz ticks, each class triaged or confirmed): lines a terminal shows
  // in place of the last one. Unset: they go to `progress`.
  std::function<void(const std::string&)> status;
  // bench --discovery: called with each fuzzed sequence whose first finding's key (spec:op:status)
  // is new, and the seconds since the fuzz loop began; with fuzz_only the hunt returns after the
  // fuzz loop (no lifecycles, triage or confirmation), which then runs for `seconds` whole.
  std::function<void(const SeqFile&, double)> on_new_key;
  bool fuzz_only = false;
  // The swarm's shares of sequences with DoRA adapters and with 4-bit bases (each on a stream
  // of its own, so the other sequences stay what they were). `--scripts` writes 4-bit layers
  // as the upstream backend builds them (export.py::Writer.linear4bit).
  uint32_t swarm_dora_percent = 15;
  uint32_t swarm_qlora_percent = 10;
  // True once a signal asked the hunt to stop: every phase ends at its next sequence or class,
  // a run the signal cut short (its ranks or pool stopped) is no failure, and the report
  // holds what was found and confirmed until then (HuntReport::interrupted).
  std::function<bool()> stop;
};

struct HuntClass {
  TriageResult t;
  std::string stem;       // class_file_stem
  std::string found_by;   // "seed000", "explore seed004", "fuzz 1234567"
  int hits = 0;           // candidates that triaged into it
  std::string real = "-";      // yes | DIFFERS | no finding | kNotConfirmedBudget | -
  std::string upstream = "-";  // yes | DIFFERS | no finding | not installed | kNotConfirmedBudget | -
  std::vector<std::string> divergences;
  std::string file;  // written by write_hunt_outputs
  std::string regression;  // the corpus file whose `# signature:` is this class's ("": none), by attach_regressions
  std::vector<SingleRun> runs;  // the confirmations' runs of the minimal sequence: the model's, then each backend's
};

struct HuntReport {
  uint64_t seed = 0;
  std::string profile;
  int world = 0;
  int sequences = 0, with_findings = 0, candidates = 0, triaged = 0, explored = 0;
  double t_explore = 0, t_fuzz = 0, t_triage = 0, t_confirm = 0;
  std::vector<HuntClass> classes;
  bool infra = false;
  std::string infra_message;
  bool interrupted = false;  // HuntOptions::stop said so: a partial report
  bool upstream_installed = false;
  std::string upstream_versions;
  std::vector<std::string> upstream_unobserved;  // the fields the upstream pool does not observe (its hello)
  // --scripts: per root cause id, its shortest class exported and run under torchrun
  // ("reproduces", "does not reproduce", "fails differently", "not exported: ...").
  std::map<std::string, std::string> scripts;
};

// True when the upstream backend's Python is there ($FSDPSIM_PYTHON or .venv).
bool upstream_installed();

HuntReport hunt(const HuntOptions& o, RealPools& pools);

// Each `# signature:` line of `files` (a corpus's .seq files, cli's seq_files), with the
// first file that carries it: what the corpus already keeps. Read line by line, unparsed.
std::map<std::string, std::string> corpus_signatures(const std::vector<std::string>& files);

// Names each class's regression file: the corpus file with its signature.
void attach_regressions(HuntReport& r, const std::map<std::string, std::string>& corpus);

// One root cause of a hunt (hunt_catalogue.cpp): the classes its mechanism explains.
struct HuntRootCause {
  RootCauseEntry entry;         // id, verdict, citations (root_cause_catalogue.hpp)
  std::vector<size_t> classes;  // indices into HuntReport::classes, shortest first
  std::string specs;            // "S1,S3"
  std::string confirmed;        // "yes" when every class was confirmed on every backend run, else what differs
  std::string how;              // the first class's blame line
  std::string page, repro;      // its finding page and script under `findings_dir`, as shown_path prints them ("": none there)
  std::string script;           // HuntReport::scripts' word for it ("": not run)
};

// One report (finding_reports.hpp) a hunt reached: the entry points its classes reach.
struct HuntReportRow {
  const FindingReport* report = nullptr;
  std::vector<std::string> reached;  // entry-point ids with at least one class, in the report's order
  size_t classes = 0;                // classes over those entry points
};
// The reports the hunt's classes reach, to file first (then follow up, then closed), table order within.
std::vector<HuntReportRow> reports_of(const HuntReport& r);

// The classes grouped by root cause, in catalogue order (verdict, then id). `findings_dir`:
// where the finding pages and scripts are looked up (the project's docs/findings, sim/core/project_data.hpp).
std::vector<HuntRootCause> root_causes_of(const HuntReport& r, const std::string& findings_dir = project_data().findings_dir());

// A backend disagreed with the model on the class's minimal sequence (DIFFERS, or no finding there).
bool class_disagrees(const HuntClass& c);

// Confirmations (class, backend) the deadline came before.
size_t unconfirmed_by_budget(const HuntReport& r);

// 4 harness failure, 2 a backend disagreed, 1 with fail_on_unreported and a root
// cause no upstream report covers (or no catalogue entry), or with fail_on_uncatalogued
// and a class the corpus lacks, 0 otherwise.
int hunt_exit_code(const HuntReport& r, bool fail_on_unreported, bool fail_on_uncatalogued = false);

// The catalogue: counts per verdict, then one row per root cause (within 120 columns).
void print_catalogue(std::ostream& os, const HuntReport& r, const std::string& findings_dir = project_data().findings_dir());

// One `.seq` per class (signature and class comments, expectations), the
// manifest and summary.json into `dir`; fills each class's `file`. The class
// files the manifest of an earlier hunt lists go first; no other file is
// removed. False with *error.
bool write_hunt_outputs(HuntReport& r, const std::string& dir, int exit_code, std::string* error);
// The manifest: the class files a hunt wrote into its --out directory, one name a line.
constexpr const char* kHuntManifest = "hunt-manifest.txt";
// The .seq names `dir`'s manifest lists (plain names in `dir` only); none without a readable one.
std::vector<std::string> hunt_manifest(const std::string& dir);

}  // namespace fsdpsim
