// The DTensor port (torch/distributed/tensor: DTensor.redistribute / full_tensor) one rank's
// transitions issue their DTensor collectives through: the all-gathers get_delta_weight's
// matmul or einsum makes of A or B, and the full state dict's gathers. It holds no state of its
// own: it reaches this rank's parameters (FsdpParam), the groups (which object is registered),
// the op's CollectiveLog and the provenance, and nothing else.
//
// A merge or unmerge while the group is SHARDED computes its delta through such an all-gather:
// the delta is made of the rows every rank contributed, which one rank cannot know alone. So
// all_gather records it with into = kIntoShard, the adapter and the sign, and leaves the shard
// untouched. Once the simulator has matched that all-gather across the ranks, settle_deltas
// (dtensor_settle.cpp) works out the version of the A (or B) the ranks actually gathered (a mix
// id when they differ or a peer packed another tensor: version_token.hpp) and settle adds the
// delta into this rank's W shard. There is no other path: the unit tests run their ops through
// a simulator too (properties/test_util.hpp::OneRank), and on a 1-rank mesh there is no
// all-gather at all (the delta applies now). The group all-gathers' mixes are settled here too
// (mark_mixed, concatenated_u, set_gathered).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/machine/collective_log.hpp"
#include "model/machine/fsdp_param.hpp"
#include "model/machine/fsdp_param_group.hpp"
#include "model/machine/topology.hpp"
#include "model/machine/version_token.hpp"

namespace fsdpsim {

class Provenance;
class DTensor;
struct MatchedGather;
// What a matched DTensor all-gather left on one rank (DTensor::settle_deltas).
struct GatherSettled {
  bool corrupt_delta = false;  // a delta_weight read whose slots held another tensor: no adapter's delta
  bool settled = false;        // a shard merge's delta landed in W's shard
};

// How DTensor runs ParamWrapper.get_delta_weight's einsum on a Shard(0) B and A
// (param_wrapper.cpp says which strategy each shape takes).
enum class ExpertsEinsum : uint8_t { kShardOut, kShardExperts, kReplicate, kViewRaises };
ExpertsEinsum experts_einsum(const Topology& topo, int layer, int adapter);

class DTensor {
 public:
  DTensor(const Topology& topo, int rank, std::vector<FsdpParam>& params, const std::vector<FsdpParamGroup>& groups,
          CollectiveLog& log, Provenance* prov)
      : topo_(&topo), rank_(rank), params_(&params), groups_(&groups), log_(&log), prov_(prov) {}

  // torch 2.13 distributed/tensor/_redistribute.py::redistribute_local_tensor, Shard -> Replicate:
  // one all-gather of `param` (count: its padded shard unless given; wire: the dtype it sends).
  // A merge's (sign != 0, into kIntoShard) delta settles once the gather pairs.
  void all_gather(int param, CollRecord::Into into, int layer, int adapter, int sign = 0, int64_t count = -1,
                  DType wire = DType::F32);
  // _redistribute.py's Partial -> Shard (a reduce-scatter) or Partial -> Replicate (an all-reduce)
  // of a tensor derived from `param` (the name it travels under), `count` elements sent; values
  // are not modelled (a DoRA merge's delta and weight norm, whose result is lost on the shard).
  void reduce(CollOp op, int param, int64_t count);
  // A merge or unmerge on a shard, once its all-gather is matched: the delta is B's rows times
  // the A every rank contributed, or (an experts einsum sharded on the experts) this rank's A
  // times the gathered B. `other_version` (not kNoRows): the other factor's version to use
  // instead of this rank's: B's when A was gathered (full_b_delta), A's when B was.
  void settle(const CollRecord& c, uint32_t version, uint32_t other_version = kNoRows);

  // The delta id of adapter's B @ A at these versions (version::delta_id, with its init). A DoRA
  // merge rescales W + B @ A by magnitude / norm (peft lora/variants.py::DoraLinearVariant.merge_unsafe),
  // so a zero B merges nothing only while the magnitude (at ver_m) is still its init: a rank whose
  // optimizer holds the magnitude but not B (Optimizer::map_by_data_ptr) moves W with B zero.
  DeltaId delta_id(int adapter, uint32_t ver_a, uint32_t ver_b, uint32_t ver_m = 0) const {
    const bool zero_init = topo_->adapters[adapter].init == LoraInit::Zero && version::magnitude_at_init(ver_m);
    return version::delta_id(zero_init, ver_a, ver_b);
  }
  // This rank's DoRA magnitude version on the layer (0: no DoRA, or a magnitude never moved).
  uint32_t magnitude_version(int layer, int adapter) const {
    const int m = topo_->layers[layer].M[adapter];
    return m >= 0 ? (*params_)[m].ver_s : 0;
  }
  // The FSDP group managing the registered object now (-1: none; a re-added adapter's new module).
  int group_of(int param) const { return managing_group(*topo_, *params_, param); }
  bool is_registered_u(int param) const { return u_registered(*topo_, *params_, *groups_, param); }
  // A rank of an FSDP-managed parameter past its last row holds padding only (ParamInfo::rows_on).
  bool holds_rows(int param, int rank) const { return group_of(param) < 0 || topo_->params[param].rows_on(rank); }
  uint32_t shard_version(int param) const { return (*params_)[param].ver_s; }
  // Which parameter, and what this rank's shard of it holds, as a digest.
  uint64_t digest_of(int param) const { return param_digest(*topo_, *params_, param, rank_); }
  const CollectiveLog& log() const { return *log_; }
  // What DTensor raises: an in-place add (sign > 0) or subtract whose placement no strategy
  // keeps, and an op given a plain tensor and a DTensor (`aten_op`: the op's name).
  static std::string inplace_placement_error(int sign);
  static std::string mixed_tensor_error(const std::string& aten_op);
  int rank() const { return rank_; }

