// Adapters in an order of their own, not declaration order: the order of
// PeftModel.peft_config (a dict: adapters in the order they entered it) and of
// a saved adapter file (the order save_adapters wrote them in), which decides
// which adapters load_adapters reaches before it raises. Four bits an entry
// (index + 1, 0 ends the list) in one word, so the explorer's state key reads it
// as one value.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/adapter_set.hpp"
#include "model/vocab/limits.hpp"

namespace fsdpsim {

class AdapterOrder {
 public:
  static_assert(kMaxAdapters * 4 <= 32, "an adapter index takes four bits of one word");

  constexpr uint32_t bits() const { return bits_; }
  int size() const {
    int n = 0;
    while (n < kMaxAdapters && at(n) >= 0) ++n;
    return n;
  }
  // The adapter in position i (-1: past the end).
  int at(int i) const { return static_cast<int>((bits_ >> (4 * i)) & 0xFu) - 1; }
  bool contains(int adapter) const { return set().contains(adapter); }
  AdapterSet set() const {
    AdapterSet s;
    for (int i = 0; i < kMaxAdapters && at(i) >= 0; ++i) s.insert(at(i));
    return s;
  }

  // Appended at the end, as a dict takes a new key; a key already in keeps its place.
  void push_back(int adapter) {
    if (contains(adapter)) return;
    bits_ |= static_cast<uint32_t>(adapter + 1) << (4 * size());
  }
  // Removed, the later ones moving up (`del d[key]`).
  void erase(int adapter) {
    AdapterOrder rest;
    for (int i = 0; i < kMaxAdapters && at(i) >= 0; ++i)
      if (at(i) != adapter) rest.push_back(at(i));
    *this = rest;
  }
  // The members of this order that are in `s`, in this order.
  AdapterOrder only(AdapterSet s) const {
    AdapterOrder out;
    for (int i = 0; i < kMaxAdapters && at(i) >= 0; ++i)
      if (s.contains(at(i))) out.push_back(at(i));
    return out;
  }
  // The declared adapters named in `names`, in the order named (a name given twice counts once).
  static AdapterOrder named(const std::vector<AdapterDecl>& adapters, const std::vector<std::string>& names) {
    AdapterOrder out;
    for (const auto& n : names)
      for (size_t a = 0; a < adapters.size(); ++a)
        if (adapters[a].name == n) out.push_back(static_cast<int>(a));
    return out;
  }

  static AdapterOrder in_declaration_order(AdapterSet s) {
    AdapterOrder out;
    for (int a : s) out.push_back(a);
    return out;
  }

  std::vector<int> list() const {
    std::vector<int> out;
    for (int i = 0; i < kMaxAdapters && at(i) >= 0; ++i) out.push_back(at(i));
    return out;
  }
  bool operator==(AdapterOrder o) const { return bits_ == o.bits_; }
  bool operator!=(AdapterOrder o) const { return bits_ != o.bits_; }

 private:
  uint32_t bits_ = 0;
};

static_assert(sizeof(AdapterOrder) == 4, "AdapterOrder is one word of the explorer's state key");

}  // namespace fsdpsim
