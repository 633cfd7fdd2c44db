#include "sim/simulator.hpp"

#include <algorithm>
#include <sstream>

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

uint64_t observations_hash(const std::vector<Observation>& obs) {
  uint64_t h = kFnvOffset;
  std::ostringstream os;
  for (const auto& o : obs) {
    os.str("");
    print_json(os, o);
    for (char c : os.str()) {
      h ^= static_cast<unsigned char>(c);
      h *= kFnvPrime;
    }
  }
  return h;
}

Simulator::Simulator(const Topology& topo) : topo_(&topo) {
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

// Marks every rank's unmatched head as hang or mismatch, naming what each rank
// waits in. A rank stuck inside an op shows only the collectives it issued up
// to that one; its state is not observable.
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
  for (size_t r = 0; r < queues_.size(); ++r) {
    if (heads_[r] >= queues_[r].size()) continue;
    const Pending& p = queues_[r][heads_[r]];
    if (p.obs < 0) continue;
    Observation stuck;
    Observation& o = res.observations[p.obs];
    stuck.step = o.step;
    stuck.rank = o.rank;
    stuck.op = o.op;
    stuck.status = mismatch ? Status::Mismatch : Status::Hang;
    stuck.message = (mismatch ? "collective mismatch: " : "hang: ") + desc;
    stuck.collectives.assign(o.collectives.begin(), o.collectives.begin() + p.k + 1);
    o = stuck;
  }
  (mismatch ? res.mismatch : res.hang) = true;
  res.trace_hash = mix(res.trace_hash, mismatch ? 0xabcdefull : 0x123456ull);
}

RunResult Simulator::run(const std::vector<Op>& ops, const RunOptions& opt) {
  RunResult res;
  res.trace_hash = kFnvOffset;
  const int world = topo_->world;
  for (auto& r : ranks_) r.reset();
  queues_.assign(world, {});
  heads_.assign(world, 0);
  std::vector<int> cursor(world, 0);
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
    res.trace_hash = mix(res.trace_hash, (static_cast<uint64_t>(i + 1) << 40) ^ (static_cast<uint64_t>(pick) << 32) ^
                                             (static_cast<uint64_t>(r.status) << 8) ^ r.grads);
    for (size_t k = 0; k < colls.size(); ++k) {
      const auto& c = colls[k];
      res.trace_hash = mix(res.trace_hash, (static_cast<uint64_t>(c.op) << 56) ^ (static_cast<uint64_t>(c.group) << 48) ^ static_cast<uint64_t>(c.count));
      queues_[pick].push_back({c, i + 1, obs, static_cast<int>(k)});
    }
    ++cursor[pick];
    skip(pick);
    if (!match()) {
      fail_collectives(true, res);
      break;
    }
  }
  bool unmatched = false;
  for (int r = 0; r < world; ++r) unmatched = unmatched || heads_[r] < queues_[r].size();
  if (unmatched && !res.mismatch) fail_collectives(false, res);
  if (opt.observe) {
    std::stable_sort(res.observations.begin(), res.observations.end(),
                     [](const Observation& a, const Observation& b) { return a.step != b.step ? a.step < b.step : a.rank < b.rank; });
    res.trace_hash = observations_hash(res.observations);
  }
  return res;
}

RunResult run_checked(const SeqFile& f) {
  Topology topo = compile_topology(f.scenario);
  Simulator a(topo), b(topo);
  RunResult first = a.run(f.ops);
  RunResult second = b.run(f.ops);
  first.findings = check_spec(f, first.observations);
  if (first.trace_hash != second.trace_hash || first.observations.size() != second.observations.size()) {
    first.findings.push_back({"S8", 0, -1, "S8: two runs of the same sequence gave different traces"});
  } else {
    for (size_t i = 0; i < first.observations.size(); ++i) {
      auto d = observation_diff(first.observations[i], second.observations[i]);
      if (d.empty()) continue;
      first.findings.push_back({"S8", first.observations[i].step, first.observations[i].rank,
                                "S8 step " + std::to_string(first.observations[i].step) + ": two runs differ: " + d[0]});
      break;
    }
  }
  return first;
}

}  // namespace fsdpsim
