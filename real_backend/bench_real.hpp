// Collective latency on thread ranks sharing one gloo device: a bare gloo
// all-gather (the floor) against the backend's fingerprinted all-gather.
#pragma once

namespace fsdpsim::real {

struct CollectiveLatency {
  double bare_us = 0;          // ProcessGroupGloo::allgather of `numel` floats
  double fingerprinted_us = 0;  // Comm::all_gather: fingerprint exchange + the same all-gather
};

CollectiveLatency measure_collective_latency(int world, int numel, int iterations);

}  // namespace fsdpsim::real
