// `fsdpsim explore`: the state-space search of sim/core/explore.hpp from a file or
// a built-in scenario, its report, class files, and the state graph as
// Graphviz text or SVG.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "model/vocab/suggest.hpp"
#include "sim/core/builtin_scenarios.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/output.hpp"
#include "sim/cli/progress.hpp"
#include "model/vocab/table.hpp"
#include "sim/core/explore.hpp"
#include "sim/report/explore_report.hpp"
#include "real_backend/child_signal.hpp"
#include "sim/core/memory_use.hpp"

extern char** environ;

namespace fsdpsim::cli {
namespace {

// Runs Graphviz `dot -Tsvg IN -o OUT`; false (with a message) when it fails.
bool render_svg(const std::string& dot_file, const std::string& svg_file) {
  std::vector<std::string> args = {"dot", "-Tsvg", dot_file, "-o", svg_file};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, "dot", nullptr, nullptr, argv.data(), environ) != 0) {
    std::cerr << "fsdpsim explore: cannot run Graphviz `dot` (is graphviz installed?)\n";
    return false;
  }
  int status = 0;
  real::wait_child(pid, &status);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "fsdpsim explore: `dot -Tsvg " << dot_file << "` failed\n";
    return false;
  }
  return true;
}

bool write_dot_file(const std::string& path, const ExploreResult& r, int64_t* drawn) {
  std::ofstream out(path);
  *drawn = write_state_dot(out, r);
  out.close();
  if (!out) std::cerr << "fsdpsim explore: cannot write " << path << "\n";
  return static_cast<bool>(out);
}

// Before the search, which may take minutes: the drawing's files must be writable and
// Graphviz present, so a bad --dot/--svg is exit 3 at once, not after the search.
void check_drawing(const ExploreFlags& own) {
  if (!own.dot.empty()) check_output_file("--dot", own.dot);
  if (own.svg.empty()) return;
  check_output_file("--svg", own.svg);
  if (std::system("dot -V > /dev/null 2>&1") != 0) usage_error("--svg needs Graphviz `dot` on the PATH (or write --dot FILE instead)");
}

void print_explore_json(const std::string& source, const SeqFile& f, const ExploreResult& r, const std::vector<std::string>& files) {
  JsonRecord("explore_summary")
      .str("scenario", source).num("world", f.scenario.world).str("profile", f.scenario.profile)
      .num("alphabet", static_cast<int64_t>(r.alphabet.size())).num("states", r.states).num("transitions", r.transitions)
      .num("depth_reached", r.depth_reached).flag("exhausted", r.exhausted).flag("limited", r.limited).str("stopped_by", r.stopped_by).real("seconds", r.seconds)
      .real("cpu_seconds", r.cpu_seconds).num("classes", static_cast<int64_t>(r.classes.size()))
      .print(std::cout);
  for (size_t i = 0; i < r.classes.size(); ++i) {
    const FindingClass& c = r.classes[i];
    JsonRecord("explore_class")
        .str("spec", c.spec).str("op", c.op).str("symptom", c.symptom).str("text", c.text)
        .num("depth", static_cast<int64_t>(c.file.ops.size()) - static_cast<int64_t>(r.setup.size())).num("transitions", c.transitions).flag("replayed", c.replayed)
        .str("file", files[i]).str("seq", print_seq(c.file))
        .print(std::cout);
  }
}

// Every --ops item names an op kind or op text of the alphabet: a typo or an op this
// scenario never explores is refused with the nearest names, not dropped.
void check_ops(const std::vector<std::string>& ops, const std::vector<Op>& alphabet, bool full) {
  std::vector<std::string> words;  // op kinds, then op texts, each once
  for (const Op& op : alphabet)
    if (std::find(words.begin(), words.end(), op_name(op.kind)) == words.end()) words.push_back(op_name(op.kind));
  std::string kinds;
  for (const auto& w : words) kinds += (kinds.empty() ? "" : ", ") + w;
  for (const Op& op : alphabet)
    if (std::find(words.begin(), words.end(), op_text(op)) == words.end()) words.push_back(op_text(op));
  for (const auto& o : ops) {
    if (std::find(words.begin(), words.end(), o) != words.end()) continue;
    std::string hint = did_you_mean(o, words);
    if (hint.empty()) hint = " (the alphabet's op kinds: " + kinds + ")";
    bool is_kind = false;
    for (int k = 0; k < kOpKindCount; ++k) is_kind = is_kind || o == op_name(static_cast<OpKind>(k));
    if (is_kind) usage_error("--ops: '" + o + "' is not in this scenario's alphabet" + (full ? "" : " (--full adds every op variant)") + hint);
    usage_error("--ops: unknown op '" + o + "'" + hint);
  }
}

}  // namespace

