#include "sim/core/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "model/vocab/cross_paired.hpp"
#include "model/vocab/peer_view.hpp"
#include "model/vocab/refill.hpp"

namespace fsdpsim {

namespace {
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
// What finished runs handed back (recycle), per thread: observations and snapshots of
// earlier runs, whose buffers the next runs write over.
struct Pool {
  // Whole lists of earlier runs, their observations in place: a run writes over element i
  // where an earlier one left it (Refill: moving an Observation is not free) and drops the
  // rest into Refill's spares.
  std::vector<std::vector<Observation>> lists;
  std::vector<StoredSnapshot> snapshots, initial;
  std::vector<uint32_t> issued;
  std::vector<RankModel> ranks;  // left by finished simulators, their state's buffers kept
  std::vector<std::vector<RankModel>> rank_lists;  // their emptied lists, capacity kept
  std::vector<std::vector<Simulator::Pending>> queues;  // per rank, capacity kept
};
thread_local Pool pool;
constexpr size_t kPoolLists = 8, kPoolListObservations = 4096, kPoolRanks = 16;

// Entry i of a lent snapshot list, grown when the pool's is too short.
StoredSnapshot& snapshot_at(std::vector<StoredSnapshot>& v, size_t i) {
  if (i >= v.size()) v.resize(i + 1);
  return v[i];
}

// A stable sort by (step, rank) that moves each Observation once: the order is sorted as
// indices, then applied cycle by cycle (a merge sort moves each one log n times, through a buffer).
void sort_by_step_and_rank(std::vector<Observation>& v) {
  thread_local std::vector<uint32_t> order;  // order[k]: the observation that goes to position k
  order.resize(v.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return v[a].step != v[b].step ? v[a].step < v[b].step : v[a].rank < v[b].rank;
  });
  for (uint32_t start = 0; start < order.size(); ++start) {
    if (order[start] == start) continue;
    Observation held = std::move(v[start]);
    uint32_t at = start;
    while (order[at] != start) {
      const uint32_t from = order[at];
      v[at] = std::move(v[from]);  // v[at] was moved from already: nothing is freed
      order[at] = at;
      at = from;
    }
    v[at] = std::move(held);
    order[at] = at;
  }
}

uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
  return h;
}
}  // namespace

Simulator::Simulator(const Topology& topo) : topo_(&topo) {
  if (!pool.rank_lists.empty()) {
    ranks_ = std::move(pool.rank_lists.back());
    pool.rank_lists.pop_back();
  }
  ranks_.reserve(static_cast<size_t>(topo.world));
  for (int r = 0; r < topo.world; ++r) {
    if (pool.ranks.empty()) {
      ranks_.emplace_back(topo, r);
    } else {  // a loop building a simulator per sequence allocates no rank state
      ranks_.push_back(std::move(pool.ranks.back()));
      pool.ranks.pop_back();
      ranks_.back().rebind(topo, r);
    }
  }
  queues_ = std::move(pool.queues);
}

void Simulator::set_provenance(std::vector<Provenance>* p) {
  if (p) p->resize(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r].set_provenance(p ? &(*p)[r] : nullptr);
  fresh_ = false;  // the next run() resets the ranks, and so starts their provenance
}

Simulator::~Simulator() {
  for (auto& r : ranks_) {
    r.set_provenance(nullptr);  // pooled ranks outlive the caller's provenance
    if (pool.ranks.size() >= kPoolRanks) break;
    pool.ranks.push_back(std::move(r));
  }
  ranks_.clear();
  if (pool.rank_lists.size() < kPoolLists) pool.rank_lists.push_back(std::move(ranks_));
  if (queues_.size() > pool.queues.size()) pool.queues = std::move(queues_);
}

