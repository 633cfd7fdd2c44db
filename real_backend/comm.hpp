// Collectives over one gloo process group, each preceded by a fingerprint
// exchange so that a size mismatch (which makes gloo abort the process) or a
// rank that never joins (which makes gloo block) is reported instead. Peers that
// issue the same op, size and dtype of another group or other parameters go
// ahead, as gloo lets them: the fingerprints only tell that it was cross-paired.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

// Only comm.cpp, launcher.cpp and bench_real.cpp include ProcessGroupGloo.hpp
// (and with it gloo's headers): every other real_backend file sees a device
// pointer and a c10d::Backend.
namespace gloo::transport {
class Device;
}

#include "model/vocab/observation.hpp"
#include "real_backend/rank_progress.hpp"

namespace fsdpsim::real {

// One logical collective as issued: what the model also reports.
// A broadcast's group is the index of the parameter it carries.
struct IssuedCollective {
  CollOp op;
  int group;
  int64_t count;
  DType dtype = DType::F32;
  std::vector<int> members;  // the parameters packed, in packing order
  bool dtensor_reduce = false;  // DTensor's reduce-scatter or all-reduce: its one part is what it sends
};

// A hang (a peer finished without issuing the partner collective) or a
// mismatch (peers issued different collectives), with every rank's pending
// collective spelled as the model spells it.
class CollectiveFailure : public std::runtime_error {
 public:
  CollectiveFailure(Status s, const std::string& desc) : std::runtime_error(desc), status(s) {}
  Status status;
};

// The process group died: a peer crashed or timed out. The harness's problem.
class CommBroken : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Comm {
 public:
  Comm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
       const std::shared_ptr<::gloo::transport::Device>& device, std::chrono::milliseconds timeout);
  int rank() const { return rank_; }
  int world() const { return world_; }
  // `packing`: each group's parameters in the order it packs them (a failure names them so).
  // `wire_dtypes`: a mixed_precision policy is on, so every collective is observed with its wire
  // dtype (the policy's param_dtype / reduce_dtype, or uint8); else only a broadcast's is.
  void set_names(std::vector<std::string> groups, std::vector<std::string> params, std::vector<std::vector<int>> packing = {},
                 bool wire_dtypes = false) {
    group_names_ = std::move(groups);
    param_names_ = std::move(params);
    packing_ = std::move(packing);
    wire_dtypes_ = wire_dtypes;
  }

