// `fsdpsim profiles`, `fsdpsim random`, `fsdpsim bench`.
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "model/machine/topology.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/table.hpp"
#include "real_backend/bench_real.hpp"
#include "real_backend/upstream/pool_client.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/output.hpp"
#include "sim/cli/progress.hpp"
#include "sim/core/default_scenario.hpp"
#include "sim/core/generator.hpp"
#include "sim/core/shrink.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim::cli {

namespace {

// profiles --json: a switch record per behaviour switch, a profile record per profile.
void print_profiles_json(const std::vector<Profile>& profiles) {
  const std::vector<std::string> names = profile_names();
  for (int i = 0; i < kSwitchCount; ++i) {
    const SwitchInfo& s = switch_table()[i];
    std::vector<std::string> values(s.values.begin(), s.values.end());
    std::string in_profiles = "{";
    for (size_t k = 0; k < profiles.size(); ++k)
      in_profiles += (k ? "," : "") + json_quoted(names[k]) + ":" + json_quoted(s.values[profiles[k].values[i]]);
    JsonRecord("switch").str("name", s.name).strs("values", values).raw("profiles", in_profiles + "}").str("mirrors", s.mirrors)
        .str("doc", s.doc).print(std::cout);
  }
  for (const auto& n : names) JsonRecord("profile").str("name", n).str("description", profile_description(n)).print(std::cout);
}

}  // namespace

int cmd_profiles(const Args& a) {
  std::vector<std::string> header = {"switch", "values"};
  std::vector<Profile> profiles;
  for (const auto& n : profile_names()) {
    header.push_back(n);
    profiles.push_back(*profile_by_name(n));
  }
  header.push_back("mirrors");
  if (a.json) {
    print_profiles_json(profiles);
    return kClean;
  }
  std::vector<std::vector<std::string>> rows = {header};
  for (int i = 0; i < kSwitchCount; ++i) {
    const SwitchInfo& s = switch_table()[i];
    std::string values;
    for (const char* v : s.values) values += std::string(values.empty() ? "" : "|") + v;
    std::vector<std::string> row = {s.name, values};
    for (const auto& p : profiles) row.push_back(s.values[p.values[i]]);
    row.push_back(s.mirrors);
    rows.push_back(row);
  }
  print_aligned(std::cout, rows);
  std::cout << "\n";
  for (const auto& s : switch_table()) std::cout << s.name << ": " << s.doc << "\n";
  std::cout << "\n";
  for (const auto& n : profile_names()) std::cout << n << ": " << profile_description(n) << "\n";
  std::cout << "override one switch with --set switch=value\n";
  return kClean;
}

namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// Sequence i of a run is generated from seed S+i, so `--seed S+i --count 1`
// reprints exactly that one.
int cmd_random(const Args& a) {
  if (!a.have_seed) throw SourceError("<command line>", {}, "random expects --seed S");
  GenOptions opt;
  opt.world = a.world > 0 ? a.world : 2;
  apply_draws_or_default(a.draw, &opt);
  if (!a.out.empty()) prepare_out_dir(a.out);  // exit 3 before anything is generated
  Progress progress("random", a.quiet);
  for (int i = 0; i < a.count; ++i) {
    if (!a.out.empty()) progress.status(std::to_string(i) + "/" + std::to_string(a.count) + " written");
    uint64_t seed = a.seed + static_cast<uint64_t>(i);
    Prng rng(seed);
    SeqFile f = generate_seq(rng, opt);
    f.comments = {"fsdpsim random --seed " + std::to_string(seed) + " --count 1 --world " + std::to_string(opt.world) +
                  (a.draw.empty() ? "" : " --draw " + a.draw)};
    std::string text = print_seq(f);
    std::string file;
    if (!a.out.empty()) {
      char name[32];
      std::snprintf(name, sizeof name, "random_%06d.seq", i);
      file = (std::filesystem::path(a.out) / name).string();
      write_file(file, text);  // exit 4 on a failed write
    }
    if (a.json) {
      JsonRecord r("sequence");
      r.num("seed", static_cast<int64_t>(seed)).num("world", f.scenario.world).num("ops", static_cast<int64_t>(f.ops.size()));
      if (!file.empty()) r.str("file", file);
      r.str("seq", text).print(std::cout);
    } else if (a.out.empty()) {
      errno = 0;
      std::cout << text << (i + 1 < a.count ? "\n" : "");
      check_stdout(errno);  // a full disk or closed pipe stops the run at once
    }
  }
  progress.done();
  if (!a.out.empty() && !a.quiet) std::cerr << "wrote " << a.count << " sequences to " << a.out << " (seed " << a.seed << ")\n";
  return kClean;
}