// gloo's all-gather is a ring (gloo allgather.cc: each rank first receives its left neighbour's
// chunk): with some rank never joining, a rank whose left neighbour is in an all-gather too and
// sends more bytes than it posted still aborts on tcp/pair.cc's preamble enforce, a mismatch, not
// the hang the absent rank alone would make (crosscheck seeds 218 and 250 at world 3, measured);
// so too beside ranks in another op (seed 30144 at world 4: two reduce-scatters).
template <class Queues>
static bool ring_receiver_overrun(const Queues& queues, const std::vector<size_t>& heads) {
  const size_t w = queues.size();
  for (size_t r = 0; r < w; ++r) {
    const size_t left = (r + w - 1) % w;
    if (heads[r] >= queues[r].size() || heads[left] >= queues[left].size()) continue;
    const CollRecord& mine = queues[r][heads[r]].coll;
    const CollRecord& from = queues[left][heads[left]].coll;
    if (mine.op == CollOp::AllGather && from.op == CollOp::AllGather &&
        from.count * dtype_bytes(from.dtype) > mine.count * dtype_bytes(mine.dtype))
      return true;
  }
  return false;
}

// Pops matching heads while every rank has one; says why it stopped.
Simulator::Stop Simulator::match() {
  while (true) {
    for (size_t r = 0; r < queues_.size(); ++r)
      if (heads_[r] >= queues_[r].size()) return Stop::Waiting;
    const CollRecord& c0 = queues_[0][heads_[0]].coll;
    bool crossed = false;
    bool part_filled = false;
    for (size_t r = 1; r < queues_.size(); ++r) {
      const CollRecord& c = queues_[r][heads_[r]].coll;
      // DTensor's redistribution (an all-gather no FSDP group issues, an all-reduce of a Partial
      // tensor) goes over the mesh's one process group: it pairs with any peer collective of that
      // size and dtype.
      const bool dtensor = c.op == CollOp::AllReduce ||
                           (c.op == CollOp::AllGather && (c.into != CollRecord::kIntoU || c0.into != CollRecord::kIntoU));
      // Another op never pairs: gloo's algorithms exchange on their own slots, so both ranks wait
      // out the timeout (torch ProcessGroupGloo.cpp::ProcessGroupGloo::_allgather_base against
      // ::_reduce_scatter_base or ::broadcast, measured: docs/design/upstream-backend.md).
      if (c.op != c0.op) return Stop::Blocked;
      // Other bytes of one op: the rank receiving more than it posted aborts (gloo tcp/pair.cc's
      // enforce on the preamble length); one byte count pairs whatever the dtypes.
      const int64_t posted = c.count * dtype_bytes(c.dtype), sent = c0.count * dtype_bytes(c0.dtype);
      // A broadcast from rank 0 (the root) that sends fewer bytes than this rank posted completes
      // on both, the receiver's buffer holding the root's bytes first and its own after them
      // (measured on torch 2.13 CPU gloo, docs/design/upstream-backend.md).
      if (c0.op == CollOp::Broadcast && posted > sent) {
        crossed = part_filled = true;
        continue;
      }
      if (posted != sent) return Stop::Mismatch;
      // gloo pairs the n-th call of every rank by op and bytes alone (torch ProcessGroupGloo.cpp::
      // AsyncAllgatherWork / AsyncReduceScatterWork send flat buffers): another group's, other
      // parameters', another dtype's or another key's bytes of the same size go through.
      if (c.count != c0.count || c.dtype != c0.dtype || (!dtensor && (c.group != c0.group || !same_members(r, 0))))
        crossed = true;
    }
    if (part_filled) fill_part(c0);
    if (crossed) {
      cross_pair();
      // a merge's gather of other bytes still adds its delta, made of the peers' foreign rows
      if (c0.op == CollOp::AllGather) apply_gathered_deltas();
    } else if (c0.op == CollOp::AllGather) {
      mix_check();
      apply_gathered_deltas();
    }
    for (size_t r = 0; r < queues_.size(); ++r) ++heads_[r];
  }
}

// Every rank's head collective as describe_pending and describe_cross_paired word it.
std::vector<PendingCollective> Simulator::pending_heads() const {
  std::vector<PendingCollective> heads;
  for (size_t r = 0; r < queues_.size(); ++r) {
    if (heads_[r] >= queues_[r].size()) {
      heads.push_back({false, {}, 0, {}});
      continue;
    }
    const Pending& p = queues_[r][heads_[r]];
    Collective c = ranks_[r].observer().collective_of(p.coll);
    std::vector<std::string> names;  // the parts name the parameters packed
    for (const auto& part : c.parts) names.push_back(part.param);
    heads.push_back({true, std::move(c), p.step, std::move(names)});
  }
  return heads;
}

