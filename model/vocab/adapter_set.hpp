// A set of adapters named by their declaration index (0 .. kMaxAdapters-1): which
// adapters are in the model, active, in inference mode, got a gradient, ...
// One byte, so the structs holding it keep their size and the explorer's state
// key (model/machine/state_key.cpp) reads the same bits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/limits.hpp"
#include "model/vocab/scenario.hpp"

namespace fsdpsim {

class AdapterSet {
 public:
  constexpr AdapterSet() = default;
  static constexpr AdapterSet of(int adapter) { return from_bits(static_cast<uint8_t>(1u << adapter)); }
  static constexpr AdapterSet from_bits(uint8_t bits) {
    AdapterSet s;
    s.bits_ = bits;
    return s;
  }
  constexpr uint8_t bits() const { return bits_; }

  constexpr bool contains(int adapter) const { return (bits_ >> adapter) & 1u; }
  constexpr bool empty() const { return bits_ == 0; }
  int count() const { return __builtin_popcount(bits_); }
  int first() const { return __builtin_ctz(bits_); }  // the lowest index; the set must not be empty
  // Every adapter of `sub` is in this set.
  constexpr bool includes(AdapterSet sub) const { return (sub.bits_ & bits_) == sub.bits_; }

  void insert(int adapter) { bits_ = static_cast<uint8_t>(bits_ | (1u << adapter)); }
  void erase(int adapter) { bits_ = static_cast<uint8_t>(bits_ & ~(1u << adapter)); }
  void set(int adapter, bool in) { in ? insert(adapter) : erase(adapter); }

  constexpr AdapterSet operator&(AdapterSet o) const { return from_bits(static_cast<uint8_t>(bits_ & o.bits_)); }
  constexpr AdapterSet operator|(AdapterSet o) const { return from_bits(static_cast<uint8_t>(bits_ | o.bits_)); }
  constexpr AdapterSet without(AdapterSet o) const { return from_bits(static_cast<uint8_t>(bits_ & ~o.bits_)); }
  AdapterSet& operator|=(AdapterSet o) { return *this = *this | o; }
  constexpr bool operator==(AdapterSet o) const { return bits_ == o.bits_; }
  constexpr bool operator!=(AdapterSet o) const { return bits_ != o.bits_; }

  // The members in adapter order.
  class Iterator {
   public:
    explicit Iterator(uint8_t rest) : rest_(rest) {}
    int operator*() const { return __builtin_ctz(rest_); }
    Iterator& operator++() {
      rest_ = static_cast<uint8_t>(rest_ & (rest_ - 1));
      return *this;
    }
    bool operator!=(const Iterator& o) const { return rest_ != o.rest_; }

   private:
    uint8_t rest_;
  };
  Iterator begin() const { return Iterator(bits_); }
  Iterator end() const { return Iterator(0); }

  // The adapters whose declared name is in `names`.
  static AdapterSet named(const std::vector<AdapterDecl>& adapters, const std::vector<std::string>& names) {
    AdapterSet s;
    for (const auto& n : names)
      for (size_t a = 0; a < adapters.size(); ++a)
        if (adapters[a].name == n) s.insert(static_cast<int>(a));
    return s;
  }
  // "{a,b}": the declared names, in adapter order.
  std::string text(const std::vector<AdapterDecl>& adapters) const {
    std::string out = "{";
    for (int a : *this) out += (out.size() > 1 ? "," : "") + adapters[a].name;
    return out + "}";
  }

 private:
  uint8_t bits_ = 0;
};

static_assert(sizeof(AdapterSet) == 1, "AdapterSet replaced uint8_t masks in structs whose size the state key checks");
static_assert(kMaxAdapters <= 8, "AdapterSet holds its adapters in one byte");

}  // namespace fsdpsim
