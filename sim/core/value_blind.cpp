#include "sim/core/value_blind.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "model/vocab/cross_paired.hpp"

namespace fsdpsim {
namespace {

// Once the reading is the model's, the other readings are settled: the spec (S5) then
// judges the ranks by that reading alone, as it judges the model's.
void reconcile_class(WeightClass model, uint8_t* alt, WeightClass* value) {
  if (*value != model && ((*alt >> static_cast<int>(model)) & 1)) *value = model;
  if (*value == model) *alt = 0;
}

bool contains(const std::vector<Name>& v, Name x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The model's list of parameters apart (reload_diff, replica_diff), if it adds to the values'
// only parameters the values call coincident (equal by value though what was done moved them:
// taken in from rank 0, stepped since a save, or stepped without a reduction on every rank).
void take_model_list(const std::vector<Name>& model, const std::vector<Name>& coincident, std::vector<Name>* value) {
  if (coincident.empty() || model == *value) return;
  for (const auto& n : *value)
    if (!contains(model, n)) return;
  for (const auto& n : model)
    if (!contains(*value, n) && !contains(coincident, n)) return;
  *value = model;
}

// Takes the model's class for an unjudged one, noting it.
void settle(const Observation& v, const std::string& what, WeightClass model, WeightClass* value, std::vector<std::string>* notes) {
  // Both unjudged (a 4-bit layer, whose requantized codes neither reads): the same reading, no note.
  if (*value != WeightClass::Unjudged || model == WeightClass::Unjudged) return;
  notes->push_back("step " + std::to_string(v.step) + " rank " + std::to_string(v.rank) + " (" + v.op + "): " + what +
                   " unjudged (model: " + weight_class_name(model) + ")");
  *value = model;
}

}  // namespace

std::vector<std::string> settle_unjudged(const std::vector<Observation>& model, std::vector<Observation>* values) {
  std::map<std::pair<int, int>, const Observation*> by_key;
  for (const auto& o : model) by_key[{o.step, o.rank}] = &o;
  std::vector<std::string> notes;
  for (auto& v : *values) {
    auto it = by_key.find({v.step, v.rank});
    if (it == by_key.end()) continue;
    const Observation& m = *it->second;
    // A cross-pairing gloo completed whose delivered bytes the upstream pool could not match to the
    // ranks' own (pool.py's settle_probe): "unjudged: <why>: <the model's words>".
    const std::string unjudged = "unjudged: ";
    if (is_cross_paired(m) && v.status == m.status && v.message.rfind(unjudged, 0) == 0 &&
        v.message.size() > m.message.size() && v.message.compare(v.message.size() - m.message.size(), std::string::npos, m.message) == 0) {
      notes.push_back("step " + std::to_string(v.step) + " rank " + std::to_string(v.rank) + " (" + v.op +
                      "): cross-pairing unjudged (" + v.message.substr(0, v.message.size() - m.message.size()) + "...)");
      v.message = m.message;
    }
    for (size_t i = 0; i < v.layers.size() && i < m.layers.size(); ++i) {
      if (v.layers[i].name != m.layers[i].name) continue;
      const std::string layer = v.layers[i].name.str();
      settle(v, layer + " stored", m.layers[i].stored, &v.layers[i].stored, &notes);
      settle(v, layer + " registered", m.layers[i].registered, &v.layers[i].registered, &notes);
    }
    for (size_t i = 0; i < v.deltas.size() && i < m.deltas.size(); ++i)
      if (v.deltas[i].adapter == m.deltas[i].adapter)
        settle(v, "delta of " + v.deltas[i].adapter.str(), m.deltas[i].value, &v.deltas[i].value, &notes);
  }
  return notes;
}

std::vector<Observation> reconcile_value_blind(const std::vector<Observation>& model, std::vector<Observation> values) {
  std::map<std::pair<int, int>, const Observation*> by_key;
  for (const auto& o : model) by_key[{o.step, o.rank}] = &o;
  for (auto& v : values) {
    auto it = by_key.find({v.step, v.rank});
    if (it == by_key.end()) continue;
    const Observation& m = *it->second;
    for (size_t i = 0; i < v.layers.size() && i < m.layers.size(); ++i) {
      if (v.layers[i].name != m.layers[i].name) continue;
      reconcile_class(m.layers[i].stored, &v.layers[i].stored_alt, &v.layers[i].stored);
      reconcile_class(m.layers[i].registered, &v.layers[i].registered_alt, &v.layers[i].registered);
    }
    take_model_list(m.reload_diff, v.reload_coincident, &v.reload_diff);
    take_model_list(m.replica_diff, v.replica_coincident, &v.replica_diff);
  }
  return values;
}

}  // namespace fsdpsim
