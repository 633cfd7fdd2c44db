// `fsdpsim crosscheck`: generated sequences through the model and the real
// backend (or the backends --backends / --against name), compared op by op;
// every divergent sequence is written out.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <tuple>

#include "model/vocab/table.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/interrupt.hpp"
#include "sim/cli/output.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/observer.hpp"
#include "sim/crosscheck_results.hpp"
#include "sim/generator.hpp"

namespace fsdpsim::cli {

int cmd_crosscheck(const Args& a) {
  if (!a.have_seed) throw SourceError("<command line>", {}, "crosscheck expects --seed S");
  GenOptions opt;
  opt.world = a.world > 0 ? a.world : 2;
  std::string out_dir = a.out.empty() ? "crosscheck-" + std::to_string(a.seed) : a.out;
  if (!a.out.empty()) prepare_out_dir(out_dir);  // a bad --out is exit 3 now, not at the first divergence
  arm_interrupts();
  RealPools pools = pools_of(a);
  const BackendList backends = a.backends.size() >= 2 ? a.backends : kModelAndReal;
  auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  int divergent = 0, broken = 0, done = 0;
  std::map<std::string, int> findings;
  // --shard I/N: this job runs block I of the N blocks of the seed range.
  CrosscheckResults results;
  results.seed = a.seed, results.count = a.count, results.world = opt.world;
  results.backends = backends_text(backends), results.profile = a.profile;
  std::tie(results.first, results.end) = shard_range(a.count, a.shard_index, a.shard_count);
  const int run_count = static_cast<int>(results.end - results.first);
  std::cout << "crosscheck seed " << a.seed << ", " << a.count << " sequences, world " << opt.world << ", backends " << backends_text(backends)
            << (uses(backends, Backend::Real) ? ", ranks " + a.ranks : "");
  if (a.shard_count > 1)
    std::cout << ", shard " << a.shard_index << "/" << a.shard_count
              << (run_count ? " (sequences " + std::to_string(results.first) + ".." + std::to_string(results.end - 1) + ")" : " (no sequences)");
  std::cout << "\n";
  for (int i = static_cast<int>(results.first); i < results.end && !interrupted(); ++i, ++done) {
    arm_interrupts();
    uint64_t seed = a.seed + static_cast<uint64_t>(i);
    Prng rng(seed);
    SeqFile f = generate_seq(rng, opt);
    if (!a.profile.empty()) f.scenario.profile = a.profile;
    BackendRun res = run_backend(f, backends, pools, false);
    arm_interrupts();  // a backend started in this run installed its own handler: ours again
    if (res.infra_failure) {
      ++broken;
      results.broken.push_back(seed);
      std::cout << "sequence " << seed << ": " << res.infra_message << "\n";
    }
    for (const auto& fd : res.findings) ++findings[fd.spec], ++results.findings[fd.spec];
    if (!res.divergences.empty()) {
      ++divergent;
      results.divergent.push_back(seed);
      if (a.out.empty() && divergent == 1) prepare_out_dir(out_dir);
      f.comments = {"divergent in fsdpsim crosscheck (replay: fsdpsim run FILE --backend " + backends_text(backends) + ")",
                    "fsdpsim random --seed " + std::to_string(seed) + " --count 1 --world " + std::to_string(opt.world)};
      for (size_t k = 0; k < res.divergences.size() && k < 5; ++k) f.comments.push_back("  " + res.divergences[k]);
      write_file(out_dir + "/divergent_" + std::to_string(seed) + ".seq", print_seq(f));
    }
    auto now = std::chrono::steady_clock::now();
    if (secs(now - last) >= 3.0) {
      last = now;
      const int so_far = i + 1 - static_cast<int>(results.first);
      std::cout << "crosscheck: " << so_far << "/" << run_count << " sequences, " << divergent << " divergent, "
                << so_far / secs(now - t0) << " seq/s\n"
                << std::flush;
    }
  }
  double total = secs(std::chrono::steady_clock::now() - t0);
  std::vector<std::vector<std::string>> rows = {
      {"sequences", std::to_string(done) + (done < run_count ? " of " + std::to_string(run_count) : "")},
      {"divergent", std::to_string(divergent) + (divergent ? " (written to " + out_dir + "/)" : "")},
      {"backend failures", std::to_string(broken)},
      {"time", std::to_string(total) + " s"},
      {"sequences/s", std::to_string(done / std::max(total, 1e-9))}};
  std::string spec;
  for (const auto& [k, v] : findings) spec += (spec.empty() ? "" : ", ") + k + " " + std::to_string(v);
  // Findings come from completed runs only: "none" over zero of them would claim a clean result.
  const int completed = done - broken;
  std::string who = std::string("findings (") + backend_name(backends[0]) + ", " + std::to_string(completed) + " completed)";
  rows.push_back({who, completed == 0 ? "unknown: no sequence completed" : spec.empty() ? "none" : spec});
  if (interrupted()) rows.push_back({"interrupted", "by signal " + std::to_string(interrupted()) + ": partial results"});
  print_aligned(std::cout, rows);
  print_upstream_versions(std::cout, pools, false);
  if (interrupted()) return interrupted_exit(interrupted());  // no results file: the block is incomplete
  if (!a.results.empty()) write_results_file(a.results, results);
  if (broken) return kInfra;
  return divergent ? kDivergence : kClean;
}

}  // namespace fsdpsim::cli

namespace fsdpsim::cli {

// One rank of a multi-host launch; rank 0 gathers the reports over the store
// and prints what `run --backend real` prints.
int cmd_worker(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "worker expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  real::TorchrunResult tr;
  try {
    tr = real::run_torchrun_rank(f, std::chrono::milliseconds(a.timeout_ms));
  } catch (const SourceError&) {
    throw;  // a missing or invalid launch variable: bad input, exit 3
  } catch (const std::exception& e) {
    std::cerr << "fsdpsim worker: " << e.what() << "\n";
    return kInfra;
  }
  if (tr.rank != 0) {
    std::cout << "rank " << tr.rank << ": " << tr.reports[tr.rank].size() << " ops reported to rank 0\n";
    return kClean;
  }
  std::vector<Observation> obs = real::observe(real::make_layout(f), f.scenario.seed, tr.reports);
  std::vector<Finding> findings = check_spec(f, obs);
  std::cout << "fsdpsim worker " << file << "  world " << tr.world << "  (torchrun launch, rank 0 reporting)\n\n";
  print_table(std::cout, f.scenario, obs);
  std::cout << "\n";
  if (findings.empty()) std::cout << "findings: none\n";
  else std::cout << "findings: " << findings.size() << "\n";
  for (const auto& fd : findings) std::cout << "  " << fd.text << "\n";
  return findings.empty() ? kClean : kFinding;
}

}  // namespace fsdpsim::cli
