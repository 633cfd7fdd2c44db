// An observation with every field away from its default, filled by walking the
// observation's one field list (for_each_field, as every codec walks it): a
// field of a type FieldSampler has no value for fails to compile here, and one
// of a known type gets a value with no edit, so no fixture forgets a field.
// Its strings take every length 0-17 (each tail of a 64-bit word) across the
// field kinds. The codec tests' sample (properties/vocab/observation_test.cpp
// pins its trace hash, observation_json_test.cpp round-trips it through JSON,
// properties/real_backend/rank_report_test.cpp through the rank report).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim::test {

// One value per field type, none a default; a list holds two or three entries.
class FieldSampler {
 public:
  void fill(int& v) { v = ++count_; }
  void fill(int64_t& v) { v = ++count_; }
  void fill(bool& v) { v = true; }
  void fill(Status& v) { v = Status::KeyError; }
  void fill(std::string& v) { v = text(); }
  void fill(std::vector<Name>& v) { v = {text(), text(), text()}; }
  void fill(std::optional<std::vector<Name>>& v) { fill(v.emplace()); }
  void fill(std::vector<GroupObs>& v) { v = {{text(), ShardedState::Unsharded}, {text(), ShardedState::Sharded}}; }
  void fill(std::vector<ParamObs>& v) {
    v = {{text(), text(), true, 0, Device::Cpu, DType::F32}, {text(), text(), false, -1, Device::Meta, DType::BF16}};
  }
  void fill(std::vector<LayerObs>& v) {
    v = {{text(), text(), {text(), text()}, WeightClass::MissingDelta, WeightClass::Corrupt, 0, 0}};
  }
  void fill(std::vector<Collective>& v) {
    v = {{CollOp::ReduceScatter, text(), 212, DType::F32, {{text(), 200}, {text(), 12}}}};
  }
  void fill(std::vector<DeltaObs>& v) { v = {{text(), WeightClass::Corrupt}}; }
  void fill(std::vector<SavedObs>& v) { v = {{text(), 2, 4, DType::BF16}}; }
  void fill(std::vector<OwnerBytes>& v) { v = {{text(), 640}, {text(), 1680}}; }

 private:
  // "a", "ab", ... "abcdefghijklmnopq", then "": lengths 1-17 and 0 in turn, the
  // first (a scalar field's) never empty.
  std::string text() {
    const std::string s = std::string("abcdefghijklmnopq").substr(0, length_);
    length_ = (length_ + 1) % 18;
    return s;
  }
  int count_ = 0;
  size_t length_ = 1;
};

inline Observation every_field_observation() {
  Observation o;
  FieldSampler sample;
  for_each_field(o, [&](const FieldInfo&, auto& field) { sample.fill(field); });
  return o;
}

}  // namespace fsdpsim::test
