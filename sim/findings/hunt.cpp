#include "sim/findings/hunt.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <future>
#include <thread>
#include <unistd.h>

#include "model/vocab/input_file.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/table.hpp"
#include "sim/core/generator.hpp"
#include "sim/core/shrink.hpp"

namespace fsdpsim {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr double kModelShare = 1.0 / 3;  // of --seconds: explore, fuzz, triage; confirmation gets the rest
constexpr double kPoolStartGuess = 5;    // seconds an upstream pool takes to start when none has been timed
// The swarm's share of sequences with a MixedPrecisionPolicy, and its stream's salt.
constexpr uint32_t kSwarmPolicyPercent = 15;
constexpr uint64_t kSwarmPolicyStream = 0x6d70;
// The streams of the swarm's DoRA adapters (`use_dora`) and 4-bit bases (`quant=`); their shares
// are HuntOptions'.
constexpr uint64_t kSwarmDoraStream = 0x646f7261;
constexpr uint64_t kSwarmQloraStream = 0x71346269;

struct Candidate {
  SeqFile file;
  std::string found_by;
};

// Generated findings by their key (spec:op:status), a few each, shortest
// kept: triage takes them round-robin so every key gets a turn before any
// key gets a second.
class CandidatePool {
 public:
  static constexpr size_t kPerKey = 6;
  void add(const std::string& key, Candidate c) {
    auto& v = by_key_[key];
    if (v.size() < kPerKey) {
      v.push_back(std::move(c));
      return;
    }
    auto longest = std::max_element(v.begin(), v.end(), [](const Candidate& a, const Candidate& b) { return a.file.ops.size() < b.file.ops.size(); });
    if (c.file.ops.size() < longest->file.ops.size()) *longest = std::move(c);
  }
  std::vector<Candidate> round_robin() const {
    std::vector<std::vector<Candidate>> lists;
    for (const auto& [k, v] : by_key_) {
      std::vector<Candidate> s = v;
      std::stable_sort(s.begin(), s.end(), [](const Candidate& a, const Candidate& b) { return a.file.ops.size() < b.file.ops.size(); });
      lists.push_back(std::move(s));
    }
    std::vector<Candidate> out;
    for (size_t i = 0; i < kPerKey; ++i)
      for (const auto& l : lists)
        if (i < l.size()) out.push_back(l[i]);
    return out;
  }
  size_t size() const {
    size_t n = 0;
    for (const auto& [k, v] : by_key_) n += v.size();
    return n;
  }

