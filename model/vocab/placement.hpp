// Where a parameter lives and in what dtype: the two facts PEFT's device
// handling and accelerate's ram-efficient loading get wrong across ranks.
#pragma once
#include <cstdint>
#include <string>

namespace fsdpsim {

enum class Device : uint8_t { Cpu, Meta };  // meta: shape only, no storage
// U8: a collective's wire dtype only (FSDP2 packs a group of several dtypes as bytes); no
// parameter holds it and no .seq spells it.
enum class DType : uint8_t { F32, BF16, U8 };

const char* device_name(Device d);  // "cpu", "meta"
const char* dtype_name(DType t);    // "fp32", "bf16", "uint8"
bool device_from_name(const std::string& s, Device* out);
bool dtype_from_name(const std::string& s, DType* out);
inline int dtype_bytes(DType t) { return t == DType::F32 ? 4 : t == DType::BF16 ? 2 : 1; }

}  // namespace fsdpsim
