// fsdpsim: the command line. Dispatches subcommands and maps every error to
// its exit code; no exception escapes as a crash.
#include <iostream>
#include <sstream>
#include <string>

#include "model/vocab/suggest.hpp"
#include "sim/core/builtin_scenarios.hpp"
#include "sim/findings/hunt.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/output.hpp"

using namespace fsdpsim;
using namespace fsdpsim::cli;

namespace {

const char* kUsage =
    "usage: fsdpsim [HUNT FLAGS]            the hunt (below); flags with no command before them are the hunt's\n"
    "       fsdpsim hunt [--seconds T] [--world W] [--out DIR] [--fail-on-unreported] [--profile P] [--seed S] [--json]\n"
    "                    [--model-only]     no confirmation on the real and upstream backends\n"
    "                    [--scripts]        also export each root cause's shortest class and run it under torchrun\n"
    "                    [--corpus DIR] [--fail-on-uncatalogued]   (default corpus/regressions and corpus/divergences: each class's regression file)\n"
    "                    [--junit FILE]     a testcase per class\n"
    "                    [--html OUT.html]  the catalogue as one page, each class linked to its timeline\n"
    "                                             explore and fuzz the built-in scenarios for T s (default @HUNT_SECONDS@),\n"
    "                                             triage into classes, confirm on real (and upstream), catalogue\n"
    "       fsdpsim triage PATH... [--check] [--out DIR] [--profile P] [--json]   each file's class signature and root cause\n"
    "       fsdpsim findings [PATH...] [--out DIR] [--check]   the finding pages (default DIR docs/findings) from the\n"
    "                                             root-cause catalogue, DIR's minimal sequences and corpus/;\n"
    "                                             --check: exit 1 when DIR is stale\n"
    "       fsdpsim findings --issue REPORT [--no-run] [--timeout MS]   a draft issue body for REPORT, its repro run now\n"
    "       fsdpsim demo [--wide]                 seed 000 replayed under upstream and patched\n"
    "       fsdpsim run FILE.seq [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
    "                    [--wide]           the table's cells whole (default: cut to fit 120 columns)\n"
    "       fsdpsim check PATH... [--backend B] [--profile P] [--set k=v] [--json] [--junit FILE]   a testcase per file\n"
    "       fsdpsim crosscheck --seed S [--count N] [--world W] [--profile P] [--out DIR]\n"
    "                          [--against real|upstream | --backends B,B[,B]]   (default model,real)\n"
    "                          [--shard I/N] [--results FILE]   block I (0-based) of N of the seed range;\n"
    "                                             the results as JSON, for merge-results\n"
    "                          [--json] [--junit FILE]   a testcase per sequence, failing where it diverges\n"
    "                          [--draw checkpoint=P,gradient_sync=P,per_rank_data=P,modules_to_save=P,grouped=P]   optional draws, in percent\n"
    "       fsdpsim merge-results FILE... [--results OUT] [--json]   the shards' results as one run's\n"
    "       (B: model, real, upstream, both = model,real, or a comma list: model,upstream, model,real,upstream;\n"
    "        the others are compared with the first, the model when listed)\n"
    "       (real backend flags: --ranks processes|threads, --timeout MS, default 5000 (the upstream pool's too),\n"
    "        --memory-budget BYTES: 512M, 8G; default half the machine's memory)\n"
    "       fsdpsim worker FILE.seq [--timeout MS]   one rank of a torchrun-style launch (RANK, WORLD_SIZE,\n"
    "                                             MASTER_ADDR, MASTER_PORT); rank 0 prints the observations\n"
    "       fsdpsim shrink FILE.seq [--profile P] [--set k=v] [--world N] [--json]\n"
    "       fsdpsim shrink FILE.seq --divergence [--backend B] [--json]   keep a divergence (default model,real)\n"
    "       fsdpsim expect FILE.seq [--world N]    the file with expectations from a model run\n"
    "       fsdpsim cost FILE.seq [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
    "                                             bytes per rank and adapter: sharded, gathered and reduced\n"
    "                                             per train_step, peak unsharded\n"
    "       fsdpsim profiles [--json]\n"
    "       fsdpsim random --seed S [--count N] [--world W] [--draw ...] [--out DIR] [--json]\n"
    "       fsdpsim coverage [--seed S] [--count N] [--world W | --worlds A-B] [--draw ...] [--json]\n"
    "       fsdpsim fingerprint --seed S [--count N] [--backend model|real|upstream] [--world W] [--profile P] [--draw ...] [--json]\n"
    "                                             one hash over N generated sequences and the backend's observations\n"
    "                                             (worlds 1..4 in turn unless --world): unchanged by a refactoring\n"
    "       fsdpsim bench [--seconds T] [--model-only] [--json]\n"
    "       fsdpsim bench --stability [--seconds T] [--json]   five hunts (seeds 1..5): union of root causes / largest\n"
    "       fsdpsim bench --discovery [--seconds T] [--fuzzer PATH] [--json]   the hunt's fuzz loop (and lifecycle_fuzzer)\n"
    "                                             over seeds 1..5, T s each (default 60): median time to each seed\n"
    "                                             scenario's root cause, root causes reached in 10 s and in T s\n"
    "       fsdpsim export FILE.seq --python [--no-shrink] [--out PATH] [--profile P] [--set k=v] [--world N]\n"
    "       fsdpsim explore [FILE.seq | --builtin NAME] [--depth D] [--world W] [--profile P] [--set k=v]\n"
    "                       [--rank-ops] [--full] [--ops K,K] [--seconds T] [--out DIR] [--dot FILE] [--svg FILE] [--json]\n"
    "                       [--max-states N] [--memory-budget BYTES]\n"
    "                                             breadth-first search over the model's states (--depth 0: until\n"
    "                                             exhausted or a cap: 1000000 states, the memory budget); the shortest\n"
    "                                             sequence of each finding class\n"
    "       fsdpsim report FILE.seq --html OUT.html [--backend B] [--profile P] [--set k=v] [--world N] [--json]\n"
    "                                             the sequence drawn as one self-contained HTML timeline\n"
    "       fsdpsim versions PATH... [--matrix NAME | --upstream SET] [--json]   each file on every release set of\n"
    "                                             a matrix (real_backend/upstream/matrix.txt, default `default`):\n"
    "                                             reproduces / does not reproduce / cannot run (exit 1: one reproduces)\n"
    "       fsdpsim versions --bisect FILE [--releases A..B | A,B,C] [--json]   the first PEFT release FILE reproduces\n"
    "                                             on and the first later one it is gone in (PyPI's releases A..B;\n"
    "                                             default the default matrix's span), a logarithmic number of probes\n"
    "       fsdpsim versions --compare KEPT NEW [--json]   NEW (a versions --json run) against KEPT: verdicts that\n"
    "                                             changed, and each fix switch against the release that shipped it\n"
    "       fsdpsim versions --against PATH FILE... [--json]   the files whose verdict changes from the pinned PEFT\n"
    "                                             to PATH, a local checkout or wheel (exit 1: one changed)\n"
    "       (run, check, versions: --upstream peft==X[,accelerate==Y,transformers==Z], the upstream pool on that\n"
    "        release set, its environment made on first use in $FSDPSIM_RELEASES_DIR, else\n"
    "        $XDG_CACHE_HOME/fsdpsim/releases, else ~/.cache/fsdpsim/releases)\n"
    "exit codes: 0 clean, 1 finding or failed expectation, 2 divergence between backends,\n"
    "            3 bad input or usage, 4 infrastructure failure\n"
    "every command: --quiet (no progress lines on stderr), --help; --json: one object per line, each with a\n"
    "            \"type\" (docs/cli-json.schema.json); colours only when stdout is a terminal and NO_COLOR is unset\n";

// kUsage with the hunt's default budgets filled in from sim/findings/hunt.hpp, the one place they are set.
const std::string& usage() {
  static const std::string text = [] {
    std::string u = kUsage;
    const std::string mark = "@HUNT_SECONDS@";
    u.replace(u.find(mark), mark.size(),
              std::to_string(kHuntDefaultSeconds) + "; " + std::to_string(kHuntModelOnlyDefaultSeconds) + " with --model-only");
    return u;
  }();
  return text;
}

// The usage lines of one command: its own lines and their continuations, the
// notes on backends for the commands that take --backend, and the exit codes.
std::string command_usage(const std::string& cmd) {
  static const std::string with_backend = " run check crosscheck shrink cost report ";
  const bool backend_notes = with_backend.find(" " + cmd + " ") != std::string::npos;
  std::istringstream in(usage());
  std::string line, out;
  bool mine = false, note = false, exit_codes = false;
  while (std::getline(in, line)) {
    const size_t at = line.find("fsdpsim ");
    exit_codes = exit_codes || line.rfind("exit codes:", 0) == 0;
    if (exit_codes) {
      out += line + "\n";
      continue;
    }
    // a note, (B: ...) or (real backend flags: ...), and its continuation lines
    note = line.rfind("       (", 0) == 0 || (note && at == std::string::npos);
    if (note) {
      mine = false;
      if (backend_notes) out += line + "\n";
      continue;
    }
    if (at != std::string::npos && at < 16) {
      const std::string rest = line.substr(at + 8);
      mine = rest == cmd || rest.rfind(cmd + " ", 0) == 0;
    }
    if (mine) out += line + "\n";
  }
  return out;
}

// The --builtin choices, wrapped to the usage's width.
std::string builtin_usage() {
  std::string out = "built-in scenarios (explore --builtin NAME; the hunt explores them all):\n", line = "           ";
  for (const auto& b : builtin_scenarios()) {
    if (line.size() + b.name.size() + 1 > 110) {
      out += line + "\n";
      line = "           ";
    }
    line += " " + b.name;
  }
  return out + line + "\n";
}

bool asks_for_help(const std::vector<std::string>& rest) {
  for (const auto& a : rest)
    if (a == "--help" || a == "-h") return true;
  return false;
}

const char* kVersion =
    "fsdpsim " FSDPSIM_VERSION "\n"
    "upstream backend pins: torch 2.13.0, peft 0.21.2, accelerate 1.15.0 (real_backend/upstream/requirements.txt)\n";

const char* kCommands[] = {"hunt", "triage", "demo", "run", "check", "crosscheck", "merge-results", "report", "shrink",
                           "expect", "cost", "worker", "profiles", "export", "random", "coverage", "fingerprint", "explore", "bench", "findings", "versions"};

}  // namespace

