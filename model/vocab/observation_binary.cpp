#include "model/vocab/observation_binary.hpp"

#include "model/vocab/byte_codec.hpp"

#include <type_traits>

namespace fsdpsim {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// ByteWriter's interface, hashing instead of storing: a word at a time, so a
// trace hash costs a multiply per 8 bytes rather than a JSON text per op.
struct HashSink {
  uint64_t h = kFnvOffset;
  void i64(int64_t v) { h = (h ^ static_cast<uint64_t>(v)) * kFnvPrime; }
  void bytes(const void* p, size_t n) {
    i64(static_cast<int64_t>(n));
    const char* c = static_cast<const char*>(p);
    for (; n >= 8; n -= 8, c += 8) {
      uint64_t w;
      std::memcpy(&w, c, 8);
      i64(static_cast<int64_t>(w));
    }
    if (n) i64(static_cast<int64_t>(tail_word(c, n)));
  }
  // The last 1-7 bytes as memcpy into a zeroed word would give them (little-endian), read
  // with two overlapping loads: a memcpy of n bytes into the word's stack slot and a load of
  // all 8 defeats store-to-load forwarding, a stall for every string.
  static uint64_t tail_word(const char* c, size_t n) {
    auto load = [&](size_t at, auto word) {
      std::memcpy(&word, c + at, sizeof word);
      return static_cast<uint64_t>(word);
    };
    if (n >= 4) return load(0, uint32_t{}) | load(n - 4, uint32_t{}) << (8 * (n - 4));
    if (n >= 2) return load(0, uint16_t{}) | load(n - 2, uint16_t{}) << (8 * (n - 2));
    return static_cast<uint8_t>(c[0]);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
};

// Each value type, written to a sink.
template <typename S>
void put(S& s, int64_t v) { s.i64(v); }
template <typename S>
void put(S& s, int v) { s.i64(v); }
template <typename S>
void put(S& s, bool v) { s.i64(v); }
template <typename S>
void put(S& s, const std::string& v) { s.str(v); }
template <typename S>
void put(S& s, Name v) { s.str(v.str()); }
template <typename S, typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
void put(S& s, E v) { s.i64(static_cast<int64_t>(v)); }
template <typename S>
void put(S& s, const GroupObs& g) { put(s, g.name), put(s, g.state); }
template <typename S>
void put(S& s, const ParamObs& p) {
  put(s, p.name), put(s, p.group), put(s, p.rg_s), put(s, static_cast<int>(p.rg_u)), put(s, p.device), put(s, p.dtype);
}
template <typename S, typename T>
void put(S& s, const std::vector<T>& v);
template <typename S>
void put(S& s, const LayerObs& l) {
  put(s, l.name), put(s, l.group), put(s, l.merged), put(s, l.stored), put(s, l.registered);
  put(s, static_cast<int>(l.stored_alt)), put(s, static_cast<int>(l.registered_alt));
}
template <typename S>
void put(S& s, const CollPart& p) { put(s, p.param), put(s, p.numel); }
template <typename S>
void put(S& s, const Collective& c) { put(s, c.op), put(s, c.group), put(s, c.count), put(s, c.dtype), put(s, c.parts); }
template <typename S>
void put(S& s, const DeltaObs& d) { put(s, d.adapter), put(s, d.value); }
template <typename S>
void put(S& s, const SavedObs& x) { put(s, x.name), put(s, x.rows), put(s, x.full_rows), put(s, x.dtype); }
template <typename S>
void put(S& s, const OwnerBytes& x) { put(s, x.owner), put(s, x.bytes); }
template <typename S, typename T>
void put(S& s, const std::vector<T>& v) {
  s.i64(static_cast<int64_t>(v.size()));
  for (const auto& x : v) put(s, x);
}
template <typename S>
void put(S& s, const std::optional<std::vector<Name>>& v) {
  s.i64(v ? 1 : 0);
  if (v) put(s, *v);
}
template <typename S>
void put_all(S& s, const Observation& o) {
  for_each_field(o, [&](const FieldInfo&, const auto& field) { put(s, field); });
}

// And read back; enums out of their range fail the record.
struct Get {
  ByteReader& r;
  void operator()(int64_t& v) { v = r.i64(); }
  void operator()(int& v) { v = static_cast<int>(r.i64()); }
  void operator()(int8_t& v) { v = static_cast<int8_t>(r.i64()); }
  void operator()(uint8_t& v) { v = static_cast<uint8_t>(r.i64()); }
  void operator()(bool& v) { v = r.i64() != 0; }
  void operator()(std::string& v) { v = r.str(); }
  void operator()(Name& v) { v = Name(r.str()); }
  template <typename E>
  std::enable_if_t<std::is_enum_v<E>> operator()(E& v) {
    int64_t x = r.i64();
    if (x < 0 || x > static_cast<int64_t>(enum_last(v))) r.ok = false;
    v = r.ok ? static_cast<E>(x) : E{};
  }
  void operator()(GroupObs& g) { (*this)(g.name), (*this)(g.state); }
  void operator()(ParamObs& p) { (*this)(p.name), (*this)(p.group), (*this)(p.rg_s), (*this)(p.rg_u), (*this)(p.device), (*this)(p.dtype); }
  void operator()(LayerObs& l) {
    (*this)(l.name), (*this)(l.group), (*this)(l.merged), (*this)(l.stored), (*this)(l.registered);
    (*this)(l.stored_alt), (*this)(l.registered_alt);
  }
  void operator()(CollPart& p) { (*this)(p.param), (*this)(p.numel); }
  void operator()(Collective& c) { (*this)(c.op), (*this)(c.group), (*this)(c.count), (*this)(c.dtype), (*this)(c.parts); }
  void operator()(DeltaObs& d) { (*this)(d.adapter), (*this)(d.value); }
  void operator()(SavedObs& x) { (*this)(x.name), (*this)(x.rows), (*this)(x.full_rows), (*this)(x.dtype); }
  void operator()(OwnerBytes& x) { (*this)(x.owner), (*this)(x.bytes); }
  template <typename T>
  void operator()(std::vector<T>& v) {
    size_t n = r.count(sizeof(int64_t));  // every element takes at least one word
    v.clear();
    for (size_t i = 0; i < n && r.ok; ++i) (*this)(v.emplace_back());
  }
  void operator()(std::optional<std::vector<Name>>& v) {
    if (r.i64()) (*this)(v.emplace());
    else v.reset();
  }
  static Status enum_last(Status) { return Status::AssertionError; }
  static WeightClass enum_last(WeightClass) { return WeightClass::Unjudged; }
  static ShardedState enum_last(ShardedState) { return ShardedState::Unsharded; }
  static CollOp enum_last(CollOp) { return CollOp::AllReduce; }
  static Device enum_last(Device) { return Device::Meta; }
  // uint8: a collective's wire dtype under a policy (a group of mixed dtypes packs bytes)
  static DType enum_last(DType) { return DType::U8; }
};

}  // namespace

void append_binary(std::string& out, const Observation& o) {
  ByteWriter w{out};
  put_all(w, o);
}

bool read_binary(const std::string& in, size_t* pos, Observation* o) {
  ByteReader r{in, *pos};
  Observation x;
  Get get{r};
  for_each_field(x, [&](const FieldInfo&, auto& field) {
    if (r.ok) get(field);
  });
  if (!r.ok) return false;
  *o = std::move(x);
  *pos = r.p;
  return true;
}

uint64_t observations_hash(const std::vector<Observation>& obs) {
  HashSink h;
  for (const auto& o : obs)
    for_each_field(o, [&](const FieldInfo& f, const auto& field) {
      // as the comparison reads it: gloo's words after kGlooSaid differ from run to run (which
      // rank's abort a peer reads as a reset connection)
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, std::string>)
        if (f.flags & kEvidence) return put(h, message_words(field));
      put(h, field);
    });
  return h.h;
}

}  // namespace fsdpsim