// The heads completed cross-paired: each rank's op goes on with peers' bytes of another tensor.
// An all-gather's unsharded copies hold them (torch _fsdp_collectives.py::foreach_all_gather_copy_out
// splits the output by this rank's own packing), so every gathered value is a mix; a
// reduce-scatter's gradients are sums of unrelated gradients, which nothing observed judges.
void Simulator::cross_pair() {
  const std::string desc = describe_cross_paired(pending_heads());
  for (size_t r = 0; r < queues_.size(); ++r) {
    const Pending& p = queues_[r][heads_[r]];
    if (p.obs >= 0 && (crossed_.empty() || crossed_.back().first != p.obs)) crossed_.push_back({p.obs, desc});
    if (p.coll.op != CollOp::AllGather || p.coll.into != CollRecord::kIntoU) continue;
    for (size_t i = 0; i < topo_->groups[p.coll.target].params.size(); ++i) ranks_[r].dtensor().mark_mixed(p.coll, static_cast<int>(i));
    refresh_observation(r, p);
  }
}

// A broadcast completed with fewer bytes than some ranks posted: those ranks' tensors hold the
// root's bytes read in their own dtype, then what torch.empty left (accelerate utils/fsdp_utils.py::
// fsdp2_load_full_state_dict receives into torch.empty): values no rank holds.
void Simulator::fill_part(const CollRecord& root) {
  const int64_t sent = root.count * dtype_bytes(root.dtype);
  for (size_t r = 1; r < queues_.size(); ++r) {
    const CollRecord& c = queues_[r][heads_[r]].coll;
    if (c.count * dtype_bytes(c.dtype) > sent) ranks_[r].dtensor().mark_part_filled(c, sent);
  }
}

// Ranks r and q's head collectives pack the same parameters (compared in
// place: this runs for every collective).
bool Simulator::same_members(size_t r, size_t q) const {
  const CollRecord& a = queues_[r][heads_[r]].coll;
  const CollRecord& b = queues_[q][heads_[q]].coll;
  if (a.member_count != b.member_count) return false;
  const int* ma = ranks_[r].log().members().data() + a.member_begin;
  return std::equal(ma, ma + a.member_count, ranks_[q].log().members().data() + b.member_begin);
}

// A matched collective changed what rank r's op left behind: its weights'
// observation and snapshot are taken again.
void Simulator::refresh_observation(size_t r, const Pending& p) {
  if (p.obs < 0) return;
  const Observer view = observer(r);
  view.observe_layers_into(observations_->at(p.obs).layers);
  view.stored_snapshot_into(snapshots_[p.obs]);
}

