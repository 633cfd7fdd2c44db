// The collectives one op issued on this rank, with what the simulator needs to
// match and judge them across ranks: per all-gathered parameter a digest of the
// contributed shard and its version, per collective the parameters it packs.
#pragma once
#include <cstdint>
#include <vector>

#include "model/vocab/observation.hpp"
#include "model/vocab/placement.hpp"

namespace fsdpsim {

// A collective this rank issued; the simulator matches them across ranks.
struct CollRecord {
  CollOp op;
  int group;  // -1 for a broadcast (it names one parameter: members())
  int64_t count;
  // All-gathers: what the gathered value feeds (U of the group, a merge into
  // the layer's shard, or nothing kept) and where digests() holds a digest of
  // each contributed parameter. Ranks contributing different values make the
  // result a mix no single rank holds (see DTensor::mark_mixed).
  enum Into : uint8_t { kIntoU, kIntoShard, kNowhere } into = kNowhere;
  int target = -1;        // the group (kIntoU) or the layer (kIntoShard)
  int digest_begin = -1;  // index into CollectiveLog::digests()
  int adapter = -1;       // kIntoShard: whose delta the gathered A makes
  int8_t sign = 0;        // kIntoShard: +1 merge, -1 unmerge (applied once the gather is matched)
  // The parameters packed into it (indices into members()): ranks packing
  // different parameters into same-sized buffers mix unrelated values.
  int member_begin = 0, member_count = 0;
  // The dtype on the wire: count * dtype_bytes(dtype) is what gloo pairs by. A broadcast's is the
  // dtype this rank sends or receives in (observed); an all-gather's or a reduce-scatter's is for
  // pairing only (not observed): an FSDP group's shards' dtype, uint8 when they differ (count is
  // then bytes), a reduce-scatter's the gradients' dtype, a DTensor gather's its tensor's.
  DType dtype = DType::F32;
  // DTensor's own reduce-scatter or all-reduce (DTensor::reduce): its one part is what it sends.
  bool dtensor_reduce = false;
};

class CollectiveLog {
 public:
  void clear() {
    records_.clear();
    digests_.clear();
    members_.clear();
    gathered_versions_.clear();
  }
  std::vector<CollRecord>& records() { return records_; }
  const std::vector<CollRecord>& records() const { return records_; }
  const std::vector<uint64_t>& digests() const { return digests_; }
  const std::vector<int>& members() const { return members_; }
  const std::vector<uint32_t>& gathered_versions() const { return gathered_versions_; }
  int member(const CollRecord& c, int i) const { return members_[c.member_begin + i]; }
  uint64_t digest(const CollRecord& c, int i) const { return digests_[c.digest_begin + i]; }

  // Where the next collective's members and contributions start.
  int next_member() const { return static_cast<int>(members_.size()); }
  int next_contribution() const { return static_cast<int>(digests_.size()); }
  void issue(const CollRecord& c) { records_.push_back(c); }
  void pack(int param) { members_.push_back(param); }
  void unpack_last() { members_.pop_back(); }
  // One all-gathered parameter's shard: its digest, and its version (kNoRows for padding only).
  void contribute(uint64_t digest, uint32_t version) {
    digests_.push_back(digest);
    gathered_versions_.push_back(version);
  }

 private:
  std::vector<CollRecord> records_;
  std::vector<uint64_t> digests_;            // per all-gathered parameter
  std::vector<int> members_;                 // per collective's parameters
  std::vector<uint32_t> gathered_versions_;  // per all-gathered parameter
};

}  // namespace fsdpsim
