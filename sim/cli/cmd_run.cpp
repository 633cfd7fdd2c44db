// `fsdpsim run` and `fsdpsim demo`; the helpers `check` and the others share.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "model/vocab/input_file.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/table.hpp"
#include "model/vocab/text.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/interrupt.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/output.hpp"
#include "sim/cli/progress.hpp"
#include "sim/core/cost.hpp"
#include "model/vocab/model_lowering.hpp"
#include "sim/core/crosscheck.hpp"
#include "sim/core/default_scenario.hpp"
#include "sim/findings/expectations.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim::cli {
namespace {

constexpr size_t kTableWidth = 120;  // a terminal's width, as the hunt's catalogue

std::string hex(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void print_findings(std::ostream& os, const std::vector<Finding>& findings) {
  if (findings.empty()) {
    os << "findings: none\n";
    return;
  }
  os << red("findings: " + std::to_string(findings.size())) << "\n";
  for (const auto& f : findings) os << "  " << f.text << "\n";
}

void print_finding_json(std::ostream& os, const Finding& f) {
  std::ostringstream o;
  o << "{\"finding\":\"" << f.spec << "\",\"step\":" << f.step << ",\"rank\":" << f.rank << ",\"text\":";
  print_json_string(o, f.text);
  os << with_type_last(o.str() + "}", "finding") << "\n";
}

// "model, real and upstream": backend names as a sentence lists them.
std::string names_and(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

// Several backends: one line saying which agree with the first and which
// differ (with their count), and what the upstream pool cannot observe (its
// fields are left out of the comparison, so "agree" does not cover them).
void print_agreement(std::ostream& os, const BackendRun& res, const RealPools& pools) {
  const std::string first = backend_name(res.runs.front().backend);
  std::vector<std::string> agree = {first}, differ;
  for (const auto& c : res.comparisons) {
    if (c.divergences.empty()) agree.push_back(backend_name(c.other));
    else differ.push_back(std::string(backend_name(c.other)) + " (" + std::to_string(c.divergences.size()) + " divergences from " + first + ")");
  }
  std::string line = differ.empty() ? "backends agree: " + names_and(agree)
                                    : red("backends differ: " + names_and(differ)) +
                                          (agree.size() > 1 ? "; " + names_and(agree) + " agree" : "");
  const std::vector<std::string> unobserved = res.used_upstream ? pools.upstream_unobserved() : std::vector<std::string>{};
  if (!unobserved.empty()) line += " (not compared: " + join(unobserved, ", ") + ", which upstream does not observe)";
  os << line << "\n";
}

// The hash of the observations the table shows: the last backend's. Where it
// is not the same for every backend (upstream's unobserved fields read "-"),
// the line says whose it is and gives the others, so it is not taken for a
// different model run.
void print_trace_hash(std::ostream& os, const BackendRun& res) {
  os << "trace hash " << hex(res.trace_hash);
  if (res.runs.size() < 2) {
    os << "\n";
    return;
  }
  std::vector<std::string> names, others;
  bool alike = true;
  for (const auto& r : res.runs) {
    names.push_back(backend_name(r.backend));
    alike = alike && r.trace_hash == res.trace_hash;
    if (&r != &res.runs.back()) others.push_back(std::string(backend_name(r.backend)) + " " + hex(r.trace_hash));
  }
  if (alike) os << " (" << names_and(names) << " alike)\n";
  else os << " (the " << backend_who(res.runs.back().backend) << "'s, whose observations the table shows; " << join(others, ", ") << ")\n";
}

}  // namespace

void print_divergences(std::ostream& os, const BackendRun& res) {
  for (const auto& c : res.comparisons) {
    const auto& d = c.divergences;
    if (d.empty()) continue;
    os << red(std::string("divergences (") + backend_name(c.first) + " vs " + backend_name(c.other) + "): " + std::to_string(d.size()))
       << "\n";
    for (size_t i = 0; i < d.size() && i < 40; ++i) os << "  " << d[i] << "\n";
    if (d.size() > 40) os << "  ... " << d.size() - 40 << " more\n";
  }
}

void print_upstream_versions(std::ostream& os, RealPools& pools, bool json) {
  if (!pools.upstream_started() || pools.upstream_versions().empty()) return;
  if (!json) {
    os << pools.upstream_versions_line() << "\n";
    return;
  }
  os << "{\"upstream_versions\":{";
  bool comma = false;
  for (const auto& [k, v] : pools.upstream_versions()) {
    os << (comma ? "," : "") << json_quoted(k) << ":" << json_quoted(v);
    comma = true;
  }
  os << "},\"type\":\"upstream_versions\"}\n";
}

// The .seq files under each path, sorted per directory. A path that cannot
// be read (missing, unreadable subdirectory, directory without .seq files) is
// reported in `problems` as a BAD line and the others still run.
std::vector<std::string> seq_files(const std::vector<std::string>& paths, std::vector<std::string>* problems) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (p.empty()) {
      problems->push_back("<command line>: an empty path argument");
      continue;
    }
    if (!fs::is_directory(p, ec)) {
      out.push_back(p);  // parse_seq_file says why when it cannot be read
      continue;
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(p, fs::directory_options::none, ec), end;
    if (ec) problems->push_back(p + ": cannot read directory: " + ec.message());
    for (; !ec && it != end; it.increment(ec)) {
      std::error_code fe;
      if (it->is_directory(fe) && ::access(it->path().c_str(), R_OK | X_OK) != 0) {
        problems->push_back(it->path().string() + ": cannot read directory: " + std::strerror(errno));
        it.disable_recursion_pending();
        continue;
      }
      if (it->path().extension() != ".seq") continue;
      // A FIFO or a device named *.seq is never opened (it could block or never end): said and skipped.
      if (it->is_directory(fe)) continue;
      try {
        check_input_file(it->path().string(), kSeqInput);
        found.push_back(it->path().string());
      } catch (const SourceError& e) {
        problems->push_back(std::string(e.what()) + "; skipped");
      }
    }
    if (ec) problems->push_back(p + ": cannot read directory: " + ec.message());
    std::sort(found.begin(), found.end());
    if (found.empty() && !ec) problems->push_back(p + ": no .seq files in this directory");
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

RealPools pools_of(const Args& a) {
  RealPools pools(a.ranks == "threads" ? real::RankMode::Threads : real::RankMode::Processes, std::chrono::milliseconds(a.timeout_ms));
  if (!a.upstream_set.empty()) {
    std::string python, message;
    const int rc = upstream::release_python(a.upstream_set, &python, &message);
    if (rc == 3) throw SourceError("<command line>", {}, "--upstream: " + message);
    if (rc != 0) throw InfraError(message.empty() ? "cannot run: " + a.upstream_set + ": release_env exit " + std::to_string(rc) : message);
    pools.set_upstream_python(python);
  }
  return pools;
}

void check_memory(const SeqFile& f, const Args& a, const std::string& file) {
  SourcePos at;
  // where two or more backends run it the others are left out (runnable_backends); one alone is no comparison
  std::string skipped;
  for (Backend b : runnable_backends(f, a.backends, &skipped)) {
    const std::string why = backend_refusal(f, b, &at);
    if (!why.empty()) throw SourceError(file, at, why);
  }
  if (std::string why = model_refusal(f, &at); !why.empty() && uses(a.backends, Backend::Model)) throw SourceError(file, at, why);
  if (uses(a.backends, Backend::Real) || uses(a.backends, Backend::Upstream))
    check_memory_budget(lowered_file(f), a.memory_budget > 0 ? a.memory_budget : default_memory_budget(), file);
}

int cmd_run(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "run expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file, /*allow_model=*/true);
  apply_overrides(f, a, file);
  check_memory(f, a, file);
  const Profile profile = effective_profile(f.scenario);
  // The real and upstream backends take seconds (a pool starting, thousands of ops): say so meanwhile.
  Progress progress("run", a.quiet);
  std::optional<Waiting> waiting;
  if (uses(a.backends, Backend::Real) || uses(a.backends, Backend::Upstream)) waiting.emplace(progress, file + " on " + a.backend);
  RealPools pools = pools_of(a);
  BackendRun res = run_backend(f, a.backends, pools);
  waiting.reset();
  if (!res.skipped.empty()) std::cerr << "fsdpsim: " << file << ": " << res.skipped << "\n";
  if (res.infra_failure) {
    std::cerr << "fsdpsim: " << res.infra_message << "\n";
    return kInfra;
  }
  if (a.json) {
    for (const auto& o : res.observations) {
      std::ostringstream line;
      print_json(line, o);
      std::cout << with_type_last(line.str(), "observation") << "\n";
    }
    for (const auto& fd : res.findings) print_finding_json(std::cout, fd);
    // What the text form shows, as records: each backend's trace hash, and
    // every divergence (exit 2 must not come with nothing saying why).
    for (const auto& run : res.runs)
      std::cout << "{\"trace_hash\":\"" << hex(run.trace_hash) << "\",\"backend\":\"" << backend_name(run.backend)
                << "\",\"type\":\"trace_hash\"}\n";
    for (const auto& c : res.comparisons)
      for (const auto& d : c.divergences) {
        std::cout << "{\"divergence\":";
        print_json_string(std::cout, d);
        std::cout << ",\"first\":\"" << backend_name(c.first) << "\",\"other\":\"" << backend_name(c.other)
                  << "\",\"type\":\"divergence\"}\n";
      }
    print_upstream_versions(std::cout, pools, true);
  } else {
    std::cout << "fsdpsim run " << file << "  world " << f.scenario.world << "  seed " << f.scenario.seed << "  backend "
              << a.backend << (uses(a.backends, Backend::Real) ? " (" + a.ranks + ")" : "") << "\n"
              << "profile " << profile_text(profile) << "\n\n";
    if (res.runs.size() > 1)  // the table is one backend's: say whose, and whose the findings are
      std::cout << "observations of the " << backend_who(res.runs.back().backend) << "; findings below: the "
                << backend_who(res.runs.front().backend) << "'s, which the others are compared with\n";
    print_table(std::cout, lowered_file(f).scenario, res.observations, a.wide ? 0 : kTableWidth);  // owners by resolved targets
    print_upstream_versions(std::cout, pools, false);
    std::cout << "\n";
    print_findings(std::cout, res.findings);
    print_divergences(std::cout, res);
    if (res.runs.size() > 1) print_agreement(std::cout, res, pools);
    print_trace_hash(std::cout, res);
  }
  if (!res.divergences.empty()) return kDivergence;
  return res.findings.empty() ? kClean : kFinding;
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
    RunResult res = run_checked(f);
    std::cout << "== seed 000 (peft#3872), world " << f.scenario.world << ", profile " << profile_text(*profile_by_name(profile)) << "\n";
    print_table(std::cout, f.scenario, res.observations, a.wide ? 0 : kTableWidth);
    print_findings(std::cout, res.findings);
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
