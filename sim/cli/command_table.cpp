// The command table (command_table.hpp): each command's row with its flags, and the usage texts read off it.
#include "sim/cli/command_table.hpp"

#include <algorithm>
#include <iostream>
#include <stdexcept>
#include <typeinfo>

#include "model/vocab/source_error.hpp"
#include "model/vocab/text.hpp"
#include "sim/cli/commands.hpp"
#include "sim/core/project_data.hpp"
#include "sim/findings/hunt.hpp"

namespace fsdpsim::cli {
namespace {

// The flags of every command that runs a sequence on the backends.
const char* kBackendNotes =
    "       (B: model, real, upstream, both = model,real, or a comma list: model,upstream, model,real,upstream;\n"
    "        the others are compared with the first, the model when listed)\n"
    "       (real backend flags: --ranks processes|threads, --timeout MS, default 5000 (the upstream pool's too),\n"
    "        --memory-budget BYTES: 512M, 8G; default half the machine's memory)\n";
const char* kUpstreamNote =
    "       (run, check, versions: --upstream peft==X[,accelerate==Y,transformers==Z], the upstream pool on that\n"
    "        release set, its environment made on first use in $FSDPSIM_RELEASES_DIR, else\n"
    "        $XDG_CACHE_HOME/fsdpsim/releases, else ~/.cache/fsdpsim/releases)\n";

const char* kUsageHead =
    "usage: fsdpsim [HUNT FLAGS]            the hunt (below); flags with no command before them are the hunt's\n";
const char* kUsageTail =
    "exit codes: 0 clean, 1 finding or failed expectation, 2 divergence between backends,\n"
    "            3 bad input or usage, 4 infrastructure failure\n"
    "every command: --quiet (no progress lines on stderr), --help; --json: one object per line, each with a\n"
    "            \"type\" (docs/cli-json.schema.json); colours only when stdout is a terminal and NO_COLOR is unset\n";

// A common flag by name, as args.cpp declares it.
Flag F(const char* name) { return common_flag(name); }

// The hunt's old spelling of --fail-on-unreported: "new" meant "no patched switch removes it".
void fail_on_new(HuntFlags& h, const std::string&) {
  std::cerr << "fsdpsim: --fail-on-new is now --fail-on-unreported (exit 1 on a root cause no upstream report covers)\n";
  h.fail_on_unreported = true;
}

// crosscheck --shard I/N: block I (0-based) of N.
void parse_shard(CrosscheckFlags& c, const std::string& v) {
  size_t slash = v.find('/');
  if (slash == std::string::npos) usage_error("--shard expects I/N (0 <= I < N), got '" + v + "'");
  c.shard_count = static_cast<int>(flag_int("--shard N", v.substr(slash + 1), 1, 100000));
  c.shard_index = static_cast<int>(flag_int("--shard I", v.substr(0, slash), 0, 100000));
  if (c.shard_index >= c.shard_count) usage_error("--shard expects I/N with 0 <= I < N, got '" + v + "'");
}

// coverage --worlds A-B (or A).
void parse_worlds(CoverageFlags& c, const std::string& v) {
  const size_t dash = v.find('-');
  c.worlds_lo = static_cast<int>(flag_int("--worlds", v.substr(0, dash), 1, 64));
  c.worlds_hi = dash == std::string::npos ? c.worlds_lo : static_cast<int>(flag_int("--worlds", v.substr(dash + 1), 1, 64));
  if (c.worlds_hi < c.worlds_lo) usage_error("--worlds expects A-B with A <= B, got '" + v + "'");
}

// explore --ops a,b: op kinds or op texts.
void parse_ops(ExploreFlags& e, const std::string& v) {
  for (const std::string& item : split(v)) {
    if (item.empty()) usage_error("--ops expects a comma list of op kinds or op texts, got '" + v + "'");
    e.ops.push_back(item);
  }
}

// Where the hunt writes without --out (cmd_hunt.cpp).
std::string hunt_out(const Args&, const HuntFlags&) { return "out/hunt"; }
// The project's own docs/findings (sim/core/project_data.hpp), wherever the user stands; --check and --issue write none.
std::string findings_out(const Args&, const FindingsFlags& f) {
  return f.check || !f.issue.empty() ? "" : project_data().findings_dir();
}

std::vector<Command> make_table() {
  std::vector<Command> t;
  t.reserve(32);  // the references `row` returns stay valid while a row is finished
  auto row = [&](Command c) -> Command& { return t.emplace_back(std::move(c)); };
  const std::string hunt_seconds = std::to_string(kHuntDefaultSeconds) + " s; " + std::to_string(kHuntModelOnlyDefaultSeconds) + " with --model-only";
  Command& hunt = row(command("hunt", cmd_hunt,
      {F("--seconds").with_help("the budget: explore and fuzz for T s (default " + hunt_seconds + ")"),
       F("--world").with_help("every built-in scenario at N ranks instead of its own"),
       with_default_path(F("--out").with_help("the catalogue, its classes and scripts go here (default out/hunt)"), hunt_out),
       own_switch("--fail-on-unreported", &HuntFlags::fail_on_unreported, "exit 1 when a root cause has no upstream report"),
       own_flag<HuntFlags>("--fail-on-new", "", "", "the old name of --fail-on-unreported (taken with a warning)", fail_on_new),
       own_switch("--fail-on-uncatalogued", &HuntFlags::fail_on_uncatalogued, "exit 1 when a class has no regression file in the corpus"),
       own_text("--corpus", "DIR", &HuntFlags::corpus, "the regression files the catalogue is checked against (default corpus/regressions, corpus/divergences)"),
       F("--profile").with_help("every built-in scenario under profile P instead of its own"), F("--seed").with_help("the seed of the fuzz loop"), F("--ranks"), F("--timeout"), F("--json"),
       F("--junit").with_help("a JUnit XML report, a testcase per class"),
       own_text("--html", "OUT.html", &HuntFlags::html, "the catalogue as one page, each class linked to its timeline", Writes::File),
       own_switch("--model-only", &HuntFlags::model_only, "no confirmation on the real and upstream backends"),
       own_switch("--scripts", &HuntFlags::scripts, "also export each root cause's shortest class and run it under torchrun"),
       own_switch("--plain-scripts", &HuntFlags::plain_scripts,
                  "like --scripts for the root causes whose class shows without FSDP only: plain python, no torchrun (seconds, not minutes)"),
       own_int("--budget-sequences", "N", &HuntFlags::budget_sequences, 1, int64_t{1} << 40,
               "the model's phases bounded by counts: N fuzzed sequences, every candidate triaged; --seconds bounds confirmation alone"),
       own_int("--budget-states", "N", &HuntFlags::budget_states, 1, int64_t{1} << 40,
               "with --budget-sequences: the explorer's states per scenario (default 2000)")},
      "       fsdpsim hunt [--seconds T] [--world W] [--out DIR] [--fail-on-unreported] [--profile P] [--seed S] [--json]\n"
      "                    [--model-only]     no confirmation on the real and upstream backends\n"
      "                    [--scripts]        also export each root cause's shortest class and run it under torchrun\n"
      "                    [--plain-scripts]  only the scripts of root causes that show without FSDP (plain python)\n"
      "                    [--corpus DIR] [--fail-on-uncatalogued]   (default corpus/regressions and corpus/divergences: each class's regression file)\n"
      "                    [--junit FILE]     a testcase per class\n"
      "                    [--html OUT.html]  the catalogue as one page, each class linked to its timeline\n"
      "                    [--budget-sequences N [--budget-states M]]   the model's phases by counts, whatever the load\n"
      "                                             explore and fuzz the built-in scenarios for T s (default @HUNT_SECONDS@),\n"
      "                                             triage into classes, confirm on real (and upstream), catalogue\n"));
  hunt.lists_builtins = true;
  hunt.help_word = false;
  row(command("triage", cmd_triage,
      {own_switch("--check", &TriageFlags::check, "exit 1 where a file's `# signature:` line differs from its class"),
       F("--out").with_help("each class's minimal sequence written here"), F("--profile"), F("--set"), F("--world"), F("--json")},
       "       fsdpsim triage PATH... [--check] [--out DIR] [--profile P] [--set k=v] [--world N] [--json]\n"
       "                                             each file's class signature and root cause\n"));
  row(command("findings", cmd_findings,
      {own_switch("--check", &FindingsFlags::check, "exit 1 when DIR is stale, writing nothing"),
       with_default_path(F("--out").with_help("the finding pages' directory (default the project's docs/findings)"), findings_out),
       own_text("--issue", "REPORT", &FindingsFlags::issue, "print REPORT's draft issue body, its repro run now"),
       own_switch("--no-run", &FindingsFlags::no_run, "with --issue: do not run the repro"),
       F("--timeout").with_help("with --issue: the repro's timeout in ms (default 300 s)")},
       "       fsdpsim findings [PATH...] [--out DIR] [--check]   the finding pages (default DIR docs/findings) from the\n"
       "                                             root-cause catalogue, DIR's minimal sequences and corpus/;\n"
       "                                             --check: exit 1 when DIR is stale\n"
       "       fsdpsim findings --issue REPORT [--no-run] [--timeout MS]   a draft issue body for REPORT, its repro run now\n"));
  row(command("demo", cmd_main_job, {F("--wide")},
       "       fsdpsim demo [--wide]                 seed 000 replayed under upstream and patched\n")).help_word = false;
  row(command("run", cmd_run,
      {F("--memory-budget"), F("--backend"), F("--profile"), F("--set"), F("--world"), F("--json"), F("--ranks"), F("--timeout"), F("--upstream"),
       F("--wide")},
       "       fsdpsim run FILE.seq [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
       "                    [--wide]           the table's cells whole (default: cut to fit 120 columns)\n")).backend_notes = true;
  row(command("check", cmd_check,
      {F("--memory-budget"), F("--backend"), F("--profile"), F("--set"), F("--ranks"), F("--timeout"), F("--json"),
       F("--junit").with_help("a JUnit XML report, a testcase per file"), F("--upstream"),
       own_int("--near", "K", &CheckFlags::near, 1, 2,
               "one FILE.seq and every sequence within K (1, 2) edits of its own ops, on the model; classes confirmed on the other backends"),
       F("--wide")},
       "       fsdpsim check PATH... [--backend B] [--profile P] [--set k=v] [--json] [--junit FILE]   a testcase per file\n"
       "       fsdpsim check FILE.seq --near K [--backend model,upstream] [--json] [--wide]   the finding classes K edits away\n")).backend_notes = true;
  row(command("crosscheck", cmd_crosscheck,
      {F("--seed"), F("--count").with_help("how many sequences, one per seed from S (default 1)"), F("--world").with_help("every sequence at N ranks (default 1..4 in turn)"),
       F("--profile").with_help("every sequence under profile P"), F("--out").with_help("each diverging sequence written here (default crosscheck-S)"), F("--ranks"), F("--timeout"),
       F("--against"), F("--backends"),
       own_flag<CrosscheckFlags>("--shard", "I/N", "0/2", "run block I (0-based) of N of the seed range", parse_shard),
       own_text("--results", "FILE", &CrosscheckFlags::results, "the results as JSON, for merge-results", Writes::File), F("--json"),
       F("--junit").with_help("a JUnit XML report, a testcase per sequence, failing where it diverges"), F("--draw")},
       "       fsdpsim crosscheck --seed S [--count N] [--world W] [--profile P] [--out DIR]\n"
       "                          [--against real|upstream | --backends B,B[,B]]   (default model,real)\n"
       "                          [--shard I/N] [--results FILE]   block I (0-based) of N of the seed range;\n"
       "                                             the results as JSON, for merge-results\n"
       "                          [--json] [--junit FILE]   a testcase per sequence, failing where it diverges\n"
       "                          [--draw checkpoint=P,gradient_sync=P,per_rank_data=P,modules_to_save=P,grouped=P,mixed_precision=P,dora=P,qlora=P]\n"
       "                                             optional draws, in percent; --draw all[,mixed_precision=P,dora=P,qlora=P]\n"
       "                                             draws the whole vocabulary (all2: every op kind too)\n"))
      .backend_notes = true;
  row(command("merge-results", cmd_merge_results,
      {own_text("--results", "OUT", &MergeResultsFlags::results, "the merged results written as one results file", Writes::File), F("--json")},
       "       fsdpsim merge-results FILE... [--results OUT] [--json]   the shards' results as one run's\n", kBackendNotes));
  row(command("worker", cmd_worker, {F("--timeout").with_help("the rank's timeout (100..600000, default 5000)")},
       "       fsdpsim worker FILE.seq [--timeout MS]   one rank of a torchrun-style launch (RANK, WORLD_SIZE,\n"
       "                                             MASTER_ADDR, MASTER_PORT); rank 0 prints the observations\n"));
  row(command("shrink", cmd_shrink,
      {F("--memory-budget"), F("--profile"), F("--set"), F("--world"),
       own_switch("--divergence", &ShrinkFlags::divergence, "keep a divergence between the backends, not the first finding"),
       F("--backend").with_help("with --divergence: the backends compared (default model,real)"), F("--ranks"), F("--timeout"), F("--json")},
       "       fsdpsim shrink FILE.seq [--profile P] [--set k=v] [--world N] [--json]\n"
       "       fsdpsim shrink FILE.seq --divergence [--backend B] [--json]   keep a divergence (default model,real)\n"))
      .backend_notes = true;
  row(command("expect", cmd_expect, {F("--profile"), F("--set"), F("--world")},
       "       fsdpsim expect FILE.seq [--profile P] [--set k=v] [--world N]   the file with expectations from a model run\n"));
  row(command("cost", cmd_cost, {F("--memory-budget"), F("--backend"), F("--profile"), F("--set"), F("--world"), F("--ranks"), F("--timeout"), F("--json")},
       "       fsdpsim cost FILE.seq [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
       "                                             bytes per rank and adapter: sharded, gathered and reduced\n"
       "                                             per train_step, peak unsharded\n"))
      .backend_notes = true;
  row(command("scenario", cmd_scenario,
      {own_switch("--tree", &ScenarioFlags::tree, "the module tree of the file's `model` line: modules, parameters, tied weights")},
       "       fsdpsim scenario FILE.seq [--tree]  the file as the parser reads it (canonical form); --tree: its `model`\n"
       "                                             line's modules and parameters as transformers builds them\n"));
  row(command("record", cmd_record,
      {F("--out").writing(Writes::File, "FILE.seq").with_help("the recorded sequence's file (default: printed; the command's stdout then goes to stderr)"),
       own_int("--steps", "N", &RecordFlags::steps, 1, 100000, "each loop kept to its first N iterations (default 3)"),
       F("--seconds").with_help("the command's time limit in seconds (default 900): past it every process of the run is stopped")},
       "       fsdpsim record [--out FILE.seq] [--steps N] [--seconds T] -- COMMAND...   runs COMMAND (python or torchrun)\n"
       "                                             with a tracer of its PEFT / FSDP calls; writes them as a .seq\n"))
      .takes_command = true;
  row(command("profiles", cmd_profiles, {F("--json")}, "       fsdpsim profiles [--json]\n")).help_word = false;
  row(command("random", cmd_random,
      {F("--seed"), F("--count").with_help("how many sequences, one per seed from S (default 1)"), F("--world").with_help("every sequence at W ranks"),
       F("--out").with_help("the sequences written here as .seq files (default: printed)"), F("--json"), F("--draw")},
       "       fsdpsim random --seed S [--count N] [--world W] [--draw ...] [--out DIR] [--json]\n"));
  row(command("coverage", cmd_coverage,
      {F("--seed"), F("--count").with_help("how many sequences, one per seed from S"), F("--world").with_help("every sequence at W ranks"),
       own_flag<CoverageFlags>("--worlds", "A-B", "1-2", "the sequences' worlds drawn from A..B (default 1-4)", parse_worlds), F("--draw"), F("--json")},
       "       fsdpsim coverage [--seed S] [--count N] [--world W | --worlds A-B] [--draw ...] [--json]\n"));
  row(command("fingerprint", cmd_fingerprint,
      {F("--seed"), F("--count").with_help("how many sequences, one per seed from S"), F("--backend").with_help("the backend whose observations are hashed: model, real or upstream"),
       F("--world").with_help("every sequence at W ranks (default 1..4 in turn)"), F("--profile").with_help("every sequence under profile P"), F("--draw"), F("--ranks"), F("--timeout"), F("--json"),
       F("--wide").with_help("a line per sequence (seed, world, hash), to diff two runs")},
       "       fsdpsim fingerprint --seed S [--count N] [--backend model|real|upstream] [--world W] [--profile P] [--draw ...] [--json]\n"
       "                    [--wide]                 one hash over N generated sequences and the backend's observations\n"
       "                                             (worlds 1..4 in turn unless --world): unchanged by a refactoring;\n"
       "                                             --wide: a line per sequence (seed, world, hash) to diff two runs\n"));
  row(command("bench", cmd_bench,
      {F("--seconds").with_help("each figure's budget in seconds (with --discovery: each seed's, default 60)"), own_switch("--model-only", &BenchFlags::model_only, "skip the real backend's figures"),
       F("--timeout"), F("--json"), own_switch("--stability", &BenchFlags::stability, "five hunts (seeds 1..5): union of root causes / largest"),
       own_switch("--discovery", &BenchFlags::discovery, "the hunt's fuzz loop over seeds 1..5: time to each seed's root cause"),
       own_text("--fuzzer", "PATH", &BenchFlags::fuzzer, "with --discovery: the lifecycle_fuzzer binary measured too")},
       "       fsdpsim bench [--seconds T] [--model-only] [--json]\n"
       "       fsdpsim bench --stability [--seconds T] [--json]   five hunts (seeds 1..5): union of root causes / largest\n"
       "       fsdpsim bench --discovery [--seconds T] [--fuzzer PATH] [--json]   the hunt's fuzz loop (and lifecycle_fuzzer)\n"
       "                                             over seeds 1..5, T s each (default 60): median time to each seed\n"
       "                                             scenario's root cause, root causes reached in 10 s and in T s\n"));
  row(command("export", cmd_export,
      {own_switch("--python", &ExportFlags::python, "a torchrun (or plain python) script asserting the file's triaged finding"),
       own_switch("--no-shrink", &ExportFlags::no_shrink, "the file as written, not its triaged minimal sequence"),
       F("--out").writing(Writes::File, "PATH").with_help("the script's file (default: printed)"), F("--profile"), F("--set"), F("--world")},
       "       fsdpsim export FILE.seq --python [--no-shrink] [--out PATH] [--profile P] [--set k=v] [--world N]\n"));
  row(command("explore", cmd_explore,
      {own_text("--builtin", "NAME", &ExploreFlags::builtin, "start from a built-in scenario (listed below) instead of FILE.seq"),
       own_int("--depth", "D", &ExploreFlags::depth, 0, 64, "the longest sequence searched (default 6; 0: until exhausted or a cap)"), F("--world"),
       F("--profile"), F("--set"), own_switch("--rank-ops", &ExploreFlags::rank_ops, "also @R variants of ops a user may run on one rank (classes marked rank-divergent)"),
       own_switch("--full", &ExploreFlags::full_alphabet, "every variant of each op, not the core alphabet of one op per lifecycle effect"),
       own_flag<ExploreFlags>("--ops", "K,K", "merge,eval", "only these op kinds or op texts, each in the alphabet", parse_ops),
       F("--seconds").with_help("stop after T s"), F("--out").with_help("each finding class's shortest sequence written here"),
       own_text("--dot", "FILE", &ExploreFlags::dot, "the state graph as Graphviz dot", Writes::File),
       own_text("--svg", "FILE", &ExploreFlags::svg, "the state graph drawn as SVG", Writes::File), F("--json"),
       own_int("--max-states", "N", &ExploreFlags::max_states, 1, int64_t{1} << 40, "stop after N states (default 1000000)"),
       F("--memory-budget").with_help("stop when the search holds BYTES (512M, 8G; default half the memory)")},
       "       fsdpsim explore [FILE.seq | --builtin NAME] [--depth D] [--world W] [--profile P] [--set k=v]\n"
       "                       [--rank-ops] [--full] [--ops K,K] [--seconds T] [--out DIR] [--dot FILE] [--svg FILE] [--json]\n"
       "                       [--max-states N] [--memory-budget BYTES]\n"
       "                                             breadth-first search over the model's states (--depth 0: until\n"
       "                                             exhausted or a cap: 1000000 states, the memory budget); the shortest\n"
       "                                             sequence of each finding class\n"))
      .lists_builtins = true;
  row(command("report", cmd_report,
      {F("--memory-budget"), own_text("--html", "OUT.html", &ReportFlags::html, "the page written: the sequence as one self-contained timeline", Writes::File),
       F("--backend"), F("--profile"), F("--set"), F("--world"), F("--ranks"), F("--timeout"), F("--json")},
       "       fsdpsim report FILE.seq --html OUT.html [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
       "                                             the sequence drawn as one self-contained HTML timeline\n"))
      .backend_notes = true;
  Command& versions = row(command("versions", cmd_versions,
      {own_text("--matrix", "NAME", &VersionsFlags::matrix, "the matrix of release sets (real_backend/upstream/matrix.txt, default `default`)"),
       F("--upstream").with_help("one release set instead of a matrix"), F("--timeout"), F("--json"),
       own_text("--bisect", "FILE", &VersionsFlags::bisect, "the first PEFT release FILE reproduces on and the first it is gone in"),
       own_text("--releases", "A..B|A,B,C", &VersionsFlags::releases, "with --bisect: the PEFT releases searched"),
       own_text("--peft", "PATH", &VersionsFlags::peft_path, "the files whose verdict changes from the pinned PEFT to PATH (a checkout or wheel)"),
       own_text("--compare", "KEPT", &VersionsFlags::compare, "a versions --json run (NEW, the positional) against KEPT")},
       "       fsdpsim versions PATH... [--matrix NAME | --upstream SET] [--json]   each file on every release set of\n"
       "                                             a matrix (real_backend/upstream/matrix.txt, default `default`):\n"
       "                                             reproduces / does not reproduce / cannot run (exit 1: one reproduces)\n"
       "       fsdpsim versions --bisect FILE [--releases A..B | A,B,C] [--json]   the first PEFT release FILE reproduces\n"
       "                                             on and the first later one it is gone in (PyPI's releases A..B;\n"
       "                                             default the default matrix's span), a logarithmic number of probes\n"
       "       fsdpsim versions --compare KEPT NEW [--json]   NEW (a versions --json run) against KEPT: verdicts that\n"
       "                                             changed, and each fix switch against the release that shipped it\n"
       "       fsdpsim versions --peft PATH FILE... [--json]   the files whose verdict changes from the pinned PEFT\n"
       "                                             to PATH, a local checkout or wheel (exit 1: one changed)\n",
       kUpstreamNote));
  // --against names a backend on every command that takes it (crosscheck --against real|upstream).
  versions.renamed = {{"--against", "versions --against PATH is now versions --peft PATH (a local PEFT checkout or wheel); "
                                    "--against names a backend (crosscheck --against real|upstream)"}};
  // A flag stores into Args or into its command's own struct, never another command's.
  for (const Command& c : t)
    for (const Flag& f : c.flags)
      if (f.own_type && *f.own_type != *c.own_type)
        throw std::logic_error(std::string("command table: ") + c.name + "'s " + f.name + " stores into another command's options");
  return t;
}

// The hunt's default budgets, from sim/findings/hunt.hpp (the one place they are set).
std::string with_hunt_seconds(std::string u) {
  const std::string mark = "@HUNT_SECONDS@";
  const size_t at = u.find(mark);
  if (at != std::string::npos)
    u.replace(at, mark.size(),
              std::to_string(kHuntDefaultSeconds) + "; " + std::to_string(kHuntModelOnlyDefaultSeconds) + " with --model-only");
  return u;
}

}  // namespace

const std::vector<Command>& command_table() {
  static const std::vector<Command> table = make_table();
  return table;
}

const Command* find_command(const std::string& name) {
  for (const Command& c : command_table())
    if (name == c.name) return &c;
  return nullptr;
}

const std::string& full_usage() {
  static const std::string text = [] {
    std::string u = kUsageHead;
    for (const Command& c : command_table()) u += with_hunt_seconds(c.usage) + c.notes;
    return u + kUsageTail;
  }();
  return text;
}

// `CMD --help`'s list of the row's flags: each with what it takes and its help line.
std::string flag_list(const Command& c) {
  std::string out = std::string("flags of ") + c.name + " (and --quiet, --help):\n";
  for (const Flag& f : c.flags) {
    std::string left = "  " + f.name + (f.is_switch() ? "" : " " + f.value);
    left.resize(std::max(left.size() + 2, size_t{29}), ' ');
    out += left + f.help + "\n";
  }
  return out;
}

std::string command_usage(const Command& c) {
  // The shared notes stand where `fsdpsim --help` has them, before or after the command's own lines.
  std::string out;
  for (const Command& other : command_table()) {
    if (&other == &c) out += with_hunt_seconds(c.usage);
    if (c.backend_notes) out += other.notes;
  }
  return out + flag_list(c) + kUsageTail;
}

Command command(const char* name, int (*handler)(const Args&), std::vector<Flag> flags, const char* usage, const char* notes) {
  Command c{name, std::move(flags), usage, notes};
  c.make_own = [] { return std::static_pointer_cast<void>(std::make_shared<NoOwnFlags>()); };
  c.run = [handler](const Args& a, const void*) { return handler(a); };
  c.own_type = &typeid(NoOwnFlags);
  return c;
}

}  // namespace fsdpsim::cli