// Matched all-gathers: where the ranks contributed different values of a
// parameter, what each of them gathered is a mix (DTensor::mark_mixed).
void Simulator::mix_check() {
  auto digest = [&](size_t r, int i) {
    const CollRecord& c = queues_[r][heads_[r]].coll;
    return c.digest_begin < 0 ? 0 : ranks_[r].log().digest(c, i);
  };
  const CollRecord& c0 = queues_[0][heads_[0]].coll;
  bool same_kind = true;
  for (size_t r = 1; r < queues_.size(); ++r) same_kind = same_kind && queues_[r][heads_[r]].coll.into == c0.into;
  if (!same_kind) {  // a group all-gather paired with a DTensor one: every gathered value is a mix
    for (size_t r = 0; r < queues_.size(); ++r) {
      const Pending& p = queues_[r][heads_[r]];
      if (p.coll.into != CollRecord::kIntoU) continue;
      for (size_t i = 0; i < topo_->groups[p.coll.target].params.size(); ++i) ranks_[r].dtensor().mark_mixed(p.coll, static_cast<int>(i));
      refresh_observation(r, p);
    }
    return;
  }
  int n = c0.into == CollRecord::kIntoU ? static_cast<int>(topo_->groups[c0.target].params.size()) : 1;
  thread_local std::vector<uint8_t> changed;  // per rank: its gathered values were set below
  changed.assign(queues_.size(), 0);
  // LoRA parameters first: taking their gathered values rebases an edit the op made to its layer's U
  // weight (DTensor::rebase_u_delta), which the weight's own gathered rows then build on.
  auto weight_at = [&](int i) {
    return c0.into == CollRecord::kIntoU && topo_->params[topo_->groups[c0.target].params[i]].kind == ParamKind::Weight;
  };
  for (int k = 0; k < 2 * n; ++k) {
    const int i = k % n;
    if (weight_at(i) != (k >= n)) continue;
    bool differ = false;  // among the ranks that hold rows (0: padding only)
    bool padding_only = false;  // some rank contributed no rows: its U is the holders' rows
    uint64_t first = 0;
    for (size_t r = 0; r < queues_.size(); ++r) {
      uint64_t d = digest(r, i);
      if (d == 0) {
        padding_only = true;
        continue;
      }
      if (first == 0) first = d;
      differ = differ || d != first;
    }
    if (!differ && !(padding_only && first != 0 && c0.into == CollRecord::kIntoU)) continue;
    thread_local std::vector<DTensor> ports;  // buffers: this runs per differing all-gather
    thread_local std::vector<const DTensor*> ranks;
    thread_local std::vector<const CollRecord*> colls;
    ports.clear();
    ranks.clear();
    colls.clear();
    for (size_t r = 0; r < queues_.size(); ++r) ports.push_back(ranks_[r].dtensor());
    for (size_t r = 0; r < queues_.size(); ++r) {
      ranks.push_back(&ports[r]);
      colls.push_back(&queues_[r][heads_[r]].coll);
    }
    uint32_t ver = 0;
    WeightContent w;
    const bool whole = c0.into == CollRecord::kIntoU && DTensor::concatenated_u(ranks, colls, i, &ver, &w);
    // Where the holders agree, only a rank with padding only has something to take: their values,
    // not its own counter (torch _fsdp_param.py::FSDPParam.init_unsharded_param views the all-gather
    // output). Without a reading of those values it is left as it is.
    if (!differ && !whole) continue;
    for (size_t r = 0; r < queues_.size(); ++r) {
      if (!differ && digest(r, i) != 0) continue;
      const Pending& p = queues_[r][heads_[r]];
      if (whole) ranks_[r].dtensor().set_gathered(p.coll, i, ver, w);
      else ranks_[r].dtensor().mark_mixed(p.coll, i);
      changed[r] = 1;
    }
  }
  // Once per rank, after every parameter: refreshing reads the rank's state, which nothing above reads back.
  for (size_t r = 0; r < queues_.size(); ++r)
    if (changed[r]) refresh_observation(r, queues_[r][heads_[r]]);
}

// A DTensor all-gather matched: the DTensor port settles it on every rank (model/machine/
// dtensor_settle.cpp); the simulator marks the observations it changed.
void Simulator::apply_gathered_deltas() {
  thread_local std::vector<MatchedGather> gathers;  // buffers: this runs per matched all-gather
  thread_local std::vector<GatherSettled> settled;
  gathers.clear();
  for (size_t r = 0; r < queues_.size(); ++r) gathers.push_back({ranks_[r].dtensor(), &queues_[r][heads_[r]].coll});
  DTensor::settle_deltas(gathers, gathered_a_, settled);
  for (size_t r = 0; r < queues_.size(); ++r) {
    const Pending& p = queues_[r][heads_[r]];
    if (settled[r].corrupt_delta && p.obs >= 0)
      for (DeltaObs& d : observations_->at(p.obs).deltas)
        if (d.adapter == topo_->adapters[p.coll.adapter].name) d.value = WeightClass::Corrupt;
    if (settled[r].settled) refresh_observation(r, p);
  }
}

