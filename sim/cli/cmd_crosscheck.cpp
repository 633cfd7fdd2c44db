// `fsdpsim crosscheck`: generated sequences through the model and the real
// backend (or the backends --backends / --against name), compared op by op;
// every divergent sequence is written out.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <tuple>

#include "model/vocab/table.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/interrupt.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/junit.hpp"
#include "sim/cli/progress.hpp"
#include "sim/cli/output.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/observer.hpp"
#include "sim/core/crosscheck_results.hpp"
#include "sim/core/generator.hpp"

namespace fsdpsim::cli {

namespace {

// --json's summary: the results file's fields and what only this run knows.
// `unjudged`: sequences with no divergence where a value backend could not settle some field; `cut`: the one a signal cut short.
// `prepare`: the upstream backend's prepare paths, when it ran (PrepareTally).
void print_summary_json(const CrosscheckResults& r, int done, int completed, int unjudged, int cut, double seconds, const std::string& out_dir,
                        const PrepareTally* prepare) {
  JsonRecord j("crosscheck_summary");
  j.num("seed", static_cast<int64_t>(r.seed)).num("count", r.count).num("world", r.world).str("backends", r.backends).str("profile", r.profile);
  j.num("first", r.first).num("end", r.end).num("sequences", done).num("completed", completed).num("unjudged", unjudged);
  j.seeds("divergent", r.divergent).seeds("broken", r.broken).counts("findings", r.findings);
  j.real("seconds", seconds).str("out", r.divergent.empty() ? "" : out_dir).num("interrupted", interrupted()).num("cut_short", cut);
  if (prepare)
    j.num("upstream_runs", prepare->upstream_runs).num("prepared_by_accelerate", prepare->accelerate)
        .counts("prepare_fallbacks", prepare->fallbacks).num("unprepared", prepare->unprepared).num("mixed", prepare->mixed);
  j.print(std::cout);
}

}  // namespace

int cmd_crosscheck(const Args& a, const CrosscheckFlags& own) {
  if (!a.have_seed) throw SourceError("<command line>", {}, "crosscheck expects --seed S");
  GenOptions opt;
  opt.world = a.world > 0 ? a.world : 2;
  apply_draws_or_default(a.draw, &opt);
  std::string out_dir = a.out.empty() ? "crosscheck-" + std::to_string(a.seed) : a.out;
  if (!a.out.empty()) prepare_out_dir(out_dir);  // a bad --out is exit 3 now, not at the first divergence
  arm_interrupts();
  RealPools pools = pools_of(a);
  const BackendList backends = a.backends.size() >= 2 ? a.backends : kModelAndReal;
  if (opt.qlora_percent > 0 && uses(backends, Backend::Real))
    throw SourceError("<command line>", {}, "--draw qlora=P needs --against upstream: the C++ backend (real) does not implement 4-bit (QLoRA) base layers");
  if (opt.models_percent > 0 && uses(backends, Backend::Real))
    throw SourceError("<command line>", {}, "--draw models needs --against upstream: the C++ backend (real) does not run `model` scenarios");
  auto t0 = std::chrono::steady_clock::now();
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  int divergent = 0, broken = 0, done = 0, cut = 0;  // cut: the sequence a signal cut short
  int unjudged = 0, unjudged_fields = 0;  // sequences with no divergence but fields a value backend could not settle
  std::map<std::string, int> findings;
  PrepareTally prepare;  // the upstream backend's prepare paths
  // --shard I/N: this job runs block I of the N blocks of the seed range.
  CrosscheckResults results;
  results.seed = a.seed, results.count = a.count, results.world = opt.world;
  results.backends = backends_text(backends), results.profile = a.profile, results.draw = a.draw;
  std::tie(results.first, results.end) = shard_range(a.count, own.shard_index, own.shard_count);
  const int run_count = static_cast<int>(results.end - results.first);
  std::ostringstream head;
  head << "crosscheck seed " << a.seed << ", " << a.count << " sequences, world " << opt.world << ", backends " << backends_text(backends)
       << (uses(backends, Backend::Real) ? ", ranks " + a.ranks : "") << (a.draw.empty() ? "" : ", draw " + a.draw);
  if (own.shard_count > 1)
    head << ", shard " << own.shard_index << "/" << own.shard_count
         << (run_count ? " (sequences " + std::to_string(results.first) + ".." + std::to_string(results.end - 1) + ")" : " (no sequences)");
  if (!a.json) std::cout << head.str() << "\n";
  Progress progress("crosscheck", a.quiet);
  // --junit: a testcase per sequence run, a failure for each divergent one, an error for each broken one.
  JunitReport junit("fsdpsim " + head.str());
  for (int i = static_cast<int>(results.first); i < results.end && !interrupted(); ++i, ++done) {
    arm_interrupts();
    uint64_t seed = a.seed + static_cast<uint64_t>(i);
    Prng rng(seed);
    SeqFile f = generate_seq(rng, opt);
    if (!a.profile.empty()) f.scenario.profile = a.profile;
    const auto t_seq = std::chrono::steady_clock::now();
    BackendRun res = run_backend(f, backends, pools, false);
    arm_interrupts();  // a backend started in this run installed its own handler: ours again
    JunitCase jc;
    jc.classname = "crosscheck", jc.name = "seed " + std::to_string(seed), jc.seconds = secs(std::chrono::steady_clock::now() - t_seq);
    if (res.infra_failure && interrupted()) {  // the signal stopped the backends: not a broken run
      ++cut;
      continue;
    }
    if (res.infra_failure) {
      progress.clear();  // a line of ours on the terminal the status line is on
      ++broken;
      results.broken.push_back(seed);
      jc.outcome = JunitCase::Outcome::Error, jc.message = "backend failure", jc.text = res.infra_message;
      if (a.json) JsonRecord("crosscheck_broken").num("seed", static_cast<int64_t>(seed)).str("message", res.infra_message).print(std::cout);
      else std::cout << red("sequence " + std::to_string(seed) + ": " + res.infra_message) << "\n";
    }
    if (uses(backends, Backend::Upstream) && !res.infra_failure) prepare.add(res.upstream_prepared_by);
    for (const auto& fd : res.findings) ++findings[fd.spec], ++results.findings[fd.spec];
    unjudged_fields += static_cast<int>(res.unjudged.size());
    if (res.divergences.empty() && !res.unjudged.empty() && !res.infra_failure) ++unjudged;
    if (!res.divergences.empty()) {
      ++divergent;
      results.divergent.push_back(seed);
      if (a.out.empty() && divergent == 1) prepare_out_dir(out_dir);
      f.comments = {"divergent in fsdpsim crosscheck (replay: fsdpsim run FILE --backend " + backends_text(backends) + ")",
                    "fsdpsim random --seed " + std::to_string(seed) + " --count 1 --world " + std::to_string(opt.world) +
                        (a.draw.empty() ? "" : " --draw " + a.draw)};
      for (size_t k = 0; k < res.divergences.size() && k < 5; ++k) f.comments.push_back("  " + res.divergences[k]);
      // With --world the name carries it: runs of one seed at several worlds share a --out dir without overwriting.
      const std::string file = out_dir + "/divergent_" + std::to_string(seed) + (a.world > 0 ? "_w" + std::to_string(opt.world) : "") + ".seq";
      write_file(file, print_seq(f));
      jc.outcome = JunitCase::Outcome::Failure, jc.message = std::to_string(res.divergences.size()) + " divergences (" + file + ")";
      for (const auto& d : res.divergences) jc.text += d + "\n";
      progress.clear();
      if (a.json)
        JsonRecord("crosscheck_divergent").num("seed", static_cast<int64_t>(seed)).str("file", file).strs("divergences", res.divergences)
            .print(std::cout);
    }
    if (!a.junit.empty()) junit.add(std::move(jc));
    const int so_far = i + 1 - static_cast<int>(results.first);
    progress.status(std::to_string(so_far) + "/" + std::to_string(run_count) + " sequences, " + std::to_string(divergent) +
                    " divergent, " + std::to_string(static_cast<int>(so_far / std::max(secs(std::chrono::steady_clock::now() - t0), 1e-9))) +
                    " seq/s");
  }
  progress.done();
  double total = secs(std::chrono::steady_clock::now() - t0);
  // Findings come from completed runs only: "none" over zero of them would claim a clean result.
  const int completed = done - broken - cut;
  if (a.json) {
    print_summary_json(results, done, completed, unjudged, cut, total, out_dir, uses(backends, Backend::Upstream) ? &prepare : nullptr);
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"sequences", std::to_string(done) + (done < run_count ? " of " + std::to_string(run_count) : "")},
        {"agree", std::to_string(done - divergent - broken - unjudged)},
        {"divergent", divergent ? red(std::to_string(divergent) + " (written to " + out_dir + "/)") : "0"},
        {"unjudged", std::to_string(unjudged) + " (no divergence, " + std::to_string(unjudged_fields) +
                         " fields the values could not settle: not counted as agreement)"},
        {"backend failures", broken ? red(std::to_string(broken)) : "0"},
        {"time", std::to_string(total) + " s"},
        {"sequences/s", std::to_string(done / std::max(total, 1e-9))}};
    std::string spec;
    for (const auto& [k, v] : findings) spec += (spec.empty() ? "" : ", ") + k + " " + std::to_string(v);
    std::string who = std::string("findings (") + backend_name(backends[0]) + ", " + std::to_string(completed) + " completed)";
    rows.push_back({who, completed == 0 ? "unknown: no sequence completed" : spec.empty() ? "none" : spec});
    if (uses(backends, Backend::Upstream))
      for (auto& row : prepare.rows()) rows.push_back(std::move(row));
    if (interrupted())
      rows.push_back({"interrupted", "by signal " + std::to_string(interrupted()) + ": partial results" +
                                         (cut ? ", the sequence in progress cut short" : "")});
    print_aligned(std::cout, rows);
  }
  print_upstream_versions(std::cout, pools, a.json);
  if (!a.junit.empty()) junit.write(a.junit, total);  // partial when interrupted: the sequences that ran
  if (interrupted()) return interrupted_exit(interrupted());  // no results file: the block is incomplete
  if (!own.results.empty()) write_results_file(own.results, results);
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