void bench_explorer(std::ostream& os, double budget, bool json) {
  std::vector<std::vector<std::string>> rows = {{"explorer (core alphabet, depth 4)", "world", "states", "transitions", "states/s (CPU)", "space"}};
  for (const auto& b : builtin_scenarios()) {
    SeqFile f = b.file;
    const int pi = prepare_index(f);
    f.ops.resize(pi < 0 ? 0 : static_cast<size_t>(pi) + 1);
    ExploreOptions opt;
    opt.depth = 4;
    opt.max_seconds = budget;
    ExploreResult r = explore(f, opt);
    const char* space = r.exhausted ? "exhausted" : r.limited ? "stopped by the time limit" : "complete to depth 4";
    if (json)
      JsonRecord("bench_explorer")
          .str("scenario", b.name).num("world", f.scenario.world).num("states", r.states).num("transitions", r.transitions)
          .real("states_per_cpu_second", r.transitions == 0 ? 0.0 : r.states / std::max(r.cpu_seconds, 1e-3)).str("space", space)
          .print(os);
    rows.push_back({b.name, std::to_string(f.scenario.world), std::to_string(r.states), std::to_string(r.transitions),
                    r.transitions == 0 ? "-" : std::to_string(static_cast<int64_t>(r.states / std::max(r.cpu_seconds, 1e-3))),
                    space});
  }
  if (!json) print_aligned(os, rows);
}

int cmd_explore(const Args& a, const ExploreFlags& own) {
  SeqFile f;
  std::string source;
  if (!own.builtin.empty()) {
    if (!a.positional.empty()) usage_error("explore takes FILE.seq or --builtin NAME, not both");
    const BuiltinScenario* b = find_builtin(own.builtin);
    if (!b) {
      std::vector<std::string> names;
      for (const auto& s : builtin_scenarios()) names.push_back(s.name);
      const std::string hint = did_you_mean(own.builtin, names);
      usage_error("--builtin expects one of " + (hint.empty() ? builtin_names() : "the built-in scenarios") + ", got '" + own.builtin + "'" + hint);
    }
    f = b->file;
    source = "<built-in " + b->name + ">";
  } else {
    if (a.positional.size() != 1) usage_error("explore expects one FILE.seq or --builtin NAME");
    source = a.positional[0];
    f = parse_seq_file(source);
  }
  // Only the setup (the ops up to an explicit prepare) is kept: the explorer makes its own sequences.
  const int pi = prepare_index(f);
  f.ops.resize(pi < 0 ? 0 : static_cast<size_t>(pi) + 1);
  apply_overrides(f, a, source);

  ExploreOptions opt;
  opt.depth = own.depth;
  opt.rank_ops = own.rank_ops;
  opt.full_alphabet = own.full_alphabet;
  opt.only_ops = own.ops;
  opt.max_seconds = a.have_seconds ? a.seconds : 0;
  if (own.max_states > 0) opt.max_states = own.max_states;
  opt.max_bytes = a.memory_budget > 0 ? a.memory_budget : default_memory_budget();
  Progress progress("explore", a.quiet);
  opt.progress = &progress.as_stream();
  check_ops(own.ops, explore_alphabet(f.scenario, opt.rank_ops, opt.full_alphabet), opt.full_alphabet);
  check_drawing(own);
  ExploreResult r = explore(f, opt);
  progress.done();
  if (r.limited) progress.note(stop_text(r) + "; what was found so far follows");
  if (!a.json) {
    std::cout << "scenario " << source << ", world " << f.scenario.world << ", profile " << f.scenario.profile << "\n";
    print_explore(std::cout, r, true);
  }
  std::vector<std::string> class_files(r.classes.size());
  if (!a.out.empty()) {
    std::filesystem::create_directories(a.out);
    for (size_t i = 0; i < r.classes.size(); ++i) {
      const FindingClass& c = r.classes[i];
      char name[32];
      std::snprintf(name, sizeof name, "%03zu", i + 1);
      class_files[i] = a.out + "/explore_" + name + "_" + c.spec + "_" + c.op + ".seq";
      std::ofstream(class_files[i]) << print_seq(c.file);
    }
    if (!a.json) std::cout << "wrote " << r.classes.size() << " class files to " << a.out << "\n";
  }
  if (a.json) print_explore_json(source, f, r, class_files);
  // Over kMaxDrawnStates the drawing keeps only the paths to the findings (write_state_dot).
  int64_t drawn = 0;
  if (!own.dot.empty() && !write_dot_file(own.dot, r, &drawn)) return kInfra;
  if (!own.svg.empty()) {
    const std::string dot_file = own.dot.empty() ? own.svg + ".dot.tmp" : own.dot;
    if (own.dot.empty() && !write_dot_file(dot_file, r, &drawn)) return kInfra;
    const bool ok = render_svg(dot_file, own.svg);
    if (own.dot.empty()) std::filesystem::remove(dot_file);
    if (!ok) return kInfra;
  }
  if ((!own.dot.empty() || !own.svg.empty()) && !a.json)
    std::cout << "drew " << (drawn == r.states ? "all " + std::to_string(drawn) + " states"
                                               : std::to_string(drawn) + " of " + std::to_string(r.states) +
                                                     " states (over " + std::to_string(kMaxDrawnStates) +
                                                     ": the paths from the initial state to each finding class)")
              << " to " << (own.svg.empty() ? own.dot : own.svg) << "\n";
  for (const auto& c : r.classes)
    if (!c.replayed) return kInfra;  // the search and a whole run disagree: a harness bug
  return r.classes.empty() ? kClean : kFinding;
}

}  // namespace fsdpsim::cli
