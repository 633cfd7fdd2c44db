// Whole numbers read from text: the .seq parser's fields (world, r=, alpha=,
// ...) and the command line's flags (--seconds, --world, ...) share this one
// reader, so every refusal says the same three things: the value it read, the
// accepted range, and why the value is outside it.
#pragma once
#include <cstdint>
#include <string>

namespace fsdpsim {

// Reads `text` as a whole number in lo..hi (decimal digits only). On success
// stores it in *out and returns "". Otherwise returns the reason, to follow
// "expected <what>, ": e.g. "a whole number in 1..1024, got 18446744073709551615
// (larger than 1024)", "..., got '-8' (negative; the smallest accepted is 1)",
// "..., got '1e23' (not written in decimal digits: no sign, point or exponent)".
std::string read_whole_number(const std::string& text, int64_t lo, int64_t hi, int64_t* out);

}  // namespace fsdpsim
