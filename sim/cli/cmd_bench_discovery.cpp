// `fsdpsim bench --discovery [--seconds T] [--fuzzer PATH]`: how fast the fuzz
// loops reach the bugs, not how many inputs they run. For the hunt's fuzz loop
// (sim/findings/hunt.cpp, fuzz_only) and, given its binary, lifecycle_fuzzer from an
// empty corpus, five runs (seeds 1..5) of T s each (default 60): every new
// finding key with its time, triaged afterwards into its root cause
// (sim/findings/root_cause.hpp). Printed: the median time to each seed thread's root
// cause (a run that never reaches it counts as T) and the median number of
// distinct root causes reached in 10 s and in T s.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/progress.hpp"
#include "sim/findings/hunt.hpp"
#include "sim/findings/hunt_scenarios.hpp"
#include "sim/core/shrink.hpp"
#include "real_backend/child_signal.hpp"
#include "real_backend/store_dir.hpp"

extern char** environ;

namespace fsdpsim::cli {
namespace {

constexpr int kRuns = 5;
constexpr double kEarly = 10.0;

// One run: each root cause with the first time (s) a finding of it was fuzzed.
using Reached = std::map<std::string, double>;

// The root cause of a fuzzed sequence's first finding, as the hunt's triage names it.
std::string root_cause_of(const SeqFile& f) {
  TriageResult t;
  return triage(f, &t) ? t.root_cause.id : "";
}

void reach(Reached& r, const std::string& id, double t) {
  if (id.empty()) return;
  auto it = r.find(id);
  if (it == r.end() || t < it->second) r[id] = t;
}

Reached hunt_loop_run(uint64_t seed, double seconds, RealPools& pools) {
  std::vector<std::pair<SeqFile, double>> found;
  HuntOptions o;
  o.seconds = seconds;
  o.seed = seed;
  o.scenarios = hunt_scenarios();
  o.confirm_real = o.confirm_upstream = false;
  o.fuzz_only = true;
  o.on_new_key = [&](const SeqFile& f, double t) { found.emplace_back(f, t); };
  hunt(o, pools);
  Reached r;
  for (const auto& [f, t] : found) reach(r, root_cause_of(f), t);
  return r;
}

// lifecycle_fuzzer for `seconds` from an empty corpus: its `NEW FINDING SIG after T s` lines
// (fuzz/lifecycle_fuzzer.cpp) and the sequence it writes per signature to FSDPSIM_FINDINGS_DIR.
bool fuzzer_run(const std::string& fuzzer, uint64_t seed, double seconds, Reached* out, std::string* error) {
  namespace fs = std::filesystem;
  std::string tmpl = real::temp_base() + "/fsdpsim-discovery-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    *error = "cannot create a temporary directory in " + real::temp_base() + ": " + std::strerror(errno);
    return false;
  }
  const fs::path dir = tmpl;
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } remove_at_return{dir};
  fs::create_directories(dir / "corpus");
  fs::create_directories(dir / "findings");
  const std::string log = (dir / "log").string();
  std::vector<std::string> args = {fuzzer, "-seed=" + std::to_string(seed), "-max_total_time=" + std::to_string(static_cast<int>(seconds)),
                                   "-artifact_prefix=" + (dir / "").string(), (dir / "corpus").string()};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("FSDPSIM_FINDINGS_DIR=", 0) != 0) env_strings.push_back(*e);
  env_strings.push_back("FSDPSIM_FINDINGS_DIR=" + (dir / "findings").string());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  const int rc = posix_spawn(&pid, fuzzer.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    *error = "cannot run " + fuzzer;
    return false;
  }
  int status = 0;
  real::wait_child(pid, &status);
  // libFuzzer exits 0 at -max_total_time; anything else (a crash, a spec finding under patched) is the fuzzer's failure.
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *error = fuzzer + " -seed=" + std::to_string(seed) + " failed (see its log: rerun it by hand)";
    return false;
  }
  std::ifstream in(log);
  static const std::regex line(R"(^NEW FINDING (\S+) after ([0-9.]+) s:)");
  std::string text;
  std::smatch m;
  while (std::getline(in, text)) {
    if (!std::regex_search(text, m, line)) continue;
    std::string name = m[1].str();
    for (char& c : name)
      if (c == ':' || c == '/') c = '_';  // fuzz/lifecycle_fuzzer.cpp's file_name
    const fs::path file = dir / "findings" / (name + ".seq");
    if (!fs::exists(file)) continue;
    reach(*out, root_cause_of(parse_seq_file(file.string())), std::stod(m[2].str()));
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string fmt_s(double t, double limit) {
  std::ostringstream os;
  if (t >= limit) os << ">" << limit << " s";
  else os << std::fixed << std::setprecision(2) << t << " s";
  return os.str();
}

}  // namespace