 private:
  std::map<std::string, std::vector<Candidate>> by_key_;
};

SeqFile for_hunt(SeqFile f, const HuntOptions& o) {
  f.comments.clear();
  f.scenario.profile = o.profile;
  for (auto& op : f.ops) op.expects.clear();
  return f;
}

bool valid(const SeqFile& f) {
  try {
    validate(f, "<hunt>");
    return true;
  } catch (const SourceError&) {
    return false;
  }
}

bool run_has_key(const SeqFile& f, const SingleRun& run, const std::string& key) {
  RunResult r;
  r.observations = run.observations;
  r.findings = run.findings;
  for (const auto& fd : r.findings)
    if (finding_signature(f, r, fd) == key) return true;
  return false;
}

// One backend's word on one class, kept apart until both backends are done:
// the real and the upstream confirmations run side by side.
struct Confirmation {
  std::string verdict = kNotConfirmedBudget;  // what it stays when the deadline comes first
  std::vector<std::string> divergences;
  std::vector<SingleRun> runs;  // the model's, then the backend's (kept for hunt --html)
};

// Runs the class's minimal sequence on the model and `other`; "yes" when they
// agree and `other` shows the finding too.
Confirmation confirm_on(const HuntClass& c, Backend other, RealPools& pools, HuntReport& rep, std::mutex& mu,
                        const std::function<bool()>& stopped) {
  Confirmation out;
  SourcePos at;
  if (other == Backend::Real && !real_backend_refusal(c.t.minimal, &at).empty()) {
    out.verdict = kNotRunThere;
    return out;
  }
  BackendRun br = run_backend(c.t.minimal, {Backend::Model, other}, pools, false);
  if (br.infra_failure && stopped()) {  // the signal stopped its ranks or its pool: no harness failure
    out.verdict = kNotConfirmedInterrupted;
    return out;
  }
  if (br.infra_failure) {
    std::lock_guard<std::mutex> lock(mu);
    rep.infra = true;
    if (rep.infra_message.empty()) rep.infra_message = br.infra_message;
    out.verdict = "FAILED";
    return out;
  }
  if (br.runs.size() == 2) out.runs = br.runs;
  // Texts alone may differ where the upstream pool cannot name what the model
  // names (a collective's group and parameters on a DTensor copy are "?"):
  // noted, not a disagreement.
  auto names_only = [](const std::string& d) {
    if (d.find("): message: ") != std::string::npos) return true;
    const size_t vs = d.find(" vs ");
    return d.find("): collectives: ") != std::string::npos && vs != std::string::npos && d.find('?', vs) != std::string::npos;
  };
  bool wording_only = true;
  for (const auto& d : br.divergences) {
    wording_only = wording_only && names_only(d);
    out.divergences.push_back(std::string("[") + backend_name(other) + "] " + d);
  }
  if (!wording_only) {
    out.verdict = "DIFFERS";
    return out;
  }
  if (!br.divergences.empty())
    out.divergences.insert(out.divergences.begin(), std::string("[") + backend_name(other) + "] agrees but for names it cannot observe:");
  out.verdict = run_has_key(c.t.minimal, br.runs.back(), c.t.key) ? "yes" : "no finding";
  return out;
}

// Confirms each class of `world` (every class when world < 0) on `other`, in
// order, while the budget lasts: a class starts only when the longest
// confirmation so far on this backend still fits before `deadline`.
void confirm_until(const std::vector<HuntClass>& classes, std::vector<Confirmation>& out, int world, Backend other, RealPools& pools,
                   HuntReport& rep, std::mutex& mu, Clock::time_point deadline, const std::function<void(const std::string&)>& tick,
                   const std::function<bool()>& stopped) {
  double longest = 0;
  for (size_t i = 0; i < classes.size(); ++i) {
    if (world >= 0 && classes[i].t.minimal.scenario.world != world) continue;
    if (stopped()) {
      out[i].verdict = kNotConfirmedInterrupted;
      continue;
    }
    const auto start = Clock::now();
    if (start + std::chrono::duration<double>(longest) > deadline) continue;  // stays kNotConfirmedBudget
    out[i] = confirm_on(classes[i], other, pools, rep, mu, stopped);
    longest = std::max(longest, since(start));
    tick("confirm: " + classes[i].stem + ": " + backend_name(other) + " " + out[i].verdict);
  }
}

// One thread per world owns an upstream pool from its start (while the model
// fuzzes) to its last confirmation, so the worlds confirm side by side and
// the pool lives as long as it is needed: it dies with the thread that
// spawned it (PR_SET_PDEATHSIG names the thread, not the process).
class UpstreamWorkers {
 public:
  using Job = std::function<void(int world, RealPools&)>;
  // The pool's start is given up at `deadline` (the hunt's): then no class is confirmed there.
  void start(int world, Clock::time_point deadline) {
    auto w = std::make_unique<Worker>();
    w->pools = std::make_unique<RealPools>(real::RankMode::Processes, std::chrono::milliseconds(5000));
    Worker* p = w.get();
    std::shared_future<void> go = go_;
    p->thread = std::thread([p, world, go, deadline] {
      upstream::UpstreamPool& pool = p->pools->upstream(world);
      pool.give_up_start_at(deadline);
      pool.start(world);  // a failure shows again at the first run, as infra (none after the deadline)
      p->start_seconds = p->pools->upstream_start_seconds();
      go.wait();
      if (p->job) p->job(world, *p->pools);
      if (!p->pools->upstream_versions().empty()) p->versions = p->pools->upstream_versions_line();  // none from a start given up
      p->unobserved = p->pools->upstream_unobserved();
      p->pools->stop_upstream();  // here, while its thread lives
    });
    workers_[world] = std::move(w);
  }
  bool has(int world) const { return workers_.count(world) > 0; }
  // Starts `job` in every world's thread at once (each after its pool's start); wait() joins them.
  void launch(const Job& job) {
    for (auto& [w, p] : workers_) p->job = job;
    release();
  }
  void wait() {
    release();
    for (auto& [w, p] : workers_)
      if (p->thread.joinable()) p->thread.join();
  }
  // The longest start of a pool the workers have seen (after wait()), 0 when none started.
  double start_seconds() const {
    double s = 0;
    for (const auto& [w, p] : workers_) s = std::max(s, p->start_seconds);
    return s;
  }
  std::string versions_line() const {
    for (const auto& [w, p] : workers_)
      if (!p->versions.empty()) return p->versions;
    return "";
  }
  std::vector<std::string> unobserved() const {
    for (const auto& [w, p] : workers_)
      if (!p->unobserved.empty()) return p->unobserved;
    return {};
  }
  ~UpstreamWorkers() { wait(); }

