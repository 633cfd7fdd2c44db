// Length-prefixed little-endian records: how a real rank's report crosses a
// pipe (real_backend/rank_report.cpp) and what the trace hash reads
// (observation_binary.cpp). Every value is an int64 or a counted run of bytes.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fsdpsim {

struct ByteWriter {
  std::string& out;
  void i64(int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void bytes(const void* p, size_t n) {
    i64(static_cast<int64_t>(n));
    if (n) out.append(static_cast<const char*>(p), n);  // p may be null when n is 0
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
};

// Reads what ByteWriter wrote; a read past the end (a truncated record) clears
// `ok`, and every read after that returns a zero value.
struct ByteReader {
  const std::string& in;
  size_t p;
  bool ok = true;
  int64_t i64() {
    int64_t v = 0;
    if (!ok || p + sizeof v > in.size()) return ok = false, 0;
    std::memcpy(&v, in.data() + p, sizeof v);
    p += sizeof v;
    return v;
  }
  // A count that must leave room for at least `unit` bytes per element.
  size_t count(size_t unit) {
    int64_t n = i64();
    if (!ok || n < 0 || (unit && static_cast<uint64_t>(n) > (in.size() - p) / unit)) return ok = false, 0;
    return static_cast<size_t>(n);
  }
  std::string str() {
    size_t n = count(1);
    if (!ok) return {};
    std::string s = in.substr(p, n);
    p += n;
    return s;
  }
  template <typename T>
  std::vector<T> pod_array() {  // floats and the like, written with bytes(data, n * sizeof(T))
    size_t n = count(1);
    if (!ok || n % sizeof(T)) return ok = false, std::vector<T>();
    std::vector<T> v(n / sizeof(T));
    if (n) std::memcpy(v.data(), in.data() + p, n);
    p += n;
    return v;
  }
};

}  // namespace fsdpsim
