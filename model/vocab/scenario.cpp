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

const char* raf_name(Raf r) {
  switch (r) {
    case Raf::True: return "true";
    case Raf::False: return "false";
    case Raf::None: return "none";
  }
  return "?";
}

}  // namespace fsdpsim
