// An enum's printed names as one table in declaration order (the enum counts from
// 0 with no gaps): the name of a value, and the value of a name. Every enum the
// observations, the .seq format or the command line print is named this one way.
#pragma once
#include <array>
#include <cstddef>
#include <string_view>

namespace fsdpsim {

template <typename E, std::size_t N>
struct EnumNames {
  std::array<const char*, N> names;

  static constexpr std::size_t size() { return N; }
  constexpr const char* operator[](E e) const {
    const auto i = static_cast<std::size_t>(e);
    return i < N ? names[i] : "?";
  }
  // False when no value has that name (*out untouched).
  bool parse(std::string_view s, E* out) const {
    for (std::size_t i = 0; i < N; ++i)
      if (s == names[i]) {
        *out = static_cast<E>(i);
        return true;
      }
    return false;
  }
};

// enum_names<Status>("ok", "no_grad_fn", ...): the names in the enum's order.
template <typename E, typename... S>
constexpr EnumNames<E, sizeof...(S)> enum_names(S... s) {
  return {{{s...}}};
}

}  // namespace fsdpsim
