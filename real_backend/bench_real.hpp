// Collective latency on thread ranks sharing one gloo device: a bare gloo
// all-gather and reduce-scatter (the floor) against the backend's fingerprinted ones.
#pragma once

namespace fsdpsim::real {

struct CollectiveLatency {
  double bare_us = 0;           // ProcessGroupGloo::_allgather_base of `numel` floats per rank
  double fingerprinted_us = 0;  // Comm::all_gather: the payload rides in the fingerprint's all-gather
  double bare_rs_us = 0;        // ProcessGroupGloo::_reduce_scatter_base (AVG), `numel` floats out
  double fingerprinted_rs_us = 0;  // Comm::reduce_scatter_avg: fingerprint all-gather, then the same
};

CollectiveLatency measure_collective_latency(int world, int numel, int iterations);

}  // namespace fsdpsim::real
