// The fingerprinted collectives (real_backend/comm.cpp) on torch 2.13's gloo,
// thread ranks over one HashStore: the values gloo's all-gather into one tensor
// and reduce-scatter (AVG) deliver, inline and native payloads alike, and that a
// size mismatch is still reported rather than reaching gloo (which aborts).
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <functional>
#include <thread>

#include "real_backend/comm.hpp"

using namespace fsdpsim;
using namespace fsdpsim::real;

namespace {

// Runs body(comm) on `world` thread ranks sharing one gloo device.
void on_ranks(int world, const std::function<void(Comm&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        Comm comm(store, r, world, loopback_device(), std::chrono::milliseconds(10000));
        comm.set_names({"g"}, {"p"});
        body(comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Rank r's buffer: element i is (r + 1) * 1000 + i, exact in fp32.
at::Tensor rank_values(int rank, int64_t n) { return at::arange(n, at::kFloat).add_((rank + 1) * 1000.0); }

// Sizes on both sides of the 4096-float inline limit: the payload rides in the
// fingerprint's all-gather, or travels in gloo's own collective after it.
class CommSizes : public ::testing::TestWithParam<std::tuple<int, int64_t>> {};

TEST_P(CommSizes, AllGatherConcatenatesInRankOrder) {
  auto [world, n] = GetParam();
  on_ranks(world, [&, world = world, n = n](Comm& comm) {
    at::Tensor got = comm.all_gather(rank_values(comm.rank(), n), 0, 1, {0});
    ASSERT_EQ(got.numel(), world * n);
    for (int r = 0; r < world; ++r) EXPECT_TRUE(at::equal(got.narrow(0, r * n, n), rank_values(r, n))) << "segment " << r;
    ASSERT_EQ(comm.issued().size(), 1u);
    EXPECT_EQ(comm.issued()[0].count, n);
  });
}

TEST_P(CommSizes, ReduceScatterAveragesThisRanksSegment) {
  auto [world, n] = GetParam();
  on_ranks(world, [&, world = world, n = n](Comm& comm) {
    at::Tensor got = comm.reduce_scatter_avg(rank_values(comm.rank(), world * n), 0, 1, {0});
    ASSERT_EQ(got.numel(), n);
    // The mean over ranks of (r + 1) * 1000 + i is (world + 1) * 500 + i: exact in fp32.
    at::Tensor want = at::arange(comm.rank() * n, (comm.rank() + 1) * n, at::kFloat).add_((world + 1) * 500.0);
    EXPECT_TRUE(at::allclose(got, want, 0, 1e-3)) << "rank " << comm.rank() << ": max diff "
                                                   << (got - want).abs().max().item<float>();
    ASSERT_EQ(comm.issued().size(), 1u);
    EXPECT_EQ(comm.issued()[0].count, n);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsAndSizes, CommSizes,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values<int64_t>(5, 3000)));

// Ranks that all-gather different sizes (one above the inline limit) meet a
// fingerprint mismatch on every rank, not gloo's process abort.
TEST(Comm, SizeMismatchIsReportedOnEveryRank) {
  std::vector<int> failures(2, 0);
  on_ranks(2, [&](Comm& comm) {
    try {
      comm.all_gather(at::ones({comm.rank() == 0 ? 10 : 5000}), 0, 1, {0});
    } catch (const CollectiveFailure& f) {
      EXPECT_EQ(f.status, Status::Mismatch);
      failures[comm.rank()] = 1;
    }
  });
  EXPECT_EQ(failures, std::vector<int>({1, 1}));
}

// An all-gather against a reduce-scatter: gloo would block both until its timeout, so every
// rank reports a hang (ProcessGroupGloo.cpp's algorithms never pair another op).
TEST(Comm, AnotherOpIsAHangOnEveryRank) {
  std::vector<int> failures(2, 0);
  on_ranks(2, [&](Comm& comm) {
    try {
      if (comm.rank() == 0) comm.all_gather(at::ones({8}), 0, 1, {0});
      else comm.reduce_scatter_avg(at::ones({16}), 0, 1, {0});
    } catch (const CollectiveFailure& f) {
      EXPECT_EQ(f.status, Status::Hang);
      failures[comm.rank()] = 1;
    }
  });
  EXPECT_EQ(failures, std::vector<int>({1, 1}));
}

// gloo pairs by bytes in each rank's wire dtype: n bf16 elements against 2n uint8 bytes, and n fp32
// gradients against 2n bf16 ones, complete cross-paired (torch _fsdp_collectives.py::
// foreach_all_gather packs a group of several dtypes as uint8), inline and native payloads alike;
// each rank gets back its own count, its own slot exact.
class CommWireBytes : public ::testing::TestWithParam<int64_t> {};

TEST_P(CommWireBytes, OneByteCountOfOtherDtypesCrossPairs) {
  const int64_t n = GetParam();
  on_ranks(2, [&](Comm& comm) {
    const bool bytes = comm.rank() == 1;
    const int64_t mine = bytes ? 2 * n : n;
    at::Tensor chunk = bytes ? at::arange(mine, at::kLong).remainder_(256).to(at::kByte) : rank_values(0, mine);
    at::Tensor got = comm.all_gather(chunk, 0, 1, {0}, -1, false, bytes ? DType::U8 : DType::BF16);
    ASSERT_EQ(got.numel(), 2 * mine);
    EXPECT_TRUE(at::equal(got.narrow(0, comm.rank() * mine, mine).to(chunk.scalar_type()), chunk));
    EXPECT_NE(comm.crossed(), "");
    comm.crossed().clear();
    at::Tensor red = comm.reduce_scatter_avg(rank_values(comm.rank(), 2 * mine), 0, 2, {0}, bytes ? DType::BF16 : DType::F32);
    EXPECT_EQ(red.numel(), mine);
    EXPECT_NE(comm.crossed(), "");
  });
}

INSTANTIATE_TEST_SUITE_P(InlineAndNative, CommWireBytes, ::testing::Values<int64_t>(13, 3000));

}  // namespace
