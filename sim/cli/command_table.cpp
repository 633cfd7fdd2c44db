// The command table (command_table.hpp): each command's row, and the usage texts read off it.
#include "sim/cli/command_table.hpp"

#include "model/vocab/source_error.hpp"
#include "sim/findings/hunt.hpp"

namespace fsdpsim::cli {
namespace {

// bench is three commands behind one name: --stability and --discovery pick the other two.
int run_bench(const Args& a) {
  if (a.stability && a.discovery) throw SourceError("<command line>", {}, "bench takes --stability or --discovery, not both");
  if (!a.fuzzer.empty() && !a.discovery) throw SourceError("<command line>", {}, "--fuzzer goes with bench --discovery");
  return a.stability ? cmd_bench_stability(a) : a.discovery ? cmd_bench_discovery(a) : cmd_bench(a);
}

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

std::vector<Command> make_table() {
  std::vector<Command> t;
  t.reserve(32);  // the references `row` returns stay valid while a row is finished
  auto row = [&](Command c) -> Command& { return t.emplace_back(std::move(c)); };
  Command& hunt = row({"hunt", cmd_hunt,
      {"--seconds", "--world", "--out", "--fail-on-unreported", "--fail-on-new", "--fail-on-uncatalogued", "--corpus", "--profile", "--seed",
       "--ranks", "--timeout", "--json", "--junit", "--html", "--model-only", "--scripts"},
      "       fsdpsim hunt [--seconds T] [--world W] [--out DIR] [--fail-on-unreported] [--profile P] [--seed S] [--json]\n"
      "                    [--model-only]     no confirmation on the real and upstream backends\n"
      "                    [--scripts]        also export each root cause's shortest class and run it under torchrun\n"
      "                    [--corpus DIR] [--fail-on-uncatalogued]   (default corpus/regressions and corpus/divergences: each class's regression file)\n"
      "                    [--junit FILE]     a testcase per class\n"
      "                    [--html OUT.html]  the catalogue as one page, each class linked to its timeline\n"
      "                                             explore and fuzz the built-in scenarios for T s (default @HUNT_SECONDS@),\n"
      "                                             triage into classes, confirm on real (and upstream), catalogue\n"});
  hunt.lists_builtins = true;
  hunt.help_word = false;
  row({"triage", cmd_triage, {"--check", "--out", "--profile", "--set", "--world", "--json"},
       "       fsdpsim triage PATH... [--check] [--out DIR] [--profile P] [--set k=v] [--world N] [--json]\n"
       "                                             each file's class signature and root cause\n"});
  row({"findings", cmd_findings, {"--check", "--out", "--issue", "--no-run", "--timeout"},
       "       fsdpsim findings [PATH...] [--out DIR] [--check]   the finding pages (default DIR docs/findings) from the\n"
       "                                             root-cause catalogue, DIR's minimal sequences and corpus/;\n"
       "                                             --check: exit 1 when DIR is stale\n"
       "       fsdpsim findings --issue REPORT [--no-run] [--timeout MS]   a draft issue body for REPORT, its repro run now\n"});
  row({"demo", cmd_main_job, {"--wide"}, "       fsdpsim demo [--wide]                 seed 000 replayed under upstream and patched\n"}).help_word = false;
  row({"run", cmd_run, {"--memory-budget", "--backend", "--profile", "--set", "--world", "--json", "--ranks", "--timeout", "--upstream", "--wide"},
       "       fsdpsim run FILE.seq [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
       "                    [--wide]           the table's cells whole (default: cut to fit 120 columns)\n"}).backend_notes = true;
  row({"check", cmd_check, {"--memory-budget", "--backend", "--profile", "--set", "--ranks", "--timeout", "--json", "--junit", "--upstream"},
       "       fsdpsim check PATH... [--backend B] [--profile P] [--set k=v] [--json] [--junit FILE]   a testcase per file\n"}).backend_notes = true;
  row({"crosscheck", cmd_crosscheck,
       {"--seed", "--count", "--world", "--profile", "--out", "--ranks", "--timeout", "--against", "--backends", "--shard", "--results", "--json",
        "--junit", "--draw"},
       "       fsdpsim crosscheck --seed S [--count N] [--world W] [--profile P] [--out DIR]\n"
       "                          [--against real|upstream | --backends B,B[,B]]   (default model,real)\n"
       "                          [--shard I/N] [--results FILE]   block I (0-based) of N of the seed range;\n"
       "                                             the results as JSON, for merge-results\n"
       "                          [--json] [--junit FILE]   a testcase per sequence, failing where it diverges\n"
       "                          [--draw checkpoint=P,gradient_sync=P,per_rank_data=P,modules_to_save=P,grouped=P]   optional draws, in percent\n"})
      .backend_notes = true;
  row({"merge-results", cmd_merge_results, {"--results", "--json"},
       "       fsdpsim merge-results FILE... [--results OUT] [--json]   the shards' results as one run's\n", kBackendNotes});
  row({"worker", cmd_worker, {"--timeout"},
       "       fsdpsim worker FILE.seq [--timeout MS]   one rank of a torchrun-style launch (RANK, WORLD_SIZE,\n"
       "                                             MASTER_ADDR, MASTER_PORT); rank 0 prints the observations\n"});
  row({"shrink", cmd_shrink, {"--memory-budget", "--profile", "--set", "--world", "--divergence", "--backend", "--ranks", "--timeout", "--json"},
       "       fsdpsim shrink FILE.seq [--profile P] [--set k=v] [--world N] [--json]\n"
       "       fsdpsim shrink FILE.seq --divergence [--backend B] [--json]   keep a divergence (default model,real)\n"})
      .backend_notes = true;
  row({"expect", cmd_expect, {"--profile", "--set", "--world"},
       "       fsdpsim expect FILE.seq [--profile P] [--set k=v] [--world N]   the file with expectations from a model run\n"});
  row({"cost", cmd_cost, {"--memory-budget", "--backend", "--profile", "--set", "--world", "--ranks", "--timeout", "--json"},
       "       fsdpsim cost FILE.seq [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
       "                                             bytes per rank and adapter: sharded, gathered and reduced\n"
       "                                             per train_step, peak unsharded\n"})
      .backend_notes = true;
  row({"profiles", cmd_profiles, {"--json"}, "       fsdpsim profiles [--json]\n"}).help_word = false;
  row({"random", cmd_random, {"--seed", "--count", "--world", "--out", "--json", "--draw"},
       "       fsdpsim random --seed S [--count N] [--world W] [--draw ...] [--out DIR] [--json]\n"});
  row({"coverage", cmd_coverage, {"--seed", "--count", "--world", "--worlds", "--draw", "--json"},
       "       fsdpsim coverage [--seed S] [--count N] [--world W | --worlds A-B] [--draw ...] [--json]\n"});
  row({"fingerprint", cmd_fingerprint, {"--seed", "--count", "--backend", "--world", "--profile", "--draw", "--ranks", "--timeout", "--json", "--wide"},
       "       fsdpsim fingerprint --seed S [--count N] [--backend model|real|upstream] [--world W] [--profile P] [--draw ...] [--json]\n"
       "                    [--wide]                 one hash over N generated sequences and the backend's observations\n"
       "                                             (worlds 1..4 in turn unless --world): unchanged by a refactoring;\n"
       "                                             --wide: a line per sequence (seed, world, hash) to diff two runs\n"});
  row({"bench", run_bench, {"--seconds", "--model-only", "--timeout", "--json", "--stability", "--discovery", "--fuzzer"},
       "       fsdpsim bench [--seconds T] [--model-only] [--json]\n"
       "       fsdpsim bench --stability [--seconds T] [--json]   five hunts (seeds 1..5): union of root causes / largest\n"
       "       fsdpsim bench --discovery [--seconds T] [--fuzzer PATH] [--json]   the hunt's fuzz loop (and lifecycle_fuzzer)\n"
       "                                             over seeds 1..5, T s each (default 60): median time to each seed\n"
       "                                             scenario's root cause, root causes reached in 10 s and in T s\n"});
  row({"export", cmd_export, {"--python", "--no-shrink", "--out", "--profile", "--set", "--world"},
       "       fsdpsim export FILE.seq --python [--no-shrink] [--out PATH] [--profile P] [--set k=v] [--world N]\n"});
  row({"explore", cmd_explore,
       {"--builtin", "--depth", "--world", "--profile", "--set", "--rank-ops", "--full", "--ops", "--seconds", "--out", "--dot", "--svg", "--json",
        "--max-states", "--memory-budget"},
       "       fsdpsim explore [FILE.seq | --builtin NAME] [--depth D] [--world W] [--profile P] [--set k=v]\n"
       "                       [--rank-ops] [--full] [--ops K,K] [--seconds T] [--out DIR] [--dot FILE] [--svg FILE] [--json]\n"
       "                       [--max-states N] [--memory-budget BYTES]\n"
       "                                             breadth-first search over the model's states (--depth 0: until\n"
       "                                             exhausted or a cap: 1000000 states, the memory budget); the shortest\n"
       "                                             sequence of each finding class\n"})
      .lists_builtins = true;
  row({"report", cmd_report, {"--memory-budget", "--html", "--backend", "--profile", "--set", "--world", "--ranks", "--timeout", "--json"},
       "       fsdpsim report FILE.seq --html OUT.html [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
       "                                             the sequence drawn as one self-contained HTML timeline\n"})
      .backend_notes = true;
  Command& versions = row({"versions", cmd_versions, {"--matrix", "--upstream", "--timeout", "--json", "--bisect", "--releases", "--peft", "--compare"},
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
       kUpstreamNote});
  // --against names a backend on every command that takes it (crosscheck --against real|upstream).
  versions.renamed = {{"--against", "versions --against PATH is now versions --peft PATH (a local PEFT checkout or wheel); "
                                    "--against names a backend (crosscheck --against real|upstream)"}};
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

std::string command_usage(const Command& c) {
  // The shared notes stand where `fsdpsim --help` has them, before or after the command's own lines.
  std::string out;
  for (const Command& other : command_table()) {
    if (&other == &c) out += with_hunt_seconds(c.usage);
    if (c.backend_notes) out += other.notes;
  }
  return out + kUsageTail;
}

}  // namespace fsdpsim::cli
