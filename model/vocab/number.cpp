#include "model/vocab/number.hpp"

#include <cctype>

namespace fsdpsim {
namespace {

bool all_digits(const std::string& s, size_t from) {
  if (from >= s.size()) return false;
  for (size_t i = from; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// Why a token that is not plain digits is refused: the forms people type for numbers.
std::string not_digits_reason(const std::string& s) {
  if (s.empty()) return "nothing";
  const size_t body = s[0] == '+' || s[0] == '-' ? 1 : 0;
  bool numeric = body < s.size();
  bool exponent = false, point = false, digit = false;
  for (size_t i = body; i < s.size(); ++i) {
    const char c = s[i];
    digit = digit || std::isdigit(static_cast<unsigned char>(c));
    if (c == 'e' || c == 'E') exponent = true;
    else if (c == '.') point = true;
    else if (!std::isdigit(static_cast<unsigned char>(c)) && !((c == '+' || c == '-') && i > 0 && (s[i - 1] == 'e' || s[i - 1] == 'E')))
      numeric = false;
  }
  if (!numeric || !digit || !(std::isdigit(static_cast<unsigned char>(s[body])) || s[body] == '.')) return "not a number";
  if (exponent) return "an exponent; write the digits out";
  if (point) return "a fraction; a whole number is expected";
  return "a sign; write the digits alone";
}

}  // namespace

std::string read_whole_number(const std::string& text, int64_t lo, int64_t hi, int64_t* out) {
  const std::string range = "a whole number in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got ";
  if (text.empty()) return range + "nothing";
  if (text[0] == '-' && all_digits(text, 1) && text.find_first_not_of('0', 1) != std::string::npos)
    return range + text + " (negative; the smallest accepted is " + std::to_string(lo) + ")";
  if (!all_digits(text, 0)) return range + "'" + text + "' (" + not_digits_reason(text) + ")";
  // Digits only: accumulate with a saturation check, so 2^64 and beyond keep their value in the message.
  uint64_t v = 0;
  bool overflow = false;
  for (char c : text) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) {
      overflow = true;
      break;
    }
    v = v * 10 + d;
  }
  if (overflow || v > static_cast<uint64_t>(hi))
    return range + text + " (larger than " + std::to_string(hi) + (overflow ? ", and than any 64-bit number)" : ")");
  if (static_cast<int64_t>(v) < lo) return range + text + " (smaller than " + std::to_string(lo) + ")";
  *out = static_cast<int64_t>(v);
  return "";
}

}  // namespace fsdpsim
