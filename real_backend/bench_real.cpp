#include "real_backend/bench_real.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <chrono>
#include <thread>

#include "real_backend/comm.hpp"

namespace fsdpsim::real {

CollectiveLatency measure_collective_latency(int world, int numel, int iterations) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<double> bare(world), fp(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(10000));
      opts->devices.push_back(loopback_device());
      opts->threads = 1;
      auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("bare", store), r, world, opts);
      Comm comm(c10::make_intrusive<c10d::PrefixStore>("comm", store), r, world, loopback_device(), std::chrono::milliseconds(10000));
      comm.set_names({"g"}, {"p"});
      at::Tensor chunk = at::ones({numel});
      std::vector<at::Tensor> in{chunk};
      std::vector<std::vector<at::Tensor>> out(1);
      for (int k = 0; k < world; ++k) out[0].push_back(at::empty({numel}));
      for (int i = 0; i < 20; ++i) pg->allgather(out, in)->wait();  // warm up
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) pg->allgather(out, in)->wait();
      auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) comm.all_gather(chunk, 0, 1, {0});
      auto t2 = std::chrono::steady_clock::now();
      bare[r] = std::chrono::duration<double, std::micro>(t1 - t0).count() / iterations;
      fp[r] = std::chrono::duration<double, std::micro>(t2 - t1).count() / iterations;
    });
  for (auto& t : threads) t.join();
  return {bare[0], fp[0]};
}

}  // namespace fsdpsim::real
