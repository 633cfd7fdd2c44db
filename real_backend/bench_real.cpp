#include "real_backend/bench_real.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "real_backend/comm.hpp"

namespace fsdpsim::real {

CollectiveLatency measure_collective_latency(int world, int numel, int iterations) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<double> bare(world), fp(world), bare_rs(world), fp_rs(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(10000));
      opts->devices.push_back(loopback_device());
      opts->threads = 1;
      auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("bare", store), r, world, opts);
      Comm comm(c10::make_intrusive<c10d::PrefixStore>("comm", store), r, world, loopback_device(), std::chrono::milliseconds(10000));
      comm.set_names({"g"}, {"p"});
      // The bare collective is the one Comm::all_gather issues: all-gather into one tensor.
      at::Tensor chunk = at::ones({numel});
      at::Tensor out = at::empty({world * numel});
      at::Tensor full = at::ones({world * numel}), seg = at::empty({numel});
      c10d::ReduceScatterOptions avg;
      avg.reduceOp = c10d::ReduceOp::AVG;
      for (int i = 0; i < 20; ++i) pg->_allgather_base(out, chunk)->wait();  // warm up
      // Bare and checked collectives alternate in blocks, and each figure is the median block:
      // a machine shared with other work slows whole stretches of time, not one kind of call.
      constexpr int kBlocks = 15;
      const int per_block = std::max(1, iterations / kBlocks);
      std::vector<double> b_ag, f_ag, b_rs, f_rs;
      auto timed = [&](std::vector<double>& into, auto&& call) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < per_block; ++i) call();
        into.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / per_block);
      };
      for (int k = 0; k < kBlocks; ++k) {
        timed(b_ag, [&] { pg->_allgather_base(out, chunk)->wait(); });  // the one Comm::all_gather issues
        timed(f_ag, [&] { comm.all_gather(chunk, 0, 1, {0}); });
        timed(b_rs, [&] { pg->_reduce_scatter_base(seg, full, avg)->wait(); });
        timed(f_rs, [&] { comm.reduce_scatter_avg(full, 0, 1, {0}); });
      }
      auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
      };
      bare[r] = median(b_ag);
      fp[r] = median(f_ag);
      bare_rs[r] = median(b_rs);
      fp_rs[r] = median(f_rs);
    });
  for (auto& t : threads) t.join();
  return {bare[0], fp[0], bare_rs[0], fp_rs[0]};
}

}  // namespace fsdpsim::real
