#include "model/vocab/scenario.hpp"

namespace fsdpsim {

int Scenario::layer_index(const std::string& name) const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].name == name) return static_cast<int>(i);
  return -1;
}

int Scenario::adapter_index(const std::string& name) const {
  for (size_t i = 0; i < adapters.size(); ++i)
    if (adapters[i].name == name) return static_cast<int>(i);
  return -1;
}

std::string lora_a_name(const std::string& layer, const std::string& adapter) { return layer + ".lora_A." + adapter; }
std::string lora_b_name(const std::string& layer, const std::string& adapter) { return layer + ".lora_B." + adapter; }

int Scenario::adapter_of_param(const std::string& param) const {
  for (const auto& l : layers)
    for (size_t a = 0; a < adapters.size(); ++a)
      for (const auto& t : adapters[a].targets)
        if (t == l.name && (param == lora_a_name(l.name, adapters[a].name) || param == lora_b_name(l.name, adapters[a].name)))
          return static_cast<int>(a);
  return -1;
}

std::string Scenario::owner_of_param(const std::string& param) const {
  int a = adapter_of_param(param);
  return a < 0 ? std::string("base") : adapters[a].name;
}

const char* raf_name(Raf r) {
  switch (r) {
    case Raf::True: return "true";
    case Raf::False: return "false";
    case Raf::None: return "none";
  }
  return "?";
}

}  // namespace fsdpsim
