// The one seeded generator every random choice flows from (xoshiro256**,
// seeded through splitmix64): the same seed gives the same stream everywhere.
#pragma once
#include <cstdint>

namespace fsdpsim {

class Prng {
 public:
  explicit Prng(uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    uint64_t r = rotl(s_[1] * 5, 7) * 9;
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  // Uniform in [0, n) (n > 0); the tiny modulo bias is irrelevant here.
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(next() % n); }
  bool chance(uint32_t percent) { return below(100) < percent; }
  // A second stream that starts from this one's state and `salt` without advancing it: draws
  // added to a generator on it leave every later draw of this stream as it was.
  Prng fork(uint64_t salt) const { return Prng(s_[0] ^ rotl(s_[3], 29) ^ (salt * 0xd1342543de82ef95ull)); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace fsdpsim