 private:
  struct Worker {
    std::unique_ptr<RealPools> pools;
    std::thread thread;
    Job job;
    std::string versions;
    std::vector<std::string> unobserved;
    double start_seconds = 0;
  };
  void release() {
    if (!released_) {
      released_ = true;
      release_.set_value();
    }
  }
  std::promise<void> release_;
  std::shared_future<void> go_ = release_.get_future().share();
  bool released_ = false;
  std::map<int, std::unique_ptr<Worker>> workers_;
};

}  // namespace

bool upstream_installed() {
  const char* py = std::getenv("FSDPSIM_PYTHON");
  std::string path = py && *py ? py : std::string(FSDPSIM_SOURCE_DIR) + "/.venv/bin/python";
  return access(path.c_str(), X_OK) == 0;
}

HuntReport hunt(const HuntOptions& o, RealPools& pools) {
  HuntReport rep;
  rep.seed = o.seed;
  rep.profile = o.profile;
  rep.world = o.world;
  std::mutex mu;  // the report's infra fields and the progress lines, from the upstream threads too
  auto say = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (o.progress) o.progress(s);
  };
  auto tick = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (o.status) o.status(s);
    else if (o.progress) o.progress(s);
  };
  const std::function<bool()> stopped = [&o] { return o.stop && o.stop(); };
  const auto t0 = Clock::now();
  const auto budget = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  // Bounded by counts, the model's phases take what they take; confirmation gets `seconds` after them.
  const bool counted = o.budget_sequences > 0 && !o.fuzz_only;
  auto deadline = t0 + budget;
  const auto pool_deadline = counted ? Clock::time_point::max() : deadline;  // a pool's start is given up then
  // The upstream pools start now, one per likely world, in the background:
  // importing torch and PEFT in every rank takes seconds the fuzzing can use.
  rep.upstream_installed = upstream_installed();
  UpstreamWorkers upstream;
  if (o.confirm_upstream && rep.upstream_installed)
    for (int w : std::set<int>{1, o.world}) upstream.start(w, pool_deadline);
  std::vector<Candidate> first;  // the scenarios' own lifecycles (triaged whatever the budget), then the explorer's
  if (!o.fuzz_only)
    for (const auto& ns : o.scenarios) {
      SeqFile f = for_hunt(ns.file, o);
      if (valid(f) && !run_checked(f).findings.empty()) first.push_back({f, ns.name});
    }
  const size_t lifecycles = first.size();
  // The model's phases take the first third of the budget, confirmation the rest;
  // all of it when nothing is confirmed (--model-only, bench's fuzz-only and stability hunts).
  const double model = o.fuzz_only || !(o.confirm_real || o.confirm_upstream) ? o.seconds : o.seconds * kModelShare;
  // Explore: a quarter of the model's share, shared by the scenarios.
  if (o.explore && !o.scenarios.empty() && !o.fuzz_only) {
    const double each = model * 0.25 / static_cast<double>(o.scenarios.size());
    const int64_t states = counted ? (o.budget_states > 0 ? o.budget_states : kHuntBudgetStates) : 0;
    for (const auto& ns : o.scenarios) {
      const double left = model * 0.25 - since(t0);  // the explorer's share, whatever each call overran
      if ((!counted && left <= 0) || stopped()) break;
      SeqFile scen = for_hunt(ns.file, o);
      for (auto& f : o.explore(scen, counted ? 0 : std::min(each, left), states)) {
        f = for_hunt(f, o);
        if (valid(f)) first.push_back({f, "explore " + ns.name}), ++rep.explored;
      }
    }
    say("explore: " + std::to_string(rep.explored) + " shortest finding sequences from " + std::to_string(o.scenarios.size()) +
        " scenarios in " + std::to_string(since(t0)).substr(0, 4) + " s");
  }
  rep.t_explore = since(t0);
  // Fuzz until half the model's share: a built-in scenario with generated ops, then a
  // generated scenario (swarm), in turn. Sequence i is Prng(seed of i).
  const auto t1 = Clock::now();
  Prng rng(o.seed);
  GenOptions g;
  g.world = o.world;
  CandidatePool pool;
  auto last_progress = t1;
  // At least a quarter of the model's share however long exploring took: the swarm
  // reaches scenarios (experts, loading, dtypes) no built-in one has.
  const double fuzz_end = o.fuzz_only ? o.seconds : std::max(model * 0.5, since(t0) + model * 0.25);
  std::set<std::string> keys;  // on_new_key's
  for (uint64_t i = 0; (counted ? rep.sequences < o.budget_sequences : since(t0) < fuzz_end) && !stopped(); ++i) {
    const uint64_t s = rng.next();
    Prng r(s);
    SeqFile f;
    std::string by;
    if (!o.scenarios.empty() && i % 2 == 0) {
      const NamedScenario& ns = o.scenarios[(i / 2) % o.scenarios.size()];
      f.scenario = ns.file.scenario;
      f.scenario.world = o.world;
      // A lifecycle that accumulates gradients without sync (hazard B6) is fuzzed with gradient_sync
      // toggles drawn among its ops; the other scenarios' streams stay as they were.
      GenOptions gs = g;
      if (std::any_of(ns.file.ops.begin(), ns.file.ops.end(), [](const Op& op) { return op.kind == OpKind::GradientSync; }))
        gs.gradient_sync_percent = 12;
      f.ops = generate_ops(r, f.scenario, gs);
      by = "fuzz " + ns.name + " ops " + std::to_string(s);
    } else {
      // checkpointing (B7), grouped fully_shard and, at world 2, a quarter at worlds 3-4 where a
      // rank holds only padding rows (sim/core/generator.hpp)
      f = generate_seq(r, swarm_options(r, o.world, true));
      // A mixed-precision policy on some of them, drawn on a stream of its own so that the swarm's
      // other sequences stay what they were.
      if (Prng side = r.fork(kSwarmPolicyStream); side.chance(kSwarmPolicyPercent)) draw_mixed_precision(side, f.scenario);
      if (Prng side = r.fork(kSwarmDoraStream); side.chance(o.swarm_dora_percent)) draw_dora(side, f.scenario);
      if (Prng side = r.fork(kSwarmQloraStream); side.chance(o.swarm_qlora_percent)) draw_qlora(side, f.scenario);
      by = "fuzz swarm " + std::to_string(s);
    }
    f = for_hunt(f, o);
    if (!valid(f)) continue;
    ++rep.sequences;
    // S8 on one sequence in 16, as the shrinker and the fuzzer do: the model is deterministic,
    // and every kept candidate is run twice in full again by triage.
    RunResult res = run_checked_sampled(f, 16);
    const bool found = !res.findings.empty();
    if (found) {
      // a world the hunt started no upstream pool for: its pool starts now, beside the fuzzing
      if (o.confirm_upstream && rep.upstream_installed && !upstream.has(f.scenario.world)) upstream.start(f.scenario.world, pool_deadline);
      std::string key = finding_signature(f, res, res.findings[0]);
      if (o.on_new_key && keys.insert(key).second) o.on_new_key(f, since(t1));
      pool.add(std::move(key), {f, by});
    }
    recycle(std::move(res));  // its observations' buffers serve the next sequence
    if (!found) continue;
    ++rep.with_findings;
    if (since(last_progress) >= 2.0) {
      last_progress = Clock::now();
      tick("fuzz: " + std::to_string(rep.sequences) + " sequences, " + std::to_string(rep.with_findings) + " with findings");
    }
  }
  rep.t_fuzz = since(t1);
  rep.candidates = static_cast<int>(pool.size());
  rep.interrupted = stopped();
  if (o.fuzz_only) return rep;
  say("fuzz: " + std::to_string(rep.sequences) + " sequences (seed " + std::to_string(o.seed) + ", " +
      std::to_string(static_cast<int64_t>(rep.sequences / std::max(rep.t_fuzz, 1e-9))) + "/s), " + std::to_string(rep.with_findings) +
      " with findings, " + std::to_string(pool.size()) + " kept for triage");
  // Triage: the lifecycles all, then the explorer's and the fuzzed ones until the model's share ends.
  const auto t2 = Clock::now();
  std::map<std::string, size_t> by_signature;
  std::vector<Candidate> order = first;
  for (auto& c : pool.round_robin()) order.push_back(std::move(c));
  for (size_t k = 0; k < order.size(); ++k) {
    if ((k >= lifecycles && !counted && since(t0) >= model) || stopped()) break;
    TriageResult t;
    if (!triage(order[k].file, &t)) continue;
    ++rep.triaged;
    auto it = by_signature.find(t.signature);
    if (it != by_signature.end()) {
      ++rep.classes[it->second].hits;
      continue;
    }
    by_signature[t.signature] = rep.classes.size();
    HuntClass c;
    c.t = t;
    c.stem = class_file_stem(t);
    c.found_by = order[k].found_by;
    c.hits = 1;
    rep.classes.push_back(std::move(c));
    tick("triage: class " + std::to_string(rep.classes.size()) + " " + rep.classes.back().stem + " (" + root_verdict_word(root_cause_entry(t.root_cause.id).verdict) + ", " +
        std::to_string(t.minimal.ops.size()) + " ops) from " + order[k].found_by);
  }
  rep.t_triage = since(t2);
  say("triage: " + std::to_string(rep.classes.size()) + " classes in " + std::to_string(rep.t_triage).substr(0, 4) + " s");
  const auto t3 = Clock::now();
  if (counted) deadline = t3 + budget;
  std::stable_sort(rep.classes.begin(), rep.classes.end(), [](const HuntClass& a, const HuntClass& b) {
    return std::make_pair(a.t.minimal.scenario.world, a.stem) < std::make_pair(b.t.minimal.scenario.world, b.stem);
  });
  // The real backend here and upstream in each world's thread, side by side, until the deadline.
  std::vector<Confirmation> on_real(rep.classes.size()), on_up(rep.classes.size());
  const bool use_upstream = o.confirm_upstream && rep.upstream_installed;
  if (use_upstream)
    upstream.launch([&](int world, RealPools& p) { confirm_until(rep.classes, on_up, world, Backend::Upstream, p, rep, mu, deadline, tick, stopped); });
  if (o.confirm_real) confirm_until(rep.classes, on_real, -1, Backend::Real, pools, rep, mu, deadline, tick, stopped);
  upstream.wait();
  if (use_upstream) {
    // Worlds no worker started (a world 3 scenario's lifecycle): a pool each, when its start still fits.
    const double start = upstream.start_seconds() > 0 ? upstream.start_seconds() : kPoolStartGuess;
    std::set<int> others;
    for (const auto& c : rep.classes)
      if (!upstream.has(c.t.minimal.scenario.world)) others.insert(c.t.minimal.scenario.world);
    for (int w : others) {
      if (Clock::now() + std::chrono::duration<double>(start) > deadline || stopped()) break;
      RealPools p(real::RankMode::Processes, std::chrono::milliseconds(5000));
      p.upstream(w).give_up_start_at(deadline);
      confirm_until(rep.classes, on_up, w, Backend::Upstream, p, rep, mu, deadline, tick, stopped);
    }
    rep.upstream_versions = upstream.versions_line();
    rep.upstream_unobserved = upstream.unobserved();
  }
  // Merged in a fixed order (real, then upstream), whichever finished first. A signal
  // before the deadline left the rest unconfirmed, not the budget.
  rep.interrupted = stopped();
  const bool cut_short = rep.interrupted && Clock::now() < deadline;
  for (Confirmation& k : on_real) k.verdict = cut_short && k.verdict == kNotConfirmedBudget ? kNotConfirmedInterrupted : k.verdict;
  for (Confirmation& k : on_up) k.verdict = cut_short && k.verdict == kNotConfirmedBudget ? kNotConfirmedInterrupted : k.verdict;
  for (size_t i = 0; i < rep.classes.size(); ++i) {
    HuntClass& c = rep.classes[i];
    if (o.confirm_real) c.real = on_real[i].verdict;
    if (use_upstream) c.upstream = on_up[i].verdict;
    else if (o.confirm_upstream) c.upstream = "not installed";
    for (Confirmation* k : {&on_real[i], &on_up[i]}) {
      c.divergences.insert(c.divergences.end(), k->divergences.begin(), k->divergences.end());
      if (k->runs.empty()) continue;
      if (c.runs.empty()) c.runs.push_back(k->runs[0]);  // the model's
      c.runs.push_back(k->runs[1]);
    }
  }
  rep.t_confirm = since(t3);
  if (o.confirm_real || o.confirm_upstream) {
    const size_t late = unconfirmed_by_budget(rep);
    say("confirm: " + std::to_string(rep.classes.size()) + " classes in " + std::to_string(rep.t_confirm).substr(0, 4) + " s" +
        (late ? ", " + std::to_string(late) + " " + kNotConfirmedBudget : ""));
  }
  return rep;
}

}  // namespace fsdpsim
