#include "real_backend/stepped_ranks.hpp"

#include <stdexcept>
#include <thread>

#include "real_backend/comm.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/observer.hpp"
#include "real_backend/real_rank.hpp"

namespace fsdpsim::real {

struct SteppedRanks::Impl {
  int world;
  std::chrono::milliseconds timeout;
  std::vector<std::unique_ptr<Comm>> comms;  // kept across sequences; rebuilt after the group broke
  Layout layout;                             // the ranks hold a pointer to it
  uint64_t seed = 0;
  std::vector<std::unique_ptr<RealRank>> ranks;
  int steps = 0;
  bool stuck = false;

  // Runs body(r) on every rank's thread at once (collectives need them all);
  // an exception on any rank (a dead group) is an infra failure.
  template <class Body>
  bool on_every_rank(RealResult& res, Body&& body) {
    std::vector<std::string> broken(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (const std::exception& e) {
          broken[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r)
      if (!broken[r].empty()) res.infra_message += (res.infra_message.empty() ? "rank " : "; rank ") + std::to_string(r) + ": " + broken[r];
    if (res.infra_message.empty()) return true;
    res.infra_failure = true;
    ranks.clear();
    comms.clear();  // the group is dead; build a new one next time
    return false;
  }

  // Every rank tells the others it issues nothing more in this step; a peer
  // still waiting in a collective gets its hang (its own report says so).
  void fence(int r, int step) {
    try {
      comms[r]->finish(step);
    } catch (const CollectiveFailure&) {
    }
  }

  RealResult begin(const SeqFile& f) {
    if (f.scenario.world != world) throw std::invalid_argument("sequence world differs from the stepped ranks'");
    RealResult res;
    ranks.clear();
    steps = 0;
    stuck = false;
    if (comms.empty()) {
      try {
        comms = join_thread_ranks(world, timeout);
      } catch (const std::runtime_error& e) {
        res.infra_failure = true;
        res.infra_message = e.what();
        return res;
      }
    }
    layout = make_layout(f);
    seed = f.scenario.seed;
    ranks.resize(world);
    if (!on_every_rank(res, [&](int r) {
          comms[r]->begin_sequence();
          ranks[r] = std::make_unique<RealRank>(layout, seed, comms[r].get());
          fence(r, 0);
        }))
      return res;
    for (const auto& op : f.ops) {
      RealResult one = step(op);
      res.observations.insert(res.observations.end(), one.observations.begin(), one.observations.end());
      if (one.infra_failure) return one;
    }
    return res;
  }

  RealResult step(const Op& op) {
    RealResult res;
    if (ranks.empty()) throw std::logic_error("SteppedRanks::step before begin");
    if (stuck) return res;
    const int s = ++steps;
    std::vector<std::vector<RankReport>> reports(world);
    std::vector<char> failed(world, 0);
    if (!on_every_rank(res, [&](int r) {
          if (op.runs_on(r)) {
            try {
              reports[r].push_back(ranks[r]->apply(op, s));
            } catch (const CollectiveFailure& e) {
              reports[r].push_back(ranks[r]->failed_report(op, s, e.status, e.what()));
              failed[r] = 1;  // this rank is stuck in that collective: no fence
            }
          }
          if (!failed[r]) fence(r, s);
        }))
      return res;
    for (char f : failed) stuck = stuck || f;
    res.observations = observe(layout, seed, reports);
    return res;
  }
};

SteppedRanks::SteppedRanks(int world, std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
  impl_->world = world;
  impl_->timeout = timeout;
}

SteppedRanks::~SteppedRanks() = default;

RealResult SteppedRanks::begin(const SeqFile& f) { return impl_->begin(f); }
RealResult SteppedRanks::step(const Op& op) { return impl_->step(op); }
bool SteppedRanks::stuck() const { return impl_->stuck; }

}  // namespace fsdpsim::real