  // How get_delta_weight's gathers combine the ranks' rows (param_wrapper.cpp holds the einsum
  // plans they follow), asked by the settlement:
  // B still holds PEFT's zero init (false for no layer: save_adapters' full state dict).
  bool b_is_zero(int layer, int adapter) const;
  // A merge off shards whose delta reaches W's Shard(0) rows with every rank's rows of B, so the
  // delta is the full B's, not this rank's B rows': an experts (E > 1) delta sharded on out, or
  // built from the full A and B, redistributed over the experts; a Conv1D's transposed delta,
  // Shard(1) over B's rows, redistributed to W's Shard(0) over its input rows (lora_layer.cpp).
  bool full_b_delta(int layer, int adapter) const;
  // A merge off shards whose einsum shards on the experts gathers B, not A.
  bool experts_gather_b(int layer, int adapter) const;
  // An experts (E > 1) delta built from the full A and B (delta_weight_gather=on) and cut to this
  // rank's chunk of W's experts: which peers' slots of an all-gather of `param` reach that chunk.
  // A's rows e*r..(e+1)*r feed expert e only; B's every out row feeds every expert.
  bool delta_reads_slot(int layer, int adapter, int param, int peer) const;
  // That chunk is empty: this rank holds no expert of W's shard.
  bool delta_chunk_empty(int layer, int adapter) const;
  // A delta_weight read that keeps B's local rows (a Linear with as many out rows as ranks, an
  // experts einsum sharded on out): the delta is this rank's rows of B times the gathered A.
  bool delta_keeps_b_rows(int layer, int adapter) const;
  // delta_weight of a Linear with fewer out rows than ranks and r >= world: `param` (B) is
  // gathered to Shard(1) and the delta is Partial, each rank's local B[:, its columns] @ its A rows.
  bool delta_is_partial(int layer, int adapter, int param) const;
  // Rank `peer` holds some of those columns (r split in chunks of ceil(r / world)).
  bool partial_columns(int adapter, int peer) const;

  // A matched group all-gather combined different values of its i-th parameter from different
  // ranks: what this rank's U holds is a mix.
  void mark_mixed(const CollRecord& c, int i);
  // its parameter holds values no rank holds; `sent_bytes`: what the root sent (the rest is torch.empty's)
  void mark_part_filled(const CollRecord& broadcast, int64_t sent_bytes);
  // The same when each rank's rows are still what it holds and fit together: LoRA rows of
  // different versions are one tensor (version `ver`, version::mix_version); a base weight's
  // rows, each W0 + B_r @ A for one A, are W0 + (the gathered B) @ A (content `w`). False where
  // no such value exists: the gathered value is a mix.
  static bool concatenated_u(const std::vector<const DTensor*>& ranks, const std::vector<const CollRecord*>& colls, int i,
                             uint32_t* ver, WeightContent* w);
  void set_gathered(const CollRecord& c, int i, uint32_t ver, const WeightContent& w);
  // One DTensor all-gather matched across the ranks (rank order): works out slot by slot what
  // each rank got, settles the shard merges (settle) and says which delta_weight reads are no
  // adapter's (dtensor_settle.cpp). `gathered_a`, per rank: the version of the A it gathered
  // last (a delta built from the full A and B reads it when its B's gather pairs).
  static void settle_deltas(std::vector<MatchedGather>& ranks, std::vector<uint32_t>& gathered_a,
                            std::vector<GatherSettled>& out);

 private:
  void note_deferred(const CollRecord& c);  // provenance: the shard merge applied once its gather pairs
  // A LoRA parameter's U took gathered values (set_gathered, mark_mixed) after the op already
  // edited the layer's U weight with a delta made of the local ones: make that edit the gathered delta's.
  void rebase_u_delta(int param, uint32_t local_ver);
  // U of a Linear `weight` := `gathered` plus the op's edits of U (FsdpParam::u_edit), each made of
  // U's A and B as they are now.
  void replay_u_edits(int weight, const WeightContent& gathered);

  const Topology* topo_;
  int rank_;
  std::vector<FsdpParam>* params_;
  const std::vector<FsdpParamGroup>* groups_;
  CollectiveLog* log_;
  Provenance* prov_;
};

// One rank's side of a matched DTensor all-gather: its port and the collective it posted.
struct MatchedGather {
  DTensor dt;
  const CollRecord* coll;
};

}  // namespace fsdpsim