  // All-gathers this rank's flat chunk of `members` (parameter indices); returns
  // world chunks concatenated in rank order.
  // recorded_count >= 0: the collective is recorded with that count (what torch's
  // redistribute moves, named after `members`) while `chunk` is what travels here.
  // dtensor: DTensor's own redistribution (a functional collective on the mesh's group):
  // peers pair it by size and dtype only, whatever parameter each of them packs.
  // `wire`: the dtype on the wire the fingerprint names (gloo pairs by count * its bytes; an FSDP
  // group of several dtypes gathers uint8); what is recorded, and what travels, stays fp32.
  at::Tensor all_gather(const at::Tensor& chunk, int group, int step, const std::vector<int>& members,
                        int64_t recorded_count = -1, bool dtensor = false, DType wire = DType::F32);
  // Reduce-scatter with AVG over a flat buffer of world equal segments: gloo's
  // own reduce_scatter_tensor (ReduceOp::AVG), as FSDP2's foreach_reduce issues
  // it for fp32 gradients (_fsdp_collectives.py::_get_gradient_divide_factors). `wire`: the
  // gradients' dtype, which the fingerprint names (what travels stays fp32).
  at::Tensor reduce_scatter_avg(const at::Tensor& flat, int group, int step, const std::vector<int>& members,
                                DType wire = DType::F32);
  // Broadcast from rank 0 of one parameter's full value (accelerate's
  // fsdp2_load_full_state_dict): the fingerprint carries the parameter and the
  // dtype of this rank's copy. Equal bytes: the payload travels as fp32 (it rides in the
  // fingerprint's float buffer); rank 0's `full` comes back on every rank. A root sending
  // fewer bytes than some rank posted: broadcast_part_filled; more: a mismatch.
  at::Tensor broadcast(const at::Tensor& full, int param, DType dtype, int step);
  // DTensor's reduction of a Partial tensor (a reduce-scatter or an all-reduce, SUM), named after
  // `member`, recorded with the elements this rank sends (`flat`: a multiple of the world for a
  // reduce-scatter).
  at::Tensor dtensor_reduce(CollOp op, const at::Tensor& flat, int group, int step, int member);
  // Each rank's own bytes on gloo, the receivers part-filled; this rank's values in fp32.
  at::Tensor broadcast_part_filled(const at::Tensor& full, DType dtype);
  // After a part-filled broadcast on a receiver: the chunk distribute_tensor's scatter from rank 0
  // leaves in this rank's dtype (chunk_numel elements, as fp32); undefined where the last broadcast
  // filled this rank's buffer whole.
  at::Tensor part_filled_chunk(int64_t chunk_numel, DType dtype) const;
  // A file rank 0 writes and every rank reads (the adapter checkpoint), kept in the
  // rank group's store under this sequence's name: no collective, so a rank out of
  // step meets no peer. begin_sequence names the next sequence (every rank runs each).
  void begin_sequence() {
    ++sequence_;
    if (probe_ && probe_->progress) probe_->progress->begin_sequence(rank_, sequence_);
  }
  void write_rank0_file(const at::Tensor& flat, int save);  // save: the rank's save_adapters count
  // Rank 0's file of this sequence's save number `save`, as floats, waiting for it while
  // rank 0 may still write it; undefined when rank 0 wrote none and never will (it waits in a
  // collective this rank has not entered, or is past this sequence). Decided from rank 0's
  // progress slot, never by a clock; without one (torchrun) it waits at most 10 s.
  at::Tensor read_rank0_file(int save);
  std::string file_key(int save) const;
  // Tells the peers this rank has no more collectives; throws CollectiveFailure
  // when one of them is still waiting in one.
  void finish(int step);

  std::vector<IssuedCollective>& issued() { return issued_; }
  // The first collective since the caller cleared it that gloo paired with peers' of another group
  // or other parameters (model/vocab/cross_paired.hpp's text; empty when none was).
  std::string& crossed() { return crossed_; }
  // Where this rank reports the collective it waits in (process ranks; may be null).
  void set_probe(RankProbe* probe) { probe_ = probe; }

 private:
  at::Tensor announce(int op, int group, int64_t count, int step, const std::vector<int>& members, const at::Tensor& payload,
                      DType dtype = DType::F32, bool dtensor = false);
  std::vector<PendingCollective> heads(const at::Tensor& prints) const;
  // Runs one gloo collective to completion; any error kills the group.
  template <class Issue>
  void run(Issue&& issue);
  c10::intrusive_ptr<c10d::Backend> pg_;
  c10::intrusive_ptr<c10d::Store> store_;
  int64_t sequence_ = 0;
  std::chrono::milliseconds timeout_;
  int rank_, world_;
  std::vector<std::string> group_names_, param_names_;
  std::vector<std::vector<int>> packing_;
  bool wire_dtypes_ = false;
  // What an observation names as a collective's dtype (see set_names).
  DType observed(CollOp op, DType wire) const { return op == CollOp::Broadcast || wire_dtypes_ ? wire : DType::F32; }
  std::vector<IssuedCollective> issued_;
  std::string crossed_;
  int64_t max_count_ = 0;  // the largest count the ranks announced for the current collective
  int64_t root_bytes_ = -1;  // a broadcast whose root sends fewer bytes than a rank posted: the root's bytes, else -1
  at::Tensor part_filled_;   // the last broadcast's buffer as bytes where it was part-filled on this rank
  int64_t part_filled_root_bytes_ = 0;
  RankProbe* probe_ = nullptr;
};

// One gloo device shared by every thread rank of a process (gloo busy-polls).
std::shared_ptr<::gloo::transport::Device> loopback_device();

// `world` thread ranks of this process joined in one group over an in-memory
// store. Throws std::runtime_error("rank R could not join the process group: ...").
std::vector<std::unique_ptr<Comm>> join_thread_ranks(int world, std::chrono::milliseconds timeout);

}  // namespace fsdpsim::real
