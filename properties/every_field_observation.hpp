// An observation with every field away from its default, its strings of every
// length 0-17 (each tail of a 64-bit word) across every field kind: the codec
// tests' sample (properties/vocab/observation_test.cpp pins its trace hash,
// properties/real_backend/rank_report_test.cpp round-trips it).
#pragma once
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim::test {

inline Observation every_field_observation() {
  Observation o;
  o.step = 3;
  o.rank = 1;
  o.op = "set_adapter other";
  o.status = Status::KeyError;
  o.message = "0";
  o.grads = std::vector<Name>{"", "a", "ab"};
  o.index = 0;
  o.active = {"abc", "abcd", "abcde"};
  o.disabled = true;
  o.opt_missing = 1;
  o.opt_total = 4;
  o.opt_unregistered = {"abcdef", "abcdefg", "abcdefgh"};
  o.groups = {{"root", ShardedState::Unsharded}, {"lin1", ShardedState::Sharded}};
  o.params = {{"lin0.lora_A.ab", "root", true, 0, Device::Cpu, DType::F32},
              {"lin0.lora_B.abc", "", false, -1, Device::Meta, DType::BF16}};
  o.layers = {{"lin0", "root", {"abcdefghi", "abcdefghij"}, WeightClass::MissingDelta, WeightClass::Corrupt, 0, 0}};
  o.collectives = {{CollOp::ReduceScatter, "abcdefghijk", 212, DType::F32, {{"abcdefghijkl", 200}, {"abcdefghijklm", 12}}}};
  o.deltas = {{"abcdefghijklmn", WeightClass::Corrupt}};
  o.saved = {{"abcdefghijklmno", 2, 4, DType::BF16}};
  o.reload_diff = {"abcdefghijklmnop"};
  o.reload_coincident = {"abcdefghijklmnopq"};
  o.replica_diff = {"lin1.lora_A.default"};
  o.sharded_bytes = {{"default", 640}, {"base", 1680}};
  o.peak_unsharded = {{"other", 64}};
  return o;
}

}  // namespace fsdpsim::test