namespace {

int dispatch(const std::vector<std::string>& args) {
  {
    if (args.empty()) return cmd_hunt(parse_args({}, {}));
    std::string cmd = args[0];
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      std::cout << usage() << builtin_usage();
      return kClean;
    }
    if (cmd == "--version" || cmd == "-V" || cmd == "version") {
      std::cout << kVersion;
      return kClean;
    }
    // Flags with no command before them are the default command's: `fsdpsim --seconds 3` is a hunt.
    if (cmd.rfind("--", 0) == 0) {
      rest = args;
      cmd = "hunt";
    }
    for (const char* known : kCommands)
      if (cmd == known && (asks_for_help(rest) || (cmd != "demo" && cmd != "profiles" && cmd != "hunt" && rest.size() == 1 && rest[0] == "help"))) {
        std::cout << command_usage(cmd) << (cmd == "explore" || cmd == "hunt" ? builtin_usage() : "");
        return kClean;
      }
    // Every command takes --quiet; the ones printing results take --json.
    auto flags = [&](std::vector<std::string> allowed) {
      allowed.push_back("--quiet");
      Args a = parse_args(rest, allowed);
      check_output_paths(cmd, a);  // every output path: exit 3 now, not after the work (sim/cli/output_path.hpp)
      return a;
    };
    if (cmd == "hunt")
      return cmd_hunt(flags({"--seconds", "--world", "--out", "--fail-on-unreported", "--fail-on-new", "--fail-on-uncatalogued", "--corpus",
                             "--profile", "--seed", "--ranks", "--timeout", "--json", "--junit", "--html", "--model-only", "--scripts"}));
    if (cmd == "findings") return cmd_findings(flags({"--check", "--out", "--issue", "--no-run", "--timeout"}));
    if (cmd == "triage") return cmd_triage(flags({"--check", "--out", "--profile", "--set", "--world", "--json"}));
    if (cmd == "demo") return cmd_main_job(flags({"--wide"}));
    if (cmd == "run")
      return cmd_run(flags({"--memory-budget", "--backend", "--profile", "--set", "--world", "--json", "--ranks", "--timeout", "--upstream", "--wide"}));
    if (cmd == "check")
      return cmd_check(flags({"--memory-budget", "--backend", "--profile", "--set", "--ranks", "--timeout", "--json", "--junit", "--upstream"}));
    if (cmd == "versions") return cmd_versions(flags({"--matrix", "--upstream", "--timeout", "--json", "--bisect", "--releases", "--against", "--compare"}));
    if (cmd == "crosscheck")
      return cmd_crosscheck(flags({"--seed", "--count", "--world", "--profile", "--out", "--ranks", "--timeout", "--against", "--backends",
                                   "--shard", "--results", "--json", "--junit", "--draw"}));
    if (cmd == "merge-results") return cmd_merge_results(flags({"--results", "--json"}));
    if (cmd == "report")
      return cmd_report(flags({"--memory-budget", "--html", "--backend", "--profile", "--set", "--world", "--ranks", "--timeout", "--json"}));
    if (cmd == "shrink")
      return cmd_shrink(flags({"--memory-budget", "--profile", "--set", "--world", "--divergence", "--backend", "--ranks", "--timeout", "--json"}));
    if (cmd == "expect") return cmd_expect(flags({"--profile", "--set", "--world"}));
    if (cmd == "cost") return cmd_cost(flags({"--memory-budget", "--backend", "--profile", "--set", "--world", "--ranks", "--timeout", "--json"}));
    if (cmd == "worker") return cmd_worker(flags({"--timeout"}));
    if (cmd == "profiles") return cmd_profiles(flags({"--json"}));
    if (cmd == "export") return cmd_export(flags({"--python", "--no-shrink", "--out", "--profile", "--set", "--world"}));
    if (cmd == "random") return cmd_random(flags({"--seed", "--count", "--world", "--out", "--json", "--draw"}));
    if (cmd == "coverage") return cmd_coverage(flags({"--seed", "--count", "--world", "--worlds", "--draw", "--json"}));
    if (cmd == "fingerprint")
      return cmd_fingerprint(flags({"--seed", "--count", "--backend", "--world", "--profile", "--draw", "--ranks", "--timeout", "--json"}));
    if (cmd == "explore")
      return cmd_explore(flags({"--builtin", "--depth", "--world", "--profile", "--set", "--rank-ops", "--full", "--ops", "--seconds",
                                "--out", "--dot", "--svg", "--json", "--max-states", "--memory-budget"}));
    if (cmd == "bench") {
      const Args a = flags({"--seconds", "--model-only", "--timeout", "--json", "--stability", "--discovery", "--fuzzer"});
      if (a.stability && a.discovery) throw SourceError("<command line>", {}, "bench takes --stability or --discovery, not both");
      if (!a.fuzzer.empty() && !a.discovery) throw SourceError("<command line>", {}, "--fuzzer goes with bench --discovery");
      return a.stability ? cmd_bench_stability(a) : a.discovery ? cmd_bench_discovery(a) : cmd_bench(a);
    }
    const std::string hint = did_you_mean(cmd, std::vector<std::string>(std::begin(kCommands), std::end(kCommands)));
    if (!hint.empty()) {  // one line with the fix; the whole usage only when nothing is near
      std::cerr << "fsdpsim: unknown command '" << cmd << "'" << hint << " (fsdpsim --help lists the commands)\n";
      return kBadInput;
    }
    std::cerr << "fsdpsim: unknown command '" << cmd << "'\n" << usage();
    return kBadInput;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    int rc = dispatch(args);
    flush_stdout();  // a full disk or closed pipe is exit 4, not a silent 0
    return rc;
  } catch (const WriteError& e) {
    std::cerr << "fsdpsim: " << e.what() << "\n";
    return kInfra;
  } catch (const SourceError& e) {
    std::cerr << e.what() << "\n";
    return kBadInput;
  } catch (const InfraError& e) {
    std::cerr << "fsdpsim: " << e.what() << "\n";
    return kInfra;
  } catch (const std::exception& e) {
    std::cerr << "fsdpsim: internal error: " << e.what() << "\n";
    return kInfra;
  }
}