// Ranks that ran out of step see each other's shards where the collectives
// place them (model/vocab/peer_view.hpp): judge each stored weight against
// those, as the real backend's observer does.
void Simulator::judge_against_peers(RunResult& res) {
  const int world = topo_->world;
  // per rank: observation indices, in execution order (buffers kept between runs)
  thread_local std::vector<std::vector<size_t>> mine;
  thread_local std::vector<std::vector<ReportMark>> marks;
  mine.resize(world);
  marks.resize(world);
  for (int r = 0; r < world; ++r) mine[r].clear(), marks[r].clear();
  for (size_t i = 0; i < res.observations.size(); ++i) {
    const Observation& o = res.observations[i];
    size_t issued = (marks[o.rank].empty() ? 0 : marks[o.rank].back().issued) + issued_[i];
    bool known = o.status != Status::Hang && o.status != Status::Mismatch;
    mine[o.rank].push_back(i);
    marks[o.rank].push_back({o.step, issued, known});
  }
  thread_local std::vector<std::pair<int, const StoredSnapshot*>> peers;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < mine[r].size(); ++i) {
      Observation& o = res.observations[mine[r][i]];
      if (o.layers.empty()) continue;
      peers.clear();
      for (int j = 0; j < world; ++j) {
        if (j == r) continue;
        int m = peer_view(marks, j, r, i);
        peers.push_back({j, m < 0 ? &initial_[j] : &snapshots_[mine[j][m]]});
      }
      judge_replicas(snapshots_[mine[r][i]], peers, o);
      for (size_t l = 0; l < o.layers.size(); ++l) {
        LayerObs& lo = o.layers[l];
        lo.stored = observer(r).classify_stored(snapshots_[mine[r][i]], peers, static_cast<int>(l));
        // The layer's group by index: o.groups lists the topology's groups once prepared, none before.
        const int g = topo_->layers[l].group;
        const bool held_shard = o.groups.empty() || o.groups[g].state == ShardedState::Sharded;
        if (held_shard) lo.registered = lo.stored;
        if (topo_->layers[l].quant) lo.stored = lo.registered = WeightClass::Unjudged;  // as Observer::observe_layers_into says why
      }
    }
  }
}

// Whole unmanaged replicas (adapters added after fully_shard) whose values this rank and a
// peer hold differently, as the real backend's observer compares them (real_backend/observer.cpp::
// judge_replicas, fsdpsim_upstream judge.py::judge_replicas): against whatever the peer holds under
// the name, its own replica or its local rows of a managed shard (a name re-added after fully_shard
// on this rank alone).
void Simulator::judge_replicas(const StoredSnapshot& mine, const std::vector<std::pair<int, const StoredSnapshot*>>& peers,
                               Observation& o) const {
  for (size_t p = 0; p < mine.replica.size(); ++p) {
    if (mine.replica_kind[p] != StoredSnapshot::kWhole) continue;
    bool differ = false;
    for (const auto& [j, snap] : peers) {
      const uint8_t k = snap->replica_kind[p];
      differ = differ || k == StoredSnapshot::kSomeRows || (k != StoredSnapshot::kNone && snap->replica[p] != mine.replica[p]);
    }
    if (differ) o.replica_diff.push_back(topo_->params[p].name);
  }
}

// Marks every rank's unmatched head as hang or mismatch, naming what each rank
// waits in. A rank stuck inside an op shows only the collectives it issued up
// to that one; its state is not observable.
void Simulator::fail_collectives(bool mismatch, RunResult& res) {
  const std::string desc = describe_pending(pending_heads());
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
    // The stuck op's collectives up to the one it waits in (none kept: RunOptions::spec_fields_only).
    if (!o.collectives.empty()) stuck.collectives.assign(o.collectives.begin(), o.collectives.begin() + p.k + 1);
    issued_[p.obs] = static_cast<uint32_t>(p.k + 1);
    o = stuck;
  }
  (mismatch ? res.mismatch : res.hang) = true;
  res.trace_hash = mix(res.trace_hash, mismatch ? 0xabcdefull : 0x123456ull);
}

RunResult Simulator::run(const std::vector<Op>& ops, const RunOptions& opt) {
  if (!fresh_)  // constructed ranks are already in reset() state
    for (auto& r : ranks_) r.reset();
  rank0_first_file_.saves = 0;
  return run_more(ops, 0, opt);
}