// Figures asked for by the issues: model ops/s on one core, generated and
// simulated sequences/s at world 2, and the same with observations built.
int cmd_bench_figures(const Args& a, bool model_only) {
  const double budget = a.seconds;
  const uint64_t seed = 1;
  // --json: each figure one bench_figure record (name, value, unit) instead of the lines.
  std::ostringstream discard;
  std::ostream& text = a.json ? discard : std::cout;
  auto figure = [&](const std::string& name, double value, const std::string& unit) {
    if (a.json) JsonRecord("bench_figure").str("name", name).real("value", value).str("unit", unit).print(std::cout);
  };
  text << "fsdpsim bench  seed " << seed << "  " << budget << " s per figure\n";
  GenOptions opt;
  opt.world = 2;

  // 1. Model ops/s: one rank, pre-generated sequences, no spec, no observations.
  {
    Prng rng(seed);
    struct Case {
      Topology topo;
      std::vector<Op> ops;
    };
    std::vector<Case> cases;
    GenOptions one = opt;
    one.world = 1;
    one.min_ops = 12;
    one.max_ops = 12;
    for (int i = 0; i < 256; ++i) {
      SeqFile f = generate_seq(rng, one);
      cases.push_back({compile_topology(f), f.ops});
    }
    std::vector<RankModel> models;
    for (const auto& c : cases) models.emplace_back(c.topo, 0);
    int64_t ops = 0;
    double t0 = now_s(), t = t0;
    while (t - t0 < budget) {
      for (size_t i = 0; i < cases.size(); ++i) {
        RankModel& m = models[i];
        m.reset();
        for (const Op& op : cases[i].ops) {
          m.apply(op);
        }
        ops += static_cast<int64_t>(cases[i].ops.size());
      }
      t = now_s();
    }
    text << "model ops/s (1 core, 1 rank, 12-op sequences incl. reset):  " << static_cast<int64_t>(ops / (t - t0)) << "\n";
    figure("model_ops", ops / (t - t0), "ops/s");
  }
  // 2. Generated sequences/s at world 2: generate, compile, simulate; then with
  // observations, spec checks and the trace hash (run + check_spec); then the
  // hunt's fuzz loop (sim/findings/hunt.cpp: run_checked_sampled, S8 on one sequence in
  // 16, no observation hash).
  enum class Loop { SimulationOnly, Observed, Hunt };
  for (Loop loop : {Loop::SimulationOnly, Loop::Observed, Loop::Hunt}) {
    const bool observe = loop != Loop::SimulationOnly;
    int64_t seqs = 0, rank_ops = 0, with_findings = 0;
    double t0 = now_s(), t = t0;
    const std::clock_t c0 = std::clock();
    uint64_t s = seed;
    while (t - t0 < budget) {
      for (int k = 0; k < 64; ++k) {
        Prng rng(s++);
        SeqFile f = generate_seq(rng, opt);
        RunResult r;
        if (loop == Loop::Hunt) {
          r = run_checked_sampled(f, 16);
        } else {
          Topology topo = compile_topology(f);
          Simulator sim(topo);
          RunOptions ro;
          ro.observe = observe;
          r = sim.run(f.ops, ro);
          if (observe) r.findings = check_spec(f, r.observations);
        }
        ++seqs;
        rank_ops += r.rank_ops;
        with_findings += !r.findings.empty();
        recycle(std::move(r));  // as the fuzzer and the shrinker do: kept observations would cost their buffers
      }
      t = now_s();
    }
    const char* what_text = loop == Loop::SimulationOnly ? "simulation only"
                            : loop == Loop::Observed    ? "observations and spec checks"
                                                        : "the hunt's loop: observations, spec checks, S8 on 1 in 16, no trace hash";
    text << "generated sequences/s (world 2, " << what_text << "):  " << static_cast<int64_t>(seqs / (t - t0)) << "  ("
         << static_cast<int64_t>(rank_ops / (t - t0)) << " rank-ops/s";
    if (observe) text << ", " << (100 * with_findings / std::max<int64_t>(seqs, 1)) << "% with findings";
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    text << "; " << static_cast<int64_t>(seqs / std::max(cpu, 1e-9)) << " per CPU second)\n";
    const std::string what = loop == Loop::SimulationOnly ? "generated_sequences"
                             : loop == Loop::Observed    ? "generated_sequences_observed"
                                                         : "generated_sequences_hunt_loop";
    figure(what, seqs / (t - t0), "sequences/s");
    figure(what + "_cpu", seqs / std::max(cpu, 1e-9), "sequences/CPU s");
    figure(what + "_rank_ops", rank_ops / (t - t0), "rank-ops/s");
    if (observe) figure(what + "_with_findings", 100.0 * with_findings / std::max<int64_t>(seqs, 1), "%");
  }
  // 3. The lifecycle_fuzzer's work per input, without its decoding: compile,
  // simulate with observations, spec checks, S8 on one sequence in 16
  // (run_checked_sampled), on pre-generated world-2 sequences. Wall-clock and
  // CPU rates: on a machine shared with other jobs the CPU one is the figure.
  {
    Prng rng(seed);
    std::vector<SeqFile> files;
    for (int i = 0; i < 256; ++i) files.push_back(generate_seq(rng, opt));
    int64_t seqs = 0;
    const double t0 = now_s();
    const std::clock_t c0 = std::clock();
    double t = t0;
    while (t - t0 < budget) {
      for (const SeqFile& f : files) {
        RunResult r = run_checked_sampled(f, 16);
        seqs += !r.observations.empty();
        recycle(std::move(r));
      }
      t = now_s();
    }
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    text << "lifecycle_fuzzer work per input (world 2: observations, spec checks, S8 on 1 in 16):  "
         << static_cast<int64_t>(seqs / (t - t0)) << "/s  (" << static_cast<int64_t>(seqs / std::max(cpu, 1e-9)) << " per CPU second)\n";
    figure("fuzzer_inputs", seqs / (t - t0), "inputs/s");
    figure("fuzzer_inputs_cpu", seqs / std::max(cpu, 1e-9), "inputs/CPU s");
  }
  // 4. Shrinking seed 000 (the built-in scenario, 6 ops at world 2) to its 3-op minimum.
  {
    SeqFile f = parse_seq(kDefaultScenario, "<seed 000>");
    int64_t shrinks = 0;
    int runs = 0;
    const double t0 = now_s();
    const std::clock_t c0 = std::clock();
    double t = t0;
    while (t - t0 < budget || shrinks == 0) {
      ShrinkResult r;
      shrink(f, &r);
      runs = r.runs;
      ++shrinks;
      t = now_s();
    }
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    text << "shrink seed 000 (" << f.ops.size() << " ops, world " << f.scenario.world << ", " << runs << " candidates):  "
         << 1000 * (t - t0) / shrinks << " ms  (" << 1000 * cpu / shrinks << " ms of CPU)\n";
    figure("shrink_seed000", 1000 * (t - t0) / shrinks, "ms");
    figure("shrink_seed000_cpu", 1000 * cpu / shrinks, "CPU ms");
  }
  // 2b. The explorer over the built-in scenarios (sim/core/explore.cpp).
  bench_explorer(std::cout, budget, a.json);
  if (model_only) return kClean;
  // 5. The real backend: 10-op generated sequences at world 2.
  GenOptions ten = opt;
  ten.min_ops = ten.max_ops = 10;
  auto real_rate = [&](const char* what, const char* name, auto&& run_one) {
    int64_t seqs = 0;
    double t0 = now_s(), t = t0;
    uint64_t s = seed;
    while (t - t0 < budget) {
      Prng rng(s++);
      SeqFile f = generate_seq(rng, ten);
      if (!run_one(f)) {
        text << what << ": the real backend failed\n";
        if (a.json) std::cerr << "fsdpsim bench: " << what << ": the real backend failed\n";
        return 0.0;
      }
      ++seqs;
      t = now_s();
    }
    double rate = seqs / (t - t0);
    text << what << ":  " << static_cast<int64_t>(rate) << " sequences/s\n";
    figure(name, rate, "sequences/s");
    return rate;
  };
  auto timeout = std::chrono::milliseconds(a.timeout_ms);
  double persistent, fresh;
  {
    real::RealRanks procs(2, real::RankMode::Processes, timeout);
    persistent = real_rate("real backend, persistent process ranks (world 2, 10-op sequences)", "real_process_ranks",
                           [&](const SeqFile& f) { return !procs.run(f).infra_failure; });
  }
  {
    real::RealRanks threads(2, real::RankMode::Threads, timeout);
    real_rate("real backend, persistent thread ranks (world 2, 10-op sequences)", "real_thread_ranks", [&](const SeqFile& f) { return !threads.run(f).infra_failure; });
  }
  fresh = real_rate("real backend, fresh processes per sequence (world 2, 10-op sequences)", "real_fresh_processes",
                    [&](const SeqFile& f) { return !real::run_real(f, real::RankMode::Processes, timeout).infra_failure; });
  if (fresh > 0) text << "persistent / fresh ranks:  " << persistent / fresh << "x\n";
  real::CollectiveLatency lat = real::measure_collective_latency(2, 80, 2000);
  text << "all-gather of 80 floats, 2 thread ranks: bare gloo " << static_cast<int64_t>(lat.bare_us) << " us, fingerprinted "
       << static_cast<int64_t>(lat.fingerprinted_us) << " us (" << lat.fingerprinted_us / lat.bare_us << "x the floor)\n";
  text << "reduce-scatter (AVG) to 80 floats, 2 thread ranks: bare gloo " << static_cast<int64_t>(lat.bare_rs_us) << " us, fingerprinted "
       << static_cast<int64_t>(lat.fingerprinted_rs_us) << " us (" << lat.fingerprinted_rs_us / lat.bare_rs_us << "x the floor)\n";
  figure("all_gather_bare_gloo", lat.bare_us, "us");
  figure("all_gather_fingerprinted", lat.fingerprinted_us, "us");
  figure("reduce_scatter_bare_gloo", lat.bare_rs_us, "us");
  figure("reduce_scatter_fingerprinted", lat.fingerprinted_rs_us, "us");
  // 6. The upstream backend (real_backend/upstream/fsdpsim_upstream/bench.py): a pool's start,
  // a sequence and a corpus file on started pools, this binary's `run --backend upstream` end
  // to end, and a torchrun per sequence; with --json its own bench_figure lines.
  std::cout.flush();
  std::string error;
  std::vector<std::string> args = {"--seconds", std::to_string(static_cast<int>(budget + 0.5))};
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) args.insert(args.end(), {"--fsdpsim", std::string(self, static_cast<size_t>(n))});
  if (a.json) args.push_back("--json");
  int rc = upstream::run_python_module("fsdpsim_upstream.bench", args, &error);
  std::ostream& say = a.json ? std::cerr : std::cout;  // --json: stdout holds records only
  if (rc < 0) say << "upstream backend: not measured (" << error << ")\n";
  else if (rc != 0) say << "upstream backend: the bench failed (exit " << rc << ")\n";
  return kClean;
}

// bench is three commands behind one name: --stability and --discovery pick the other two.
int cmd_bench(const Args& a, const BenchFlags& own) {
  if (own.stability && own.discovery) throw SourceError("<command line>", {}, "bench takes --stability or --discovery, not both");
  if (!own.fuzzer.empty() && !own.discovery) throw SourceError("<command line>", {}, "--fuzzer goes with bench --discovery");
  return own.stability ? cmd_bench_stability(a) : own.discovery ? cmd_bench_discovery(a, own.fuzzer) : cmd_bench_figures(a, own.model_only);
}

}  // namespace fsdpsim::cli
