// What Comm hands a rank depends on what the ranks did, never on timing or on what
// the process ran before (real_backend/comm.cpp): a peer's wait for rank 0's adapter
// file is decided by where rank 0 is, and a part-filled broadcast's untouched tail
// holds torch's deterministic empty fill. Thread ranks over one HashStore, each with
// its slot in a progress table as forked ranks have.
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <functional>
#include <thread>

#include "real_backend/comm.hpp"
#include "real_backend/rank_progress.hpp"

using namespace fsdpsim;
using namespace fsdpsim::real;

namespace {

// Runs body(comm) on two thread ranks whose collectives time out after `timeout`.
void on_two_ranks(std::chrono::milliseconds timeout, const std::function<void(Comm&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  RankProgress progress(2);
  std::vector<RankProbe> probes(2);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        Comm comm(store, r, 2, loopback_device(), timeout);
        comm.set_names({"g"}, {"p"});
        probes[r].progress = &progress;
        probes[r].rank = r;
        comm.set_probe(&probes[r]);
        comm.begin_sequence();
        body(comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A rank 0 that takes longer than the collectives' timeout to save still delivers its file: it was
// running all along, so it could still write it (the 10 s give-up, at most the timeout, made the
// outcome a race against the clock).
TEST(CommDeterminism, SlowRank0StillDeliversItsFile) {
  const at::Tensor saved = at::arange(6, at::kFloat);
  std::vector<int> got(2, -1);
  // The timeout also bounds the ranks' gloo connect: 100 ms failed that under load on 2 cores.
  on_two_ranks(std::chrono::milliseconds(1500), [&](Comm& comm) {
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      comm.write_rank0_file(saved, 1);
      got[0] = 1;
      return;
    }
    at::Tensor t = comm.read_rank0_file(1);
    got[1] = t.defined() && at::equal(t, saved) ? 1 : 0;
  });
  EXPECT_EQ(got, std::vector<int>({1, 1}));
}

// A rank 0 waiting in a collective this rank has not entered cannot write while this rank waits:
// the file is missing, and the peer then joins the collective that releases rank 0 (whose later
// save is another file).
TEST(CommDeterminism, Rank0InACollectiveThisRankHasNotEnteredNeverWrites) {
  std::vector<int> missing(2, -1);
  on_two_ranks(std::chrono::milliseconds(10000), [&](Comm& comm) {
    if (comm.rank() == 0) {
      comm.all_gather(at::ones({4}), 0, 1, {0});
      comm.write_rank0_file(at::ones({3}), 1);
      missing[0] = 0;
      return;
    }
    missing[1] = comm.read_rank0_file(1).defined() ? 0 : 1;
    comm.all_gather(at::ones({4}), 0, 2, {0});
  });
  EXPECT_EQ(missing, std::vector<int>({0, 1}));
}

// Rank 0's bf16 root (16 bytes) into rank 1's fp32 tensor (32 bytes): the first four floats are
// the root's bytes, the other four torch.empty's deterministic fill (NaN), whatever memory the
// allocator hands back; the allocator is first given a freed block of 7s of that size.
TEST(CommDeterminism, PartFilledTailIsTheDeterministicEmptyFill) {
  on_two_ranks(std::chrono::milliseconds(10000), [&](Comm& comm) {
    for (int round = 0; round < 3; ++round) {
      { at::Tensor dirty = at::full({8}, 7.0f); }
      const DType dtype = comm.rank() == 0 ? DType::BF16 : DType::F32;
      at::Tensor got = comm.broadcast(at::arange(1, 9, at::kFloat), 0, dtype, 1);
      ASSERT_EQ(got.numel(), 8);
      if (comm.rank() == 0) continue;
      EXPECT_TRUE(at::isnan(got.narrow(0, 4, 4)).all().item<bool>()) << "round " << round << ": tail " << got.narrow(0, 4, 4);
      EXPECT_FALSE(at::isnan(got.narrow(0, 0, 4)).any().item<bool>()) << "round " << round;
    }
  });
}

}  // namespace