RunResult Simulator::run_more(const std::vector<Op>& ops, int first_step, const RunOptions& opt) {
  RunResult res;
  res.trace_hash = kFnvOffset;
  if (opt.observe && !pool.lists.empty()) {
    res.observations = std::move(pool.lists.back());
    pool.lists.pop_back();
  }
  observations_ = &res.observations;
  snapshots_ = std::move(pool.snapshots);
  initial_ = std::move(pool.initial);
  issued_ = std::move(pool.issued);
  issued_.clear();
  crossed_.clear();
  const int world = topo_->world;
  fresh_ = false;  // run_more changes the ranks: the next run() resets them
  // Each rank's state as this run starts, for peers that have not run
  // anything yet when an observation is judged.
  if (opt.observe && world > 1)
    for (int r = 0; r < world; ++r) observer(r).stored_snapshot_into(snapshot_at(initial_, r));
  queues_.resize(world);
  for (auto& q : queues_) q.clear();
  heads_.assign(world, 0);
  gathered_a_.assign(world, kNoRows);
  std::vector<int> cursor(world, 0);
  const int n = static_cast<int>(ops.size());
  auto skip = [&](int r) {
    while (cursor[r] < n && !ops[cursor[r]].runs_on(r)) ++cursor[r];
  };
  for (int r = 0; r < world; ++r) skip(r);
  // load_adapters on rank r > 0 reads the file of rank 0's save numbered like r's own last save
  // (the first when r saved none). A rank 0 that can still run may yet write it, so such a load
  // waits; one stuck in a collective (every collective needs r too) or done never will, and the
  // load finds no file (fsdpsim_upstream/op_checkpoints.py::run_load_adapters; Comm::read_rank0_file).
  bool save0_pending = false;  // rank 0's last save waits in its collectives: nothing written yet
  auto rank0_runs = [&] { return cursor[0] < n && heads_[0] >= queues_[0].size(); };
  auto file_missing = [&](int r) {
    if (r == 0 || ops[cursor[r]].kind != OpKind::LoadAdapters) return false;
    const bool settled = heads_[0] >= queues_[0].size() || !save0_pending;
    return ranks_[0].state().saves - (settled ? 0 : 1) < std::max(ranks_[r].state().saves, 1);
  };
  {
    // Written over an earlier run's observations; those past this run's go to the spares when the loop ends.
    Refill<Observation> observed(res.observations);
    while (true) {
      // The runnable rank (nothing unmatched) with the earliest next op, lowest rank first.
      int pick = -1;
      for (int r = 0; r < world; ++r) {
        if (cursor[r] >= n || heads_[r] < queues_[r].size()) continue;
        if (rank0_runs() && file_missing(r)) continue;
        if (pick < 0 || cursor[r] < cursor[pick]) pick = r;
      }
      if (pick < 0) break;
      const int i = cursor[pick];
      const Op& op = ops[i];
      RankModel& m = ranks_[pick];
      m.set_rank0_file_missing(file_missing(pick));
      m.set_rank0_first_file(rank0_first_file_.saves > 0 ? &rank0_first_file_ : nullptr);
      if (Provenance* pv = m.provenance()) pv->start_op(first_step + i + 1);
      const OpResult& r = m.apply(op);
      ++res.rank_ops;
      m.set_rank0_file_missing(false);
      m.set_rank0_first_file(nullptr);
      if (pick == 0 && rank0_first_file_.saves == 0 && m.state().saves > 0) rank0_first_file_ = m.state();  // its AdapterFile part
      const auto& colls = m.log().records();
      if (pick == 0) save0_pending = op.kind == OpKind::SaveAdapters && !colls.empty();
      int obs = -1;
      if (opt.observe) {
        obs = static_cast<int>(observed.size());
        const Observer view = observer(pick);
        view.observe_into(observed.next(), first_step + i + 1, op, r, opt.spec_fields_only);
        issued_.push_back(static_cast<uint32_t>(colls.size()));
        view.stored_snapshot_into(snapshot_at(snapshots_, obs));  // indexed like the observations
      }
      res.trace_hash = mix(res.trace_hash, (static_cast<uint64_t>(first_step + i + 1) << 40) ^ (static_cast<uint64_t>(pick) << 32) ^
                                               (static_cast<uint64_t>(r.status) << 8) ^ r.grads.bits());
      for (size_t k = 0; k < colls.size(); ++k) {
        const auto& c = colls[k];
        res.trace_hash = mix(res.trace_hash, (static_cast<uint64_t>(c.op) << 56) ^ (static_cast<uint64_t>(c.group) << 48) ^ static_cast<uint64_t>(c.count));
        queues_[pick].push_back({c, first_step + i + 1, obs, static_cast<int>(k)});
      }
      ++cursor[pick];
      skip(pick);
      const Stop stop = match();
      if (stop != Stop::Waiting) {
        fail_collectives(stop == Stop::Mismatch || (stop == Stop::Blocked && ring_receiver_overrun(queues_, heads_)), res);
        break;
      }
    }
  }
  bool unmatched = false;
  for (int r = 0; r < world; ++r) unmatched = unmatched || heads_[r] < queues_[r].size();
  if (unmatched && !res.mismatch) fail_collectives(ring_receiver_overrun(queues_, heads_), res);
  // An op that ended ok after a cross-pairing says so (one that raised keeps its error's text).
  for (const auto& [obs, desc] : crossed_) {
    Observation& o = res.observations[obs];
    if (o.status == Status::Ok && o.message.empty()) o.message = desc;
  }
  crossed_.clear();
  if (opt.observe) {
    if (world > 1) judge_against_peers(res);
    auto before = [](const Observation& a, const Observation& b) { return a.step != b.step ? a.step < b.step : a.rank < b.rank; };
    // Ranks mostly run in (step, rank) order already; moving Observations is not free.
    if (!std::is_sorted(res.observations.begin(), res.observations.end(), before)) sort_by_step_and_rank(res.observations);
    if (opt.hash_observations) res.trace_hash = observations_hash(res.observations);
  }
  // Only this run reads them: a Simulator kept between runs (the explorer's states) stays small.
  pool.snapshots = std::move(snapshots_);
  pool.initial = std::move(initial_);
  pool.issued = std::move(issued_);
  snapshots_.clear();
  initial_.clear();
  issued_.clear();
  observations_ = nullptr;
  return res;
}

