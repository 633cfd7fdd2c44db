#include "model/vocab/placement.hpp"

namespace fsdpsim {

const char* device_name(Device d) { return d == Device::Cpu ? "cpu" : "meta"; }
const char* dtype_name(DType t) { return t == DType::F32 ? "fp32" : t == DType::BF16 ? "bf16" : "uint8"; }

bool device_from_name(const std::string& s, Device* out) {
  if (s == "cpu") *out = Device::Cpu;
  else if (s == "meta") *out = Device::Meta;
  else return false;
  return true;
}

bool dtype_from_name(const std::string& s, DType* out) {
  if (s == "fp32") *out = DType::F32;
  else if (s == "bf16") *out = DType::BF16;
  else return false;
  return true;
}

}  // namespace fsdpsim
