#include "sim/simulator.hpp"

#include <algorithm>

namespace fsdpsim {

namespace {
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
  return h;
}
}  // namespace

uint64_t hash_step(uint64_t h, int step, int rank, const OpResult& r, const std::vector<CollRecord>& colls) {
  h = mix(h, (static_cast<uint64_t>(step) << 32) | static_cast<uint32_t>(rank));
  h = mix(h, (static_cast<uint64_t>(r.status) << 8) | r.grads);
  h = mix(h, static_cast<uint64_t>(r.index + 1));
  for (const auto& c : colls) h = mix(h, (static_cast<uint64_t>(c.op) << 56) ^ (static_cast<uint64_t>(c.group) << 48) ^ static_cast<uint64_t>(c.count));
  return h;
}

Simulator::Simulator(const Topology& topo) : topo_(&topo), spec_(topo) {
  for (int r = 0; r < topo.world; ++r) ranks_.emplace_back(topo, r);
}

// Pops matching heads while every rank has one. Returns false on a mismatch.
bool Simulator::match() {
  while (true) {
    for (size_t r = 0; r < queues_.size(); ++r)
      if (heads_[r] >= queues_[r].size()) return true;
    const CollRecord& c0 = queues_[0][heads_[0]].coll;
    for (size_t r = 1; r < queues_.size(); ++r) {
      const CollRecord& c = queues_[r][heads_[r]].coll;
      if (c.op != c0.op || c.group != c0.group || c.count != c0.count) return false;
    }
    for (size_t r = 0; r < queues_.size(); ++r) ++heads_[r];
  }
}

// Marks every rank's unmatched head as hang or mismatch, naming what each rank waits in.
void Simulator::fail_collectives(bool mismatch, RunResult& res) {
  std::string desc;
  for (size_t r = 0; r < queues_.size(); ++r) {
    desc += (r ? "; " : "") + std::string("rank ") + std::to_string(r) + " ";
    if (heads_[r] < queues_[r].size()) {
      const Pending& p = queues_[r][heads_[r]];
      desc += "in " + collective_text({p.coll.op, topo_->groups[p.coll.group].name, p.coll.count}) + " at step " + std::to_string(p.step);
    } else {
      desc += "issues no matching collective";
    }
  }
  int first_step = 1 << 30;
  for (size_t r = 0; r < queues_.size(); ++r) {
    if (heads_[r] >= queues_[r].size()) continue;
    const Pending& p = queues_[r][heads_[r]];
    first_step = std::min(first_step, p.step);
    if (p.obs >= 0) {
      Observation& o = res.observations[p.obs];
      o.status = mismatch ? Status::Mismatch : Status::Hang;
      o.message = (mismatch ? "collective mismatch: " : "hang: ") + desc;
    }
  }
  (mismatch ? res.mismatch : res.hang) = true;
  res.findings.push_back({"S5", first_step, -1,
                          "S5 step " + std::to_string(first_step) + ": " + (mismatch ? "collective mismatch: " : "ranks hang: ") + desc});
  res.trace_hash = mix(res.trace_hash, mismatch ? 0xabcdefull : 0x123456ull);
}

RunResult Simulator::run(const std::vector<Op>& ops, const RunOptions& opt) {
  RunResult res;
  res.trace_hash = kFnvOffset;
  const int world = topo_->world;
  for (auto& r : ranks_) r.reset();
  spec_.reset();
  queues_.assign(world, {});
  heads_.assign(world, 0);
  std::vector<int> cursor(world, 0);
  std::vector<int> last_run(world, -1);
  const int n = static_cast<int>(ops.size());
  auto skip = [&](int r) {
    while (cursor[r] < n && !ops[cursor[r]].runs_on(r)) ++cursor[r];
  };
  for (int r = 0; r < world; ++r) skip(r);
  while (true) {
    // The runnable rank (nothing unmatched) with the earliest next op, lowest rank first.
    int pick = -1;
    for (int r = 0; r < world; ++r) {
      if (cursor[r] >= n || heads_[r] < queues_[r].size()) continue;
      if (pick < 0 || cursor[r] < cursor[pick]) pick = r;
    }
    if (pick < 0) break;
    const int i = cursor[pick];
    const Op& op = ops[i];
    RankModel& m = ranks_[pick];
    m.collectives().clear();
    const OpResult& r = m.apply(op);
    ++res.rank_ops;
    const auto& colls = m.collectives();
    int obs = -1;
    if (opt.observe) {
      obs = static_cast<int>(res.observations.size());
      res.observations.push_back(m.observe(i + 1, op, r, colls.data(), colls.size()));
    }
    res.trace_hash = hash_step(res.trace_hash, i + 1, pick, r, colls);
    for (const auto& c : colls) queues_[pick].push_back({c, i + 1, obs});
    if (opt.check_spec) spec_.after_rank_op(i + 1, op, m, r, res.findings);
    last_run[pick] = i;
    ++cursor[pick];
    skip(pick);
    if (!match()) {
      fail_collectives(true, res);
      break;
    }
    // Every rank finished op i together: compare their adapter state (S5).
    if (opt.check_spec && op.rank < 0 && pick == world - 1) {
      bool lockstep = true;
      for (int q = 0; q < world; ++q) lockstep = lockstep && last_run[q] == i && heads_[q] == queues_[q].size();
      if (lockstep) spec_.after_all_ranks(i + 1, ranks_, res.findings);
    }
  }
  bool unmatched = false;
  for (int r = 0; r < world; ++r) unmatched = unmatched || heads_[r] < queues_[r].size();
  if (unmatched && !res.mismatch) fail_collectives(false, res);
  if (opt.observe)
    std::stable_sort(res.observations.begin(), res.observations.end(),
                     [](const Observation& a, const Observation& b) { return a.step != b.step ? a.step < b.step : a.rank < b.rank; });
  std::stable_sort(res.findings.begin(), res.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.step != b.step ? a.step < b.step : a.rank < b.rank; });
  return res;
}

RunResult run_checked(const Topology& topo, const std::vector<Op>& ops, const RunOptions& opt) {
  Simulator a(topo), b(topo);
  RunResult first = a.run(ops, opt);
  RunResult second = b.run(ops, opt);
  if (first.trace_hash != second.trace_hash || first.observations.size() != second.observations.size()) {
    first.findings.push_back({"S8", 0, -1, "S8: two runs of the same sequence gave different traces"});
  } else {
    for (size_t i = 0; i < first.observations.size(); ++i) {
      if (first.observations[i] == second.observations[i]) continue;
      first.findings.push_back({"S8", first.observations[i].step, first.observations[i].rank,
                                "S8 step " + std::to_string(first.observations[i].step) + ": two runs differ: " +
                                    observation_diff(first.observations[i], second.observations[i])[0]});
      break;
    }
  }
  return first;
}

}  // namespace fsdpsim