namespace {

// S8: `second` (another run of the same sequence) must equal `first`.
void check_s8(RunResult& first, const RunResult& second) {
  if (first.trace_hash != second.trace_hash || first.observations.size() != second.observations.size()) {
    first.findings.push_back({"S8", 0, -1, "S8: two runs of the same sequence gave different traces", ""});
  } else {
    for (size_t i = 0; i < first.observations.size(); ++i) {
      auto d = observation_diff(first.observations[i], second.observations[i]);
      if (d.empty()) continue;
      first.findings.push_back({"S8", first.observations[i].step, first.observations[i].rank,
                                fmt::format("S8 step {}: two runs differ: {}", first.observations[i].step, d[0]), ""});
      break;
    }
  }
}

}  // namespace

RunResult run_checked(const SeqFile& f) {
  Topology topo = compile_topology(f);
  Simulator a(topo), b(topo);
  RunResult first = a.run(f.ops);
  RunResult second = b.run(f.ops);
  first.findings = check_spec(f, first.observations);
  check_s8(first, second);
  recycle(std::move(second));
  return first;
}

RunResult run_checked_sampled(const SeqFile& f, uint32_t every) { return run_checked_sampled(f, compile_topology(f), every); }

RunResult run_checked_sampled(const SeqFile& f, const Topology& topo, uint32_t every) {
  Simulator sim(topo);
  RunOptions light;
  light.hash_observations = false;
  light.spec_fields_only = true;
  RunResult first = sim.run(f.ops, light);
  first.findings = check_spec(f, first.observations);
  if (every <= 1 || first.trace_hash % every == 0) {
    RunResult second = sim.run(f.ops, light);
    check_s8(first, second);
    recycle(std::move(second));
  }
  return first;
}

void recycle(RunResult&& r) {
  if (pool.lists.size() < kPoolLists && r.observations.size() <= kPoolListObservations) {
    pool.lists.push_back(std::move(r.observations));  // with its observations: the next run writes over them
    return;
  }
  Refill<Observation> to_spares(r.observations);  // writes none: its end keeps them as spares (bounded)
}

}  // namespace fsdpsim
