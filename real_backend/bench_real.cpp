#include "real_backend/bench_real.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

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
      for (int i = 0; i < 20; ++i) pg->_allgather_base(out, chunk)->wait();  // warm up
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) pg->_allgather_base(out, chunk)->wait();
      auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) comm.all_gather(chunk, 0, 1, {0});
      auto t2 = std::chrono::steady_clock::now();
      at::Tensor full = at::ones({world * numel}), seg = at::empty({numel});
      c10d::ReduceScatterOptions avg;
      avg.reduceOp = c10d::ReduceOp::AVG;
      for (int i = 0; i < iterations; ++i) pg->_reduce_scatter_base(seg, full, avg)->wait();
      auto t3 = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) comm.reduce_scatter_avg(full, 0, 1, {0});
      auto t4 = std::chrono::steady_clock::now();
      auto per_op = [&](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count() / iterations; };
      bare[r] = per_op(t0, t1);
      fp[r] = per_op(t1, t2);
      bare_rs[r] = per_op(t2, t3);
      fp_rs[r] = per_op(t3, t4);
    });
  for (auto& t : threads) t.join();
  return {bare[0], fp[0], bare_rs[0], fp_rs[0]};
}

}  // namespace fsdpsim::real
