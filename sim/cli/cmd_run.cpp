// `fsdpsim run`, `fsdpsim check` and the main job (no arguments).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "model/machine/topology.hpp"
#include "model/vocab/table.hpp"
#include "sim/cli/commands.hpp"
#include "sim/default_scenario.hpp"
#include "sim/expectations.hpp"
#include "sim/simulator.hpp"

namespace fsdpsim::cli {
namespace {

std::string hex(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void require_model_backend(const Args& a) {
  if (a.backend != "model")
    throw SourceError("<command line>", {}, "--backend " + a.backend + " needs the real backend, which this build does not have yet (use --backend model)");
}

RunResult simulate(const SeqFile& f) { return run_checked(f); }

void print_findings(std::ostream& os, const RunResult& res) {
  if (res.findings.empty()) {
    os << "findings: none\n";
    return;
  }
  os << "findings: " << res.findings.size() << "\n";
  for (const auto& f : res.findings) os << "  " << f.text << "\n";
}

void print_finding_json(std::ostream& os, const Finding& f) {
  std::string t;
  for (char c : f.text) {
    if (c == '"' || c == '\\') t += '\\';
    t += c;
  }
  os << "{\"finding\":\"" << f.spec << "\",\"step\":" << f.step << ",\"rank\":" << f.rank << ",\"text\":\"" << t << "\"}\n";
}

std::vector<std::string> seq_files(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() == ".seq") found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      if (found.empty()) throw SourceError(p, {}, "no .seq files in this directory");
      out.insert(out.end(), found.begin(), found.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace

int cmd_run(const Args& a) {
  require_model_backend(a);
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "run expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  Topology topo = compile_topology(f.scenario);
  RunResult res = run_checked(f);
  if (a.json) {
    for (const auto& o : res.observations) {
      print_json(std::cout, o);
      std::cout << "\n";
    }
    for (const auto& fd : res.findings) print_finding_json(std::cout, fd);
  } else {
    std::cout << "fsdpsim run " << file << "  world " << f.scenario.world << "  seed " << f.scenario.seed << "  backend model\n"
              << "profile " << profile_text(topo.profile) << "\n\n";
    print_table(std::cout, res.observations);
    std::cout << "\n";
    print_findings(std::cout, res);
    std::cout << "trace hash " << hex(res.trace_hash) << "\n";
  }
  return res.findings.empty() ? kClean : kFinding;
}

int cmd_check(const Args& a) {
  require_model_backend(a);
  if (a.positional.empty()) throw SourceError("<command line>", {}, "check expects at least one file or directory");
  int passed = 0, failed = 0, bad = 0;
  for (const auto& file : seq_files(a.positional)) {
    try {
      SeqFile f = parse_seq_file(file);
      apply_overrides(f, a, file);
      RunResult res = simulate(f);
      auto failures = check_expectations(f, res, file);
      if (failures.empty()) {
        ++passed;
        std::cout << "PASS " << file << "  (" << f.ops.size() << " ops, world " << f.scenario.world << ", "
                  << f.scenario.profile << ", " << res.findings.size() << " findings as expected)\n";
      } else {
        ++failed;
        std::cout << "FAIL " << file << "\n";
        for (const auto& x : failures) std::cout << "  " << x.text << "\n";
      }
    } catch (const SourceError& e) {
      ++bad;
      std::cout << "BAD  " << e.what() << "\n";
    }
  }
  std::cout << passed << " passed, " << failed + bad << " failed\n";
  if (bad) return kBadInput;
  return failed ? kFinding : kClean;
}

// The main job. For now: the seed 000 scenario under both profiles, its
// observation table and findings, and a summary table.
int cmd_main_job(const Args& a) {
  struct Row {
    std::string profile;
    size_t ops;
    size_t findings;
    std::string first;
  };
  std::vector<Row> rows;
  for (const std::string profile : {"upstream", "patched"}) {
    SeqFile f = parse_seq(kDefaultScenario, "<built-in seed 000>");
    f.scenario.profile = profile;
    Topology topo = compile_topology(f.scenario);
    RunResult res = run_checked(f);
    std::cout << "== seed 000 (peft#3872), world " << f.scenario.world << ", profile " << profile_text(topo.profile) << "\n";
    print_table(std::cout, res.observations);
    print_findings(std::cout, res);
    std::cout << "trace hash " << hex(res.trace_hash) << "\n\n";
    std::string first = res.findings.empty() ? "-" : res.findings[0].text;
    if (first.size() > 110) first = first.substr(0, 107) + "...";
    rows.push_back({profile, f.ops.size(), res.findings.size(), first});
  }
  std::cout << "summary\n";
  std::vector<std::vector<std::string>> table = {{"profile", "ops", "findings", "first finding"}};
  size_t total = 0;
  for (const auto& r : rows) {
    table.push_back({r.profile, std::to_string(r.ops), std::to_string(r.findings), r.first});
    total += r.findings;
  }
  print_aligned(std::cout, table);
  return total ? kFinding : kClean;
}


}  // namespace fsdpsim::cli