int cmd_bench_discovery(const Args& a, const std::string& fuzzer) {
  const double seconds = a.have_seconds ? a.seconds : 60.0;
  if (!fuzzer.empty() && !std::filesystem::exists(fuzzer))
    throw SourceError("<command line>", {}, "--fuzzer expects the lifecycle_fuzzer binary (cmake -DFSDPSIM_FUZZ=ON), got '" + fuzzer + "'");
  Progress progress("bench", a.quiet || a.json);
  // Each seed thread's root causes: its corpus files' (corpus/regressions/seedNNN_*.seq, each
  // triaged into its recorded class, as `fsdpsim triage` does); without a corpus, the built-in
  // scenarios' own lifecycles, every finding class of each.
  std::map<std::string, std::string> seed_root;  // root cause id -> the seeds that show it ("seed003")
  auto add = [&](const std::string& id, const std::string& who) {
    std::string& w = seed_root[id];
    if (!id.empty() && w.find(who) == std::string::npos) w += (w.empty() ? "" : ",") + who;
  };
  const std::filesystem::path corpus = "corpus/regressions";
  if (std::filesystem::is_directory(corpus)) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(corpus)) {
      const std::string n = e.path().filename().string();
      if (n.size() > 8 && n.compare(0, 4, "seed") == 0 && n[7] == '_' && e.path().extension() == ".seq") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      const SeqFile f = parse_seq_file(p.string());
      const std::string recorded = signature_comment(f);
      TriageResult t;
      if (triage(f, &t, {}, recorded.substr(0, recorded.find(' ')))) add(t.root_cause.id, p.filename().string().substr(0, 7));
    }
  } else {
    for (const auto& ns : hunt_scenarios()) {
      SeqFile f = ns.file;
      f.scenario.profile = "upstream";
      for (auto& op : f.ops) op.expects.clear();
      const RunResult r = run_checked(f);
      std::set<std::string> classes;
      for (const auto& fd : r.findings) classes.insert(spec_and_status(finding_signature(f, r, fd)));
      for (const auto& c : classes) {
        TriageResult t;
        if (triage(f, &t, {}, c)) add(t.root_cause.id, ns.name.substr(0, ns.name.find('_')));
      }
    }
  }
  seed_root.erase("");
  struct Loop {
    std::string name;
    std::vector<Reached> runs;
  };
  std::vector<Loop> loops = {{"hunt fuzz loop", {}}};
  if (!fuzzer.empty()) loops.push_back({"lifecycle_fuzzer", {}});
  progress.note("discovery: seeds 1.." + std::to_string(kRuns) + ", " + std::to_string(static_cast<int>(seconds)) + " s each, " +
                std::to_string(loops.size()) + " loop(s): about " + std::to_string(static_cast<int>(seconds * kRuns * loops.size() / 60 + 1)) +
                " min");
  RealPools pools = pools_of(a);
  for (auto& l : loops)
    for (uint64_t seed = 1; seed <= kRuns; ++seed) {
      progress.status(l.name + " seed " + std::to_string(seed) + "/" + std::to_string(kRuns));
      if (l.name == "hunt fuzz loop") {
        l.runs.push_back(hunt_loop_run(seed, seconds, pools));
      } else {
        Reached r;
        std::string error;
        if (!fuzzer_run(fuzzer, seed, seconds, &r, &error)) {
          progress.done();
          std::cerr << "fsdpsim bench: " << error << "\n";
          return kInfra;
        }
        l.runs.push_back(std::move(r));
      }
      progress.note(l.name + " seed " + std::to_string(seed) + ": " + std::to_string(l.runs.back().size()) + " root causes");
    }
  progress.done();
  auto time_to = [&](const Loop& l, const std::string& id) {
    std::vector<double> t;
    for (const auto& r : l.runs) t.push_back(r.count(id) ? r.at(id) : seconds);
    return median(t);
  };
  auto reached_by = [&](const Loop& l, double limit) {
    std::vector<double> n;
    for (const auto& r : l.runs) n.push_back(static_cast<double>(std::count_if(r.begin(), r.end(), [&](const auto& kv) { return kv.second <= limit; })));
    return median(n);
  };
  if (a.json) {
    for (const auto& l : loops) {
      const std::string key = l.name == "hunt fuzz loop" ? "hunt_loop" : "lifecycle_fuzzer";
      for (const auto& [id, who] : seed_root) {
        std::string name = key + "_time_to_" + id;
        for (char& c : name)
          if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
        JsonRecord("bench_figure").str("name", name).real("value", time_to(l, id)).str("unit", "s (median of 5)").str("root_cause", id).print(std::cout);
      }
      JsonRecord("bench_figure").str("name", key + "_root_causes_10s").real("value", reached_by(l, kEarly)).str("unit", "root causes (median of 5)").print(std::cout);
      JsonRecord("bench_figure").str("name", key + "_root_causes_" + std::to_string(static_cast<int>(seconds)) + "s")
          .real("value", reached_by(l, seconds)).str("unit", "root causes (median of 5)").print(std::cout);
    }
    return kClean;
  }
  std::cout << "discovery: median of seeds 1.." << kRuns << ", " << seconds << " s per run";
  if (fuzzer.empty()) std::cout << " (lifecycle_fuzzer: not measured, give --fuzzer PATH)";
  std::cout << "\n\n";
  size_t width = std::string("median time to the seeds' root causes").size();
  for (const auto& [id, who] : seed_root) width = std::max(width, id.size() + who.size() + 3);
  std::cout << std::left << std::setw(static_cast<int>(width)) << "median time to the seeds' root causes";
  for (const auto& l : loops) std::cout << "  " << std::setw(16) << l.name;
  std::cout << "\n";
  for (const auto& [id, who] : seed_root) {
    std::cout << std::setw(static_cast<int>(width)) << (id + " (" + who + ")");
    for (const auto& l : loops) std::cout << "  " << std::setw(16) << fmt_s(time_to(l, id), seconds);
    std::cout << "\n";
  }
  for (double limit : seconds > kEarly ? std::vector<double>{kEarly, seconds} : std::vector<double>{seconds}) {
    std::ostringstream label;
    label << "root causes reached in " << limit << " s";
    std::cout << std::setw(static_cast<int>(width)) << label.str();
    for (const auto& l : loops) std::cout << "  " << std::setw(16) << reached_by(l, limit);
    std::cout << "\n";
  }
  std::set<std::string> all;
  for (const auto& l : loops)
    for (const auto& r : l.runs)
      for (const auto& [id, t] : r) all.insert(id);
  std::cout << "\nroot causes reached by any run (" << all.size() << "):";
  for (const auto& id : all) std::cout << " " << id;
  std::cout << "\n";
  return kClean;
}

}  // namespace fsdpsim::cli
