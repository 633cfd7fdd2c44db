#include "model/vocab/scenario.hpp"

#include <algorithm>

#include "model/vocab/enum_names.hpp"

namespace fsdpsim {

// tuners_utils.py::BaseTunerLayer._move_adapter_to_device_of_base_layer skips a container holding a
// meta parameter; dora.py::DoraLinearLayer.update_layer then moves the meta weight to A's device.
std::string Scenario::dora_meets_meta_base(const AdapterDecl& a) const {
  if (a.deferred || loading != Loading::RamEfficient || world < 2) return "";
  for (const auto& earlier : adapters) {
    if (&earlier == &a) break;
    if (earlier.deferred) continue;
    for (const auto& t : a.targets)
      if (std::find(earlier.targets.begin(), earlier.targets.end(), t) != earlier.targets.end()) return t;
  }
  return "";
}

int Scenario::layer_index(const std::string& name) const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<int> Scenario::packing_order(const ShardDecl& d) const {
  std::vector<int> out;
  for (const auto& m : d.modules)
    if (layer_index(m) >= 0) out.push_back(layer_index(m));  // a lowered model call's first name may be its path (model_lowering.hpp)
  return out;
}

bool Scenario::checkpointed(const std::string& layer) const {
  for (const auto& c : checkpoint)
    if (c == layer) return true;
  return false;
}

bool Scenario::saved_module(const std::string& layer) const {
  for (const auto& a : adapters)
    if (a.saves(layer)) return true;
  return false;
}

int Scenario::adapter_index(const std::string& name) const {
  for (size_t i = 0; i < adapters.size(); ++i)
    if (adapters[i].name == name) return static_cast<int>(i);
  return -1;
}

std::string lora_a_name(const std::string& layer, const std::string& adapter) { return layer + ".lora_A." + adapter; }
std::string lora_b_name(const std::string& layer, const std::string& adapter) { return layer + ".lora_B." + adapter; }
std::string original_module_name(const std::string& layer, const std::string& what) {
  return layer + ".original_module." + what;
}
std::string saved_copy_name(const std::string& layer, const std::string& adapter, const std::string& what) {
  return layer + ".modules_to_save." + adapter + "." + what;
}

int Scenario::adapter_of_param(const std::string& param) const {
  // Matches the whole name against the declared layer and adapter names
  // (`<layer>.lora_A.<adapter>` or `.lora_B.`), piece by piece without building strings.
  auto piece = [&](size_t at, const std::string& what) { return param.compare(at, what.size(), what) == 0; };
  static const std::string kA = ".lora_A.", kB = ".lora_B.", kSave = ".modules_to_save.";
  for (const auto& l : layers) {
    // `<layer>.modules_to_save.<adapter>.weight|bias`: that adapter's copy of a saved module.
    if (piece(0, l.name) && piece(l.name.size(), kSave)) {
      const size_t at = l.name.size() + kSave.size();
      for (size_t a = 0; a < adapters.size(); ++a) {
        const size_t dot = at + adapters[a].name.size();
        if (!adapters[a].saves(l.name) || !piece(at, adapters[a].name) || !piece(dot, ".")) continue;
        if (param.compare(dot + 1, std::string::npos, "weight") == 0 || param.compare(dot + 1, std::string::npos, "bias") == 0)
          return static_cast<int>(a);
      }
      continue;
    }
    if (!piece(0, l.name) || !(piece(l.name.size(), kA) || piece(l.name.size(), kB))) continue;
    const size_t at = l.name.size() + kA.size();
    for (size_t a = 0; a < adapters.size(); ++a) {
      if (param.size() != at + adapters[a].name.size() || !piece(at, adapters[a].name)) continue;
      for (const auto& t : adapters[a].targets)
        if (t == l.name) return static_cast<int>(a);
    }
  }
  return -1;
}

std::string Scenario::owner_of_param(const std::string& param) const {
  int a = adapter_of_param(param);
  return a < 0 ? std::string("base") : adapters[a].name;
}

const char* raf_name(Raf r) { return enum_names<Raf>("true", "false", "none")[r]; }

}  // namespace fsdpsim
