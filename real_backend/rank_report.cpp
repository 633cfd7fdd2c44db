#include "real_backend/rank_report.hpp"

#include <algorithm>
#include <cstring>

namespace fsdpsim::real {
namespace {

struct Writer {
  std::string& o;
  void i64(int64_t v) { o.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    o.append(s);
  }
  void strs(const std::vector<std::string>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  void owners(const std::vector<OwnerBytes>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (const auto& x : v) {
      str(x.owner);
      i64(x.bytes);
    }
  }
  void floats(const std::vector<float>& v) {
    i64(static_cast<int64_t>(v.size()));
    // An empty vector's data() may be null: memcpy from null is undefined even for 0 bytes.
    if (!v.empty()) o.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
};

struct Reader {
  const std::string& in;
  size_t p;
  bool ok = true;
  int64_t i64() {
    int64_t v = 0;
    if (!ok || p + sizeof v > in.size()) return ok = false, 0;  // nothing after a failed read
    std::memcpy(&v, in.data() + p, sizeof v);
    p += sizeof v;
    return v;
  }
  std::string str() {
    int64_t n = i64();
    if (!ok || n < 0 || p + static_cast<size_t>(n) > in.size()) return ok = false, std::string();
    std::string s = in.substr(p, static_cast<size_t>(n));
    p += static_cast<size_t>(n);
    return s;
  }
  std::vector<std::string> strs() {
    int64_t n = i64();
    std::vector<std::string> v;
    for (int64_t i = 0; ok && i < n; ++i) v.push_back(str());
    return v;
  }
  std::vector<OwnerBytes> owners() {
    int64_t n = i64();
    std::vector<OwnerBytes> v;
    for (int64_t i = 0; ok && i < n; ++i) {
      OwnerBytes x;
      x.owner = str();
      x.bytes = i64();
      v.push_back(x);
    }
    return v;
  }
  std::vector<float> floats() {
    int64_t n = i64();
    if (!ok || n < 0 || p + static_cast<size_t>(n) * sizeof(float) > in.size()) return ok = false, std::vector<float>();
    std::vector<float> v(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), in.data() + p, v.size() * sizeof(float));  // data() of an empty vector may be null
    p += v.size() * sizeof(float);
    return v;
  }
};

}  // namespace

void write_report(std::string& out, const RankReport& r) {
  Writer w{out};
  w.i64(r.step);
  w.i64(r.rank);
  w.str(r.op);
  w.i64(static_cast<int64_t>(r.status));
  w.str(r.message);
  w.i64(r.index);
  w.i64(r.has_grads);
  w.strs(r.grads);
  w.strs(r.active);
  w.i64(r.disabled);
  w.i64(r.opt_missing);
  w.i64(r.opt_total);
  w.strs(r.opt_unregistered);
  w.i64(static_cast<int64_t>(r.groups.size()));
  for (const auto& g : r.groups) {
    w.str(g.name);
    w.i64(static_cast<int64_t>(g.state));
  }
  w.i64(static_cast<int64_t>(r.params.size()));
  for (const auto& p : r.params) {
    w.str(p.name);
    w.str(p.group);
    w.i64(p.rg_s);
    w.i64(p.rg_u);
    w.i64(static_cast<int64_t>(p.device));
    w.i64(static_cast<int64_t>(p.dtype));
  }
  w.i64(static_cast<int64_t>(r.merged.size()));
  for (const auto& m : r.merged) w.strs(m);
  w.i64(static_cast<int64_t>(r.collectives.size()));
  for (const auto& c : r.collectives) {
    w.i64(static_cast<int64_t>(c.op));
    w.str(c.group);
    w.i64(c.count);
    w.i64(static_cast<int64_t>(c.dtype));
    w.i64(static_cast<int64_t>(c.parts.size()));
    for (const auto& part : c.parts) {
      w.str(part.param);
      w.i64(part.numel);
    }
  }
  w.i64(static_cast<int64_t>(r.deltas.size()));
  for (const auto& d : r.deltas) {
    w.str(d.adapter);
    w.i64(static_cast<int64_t>(d.value));
  }
  w.i64(static_cast<int64_t>(r.saved.size()));
  for (const auto& s : r.saved) {
    w.str(s.name);
    w.i64(s.rows);
    w.i64(s.full_rows);
    w.i64(static_cast<int64_t>(s.dtype));
  }
  w.strs(r.reload_diff);
  w.strs(r.reload_coincident);
  w.owners(r.sharded_bytes);
  w.owners(r.peak_unsharded);
  w.i64(static_cast<int64_t>(r.present.size()));
  for (size_t i = 0; i < r.present.size(); ++i) {
    w.i64(r.present[i]);
    w.i64(r.u_registered[i]);
    w.i64(r.whole[i]);
    w.floats(r.s_values[i]);
    w.floats(r.u_values[i]);
  }
}

bool read_report(const std::string& in, size_t* pos, RankReport* r) {
  Reader rd{in, *pos};
  r->step = static_cast<int>(rd.i64());
  r->rank = static_cast<int>(rd.i64());
  r->op = rd.str();
  r->status = static_cast<Status>(rd.i64());
  r->message = rd.str();
  r->index = rd.i64();
  r->has_grads = rd.i64() != 0;
  r->grads = rd.strs();
  r->active = rd.strs();
  r->disabled = rd.i64() != 0;
  r->opt_missing = static_cast<int>(rd.i64());
  r->opt_total = static_cast<int>(rd.i64());
  r->opt_unregistered = rd.strs();
  r->groups.resize(static_cast<size_t>(std::max<int64_t>(0, rd.i64())));
  for (auto& g : r->groups) {
    g.name = rd.str();
    g.state = static_cast<ShardedState>(rd.i64());
  }
  r->params.resize(static_cast<size_t>(std::max<int64_t>(0, rd.i64())));
  for (auto& p : r->params) {
    p.name = rd.str();
    p.group = rd.str();
    p.rg_s = rd.i64() != 0;
    p.rg_u = static_cast<int8_t>(rd.i64());
    p.device = static_cast<Device>(rd.i64());
    p.dtype = static_cast<DType>(rd.i64());
  }
  r->merged.resize(static_cast<size_t>(std::max<int64_t>(0, rd.i64())));
  for (auto& m : r->merged) m = rd.strs();
  r->collectives.resize(static_cast<size_t>(std::max<int64_t>(0, rd.i64())));
  for (auto& c : r->collectives) {
    c.op = static_cast<CollOp>(rd.i64());
    c.group = rd.str();
    c.count = rd.i64();
    c.dtype = static_cast<DType>(rd.i64());
    c.parts.resize(static_cast<size_t>(std::max<int64_t>(0, rd.i64())));
    for (auto& part : c.parts) {
      part.param = rd.str();
      part.numel = rd.i64();
      if (!rd.ok) break;
    }
    if (!rd.ok) break;
  }
  r->deltas.resize(static_cast<size_t>(std::max<int64_t>(0, rd.i64())));
  for (auto& d : r->deltas) {
    d.adapter = rd.str();
    d.value = static_cast<WeightClass>(rd.i64());
    if (!rd.ok) break;
  }
  r->saved.resize(static_cast<size_t>(std::max<int64_t>(0, rd.i64())));
  for (auto& s : r->saved) {
    s.name = rd.str();
    s.rows = rd.i64();
    s.full_rows = rd.i64();
    s.dtype = static_cast<DType>(rd.i64());
    if (!rd.ok) break;
  }
  r->reload_diff = rd.strs();
  r->reload_coincident = rd.strs();
  r->sharded_bytes = rd.owners();
  r->peak_unsharded = rd.owners();
  size_t n = static_cast<size_t>(std::max<int64_t>(0, rd.i64()));
  r->present.resize(n);
  r->u_registered.resize(n);
  r->whole.resize(n);
  r->s_values.resize(n);
  r->u_values.resize(n);
  for (size_t i = 0; i < n && rd.ok; ++i) {
    r->present[i] = static_cast<uint8_t>(rd.i64());
    r->u_registered[i] = static_cast<uint8_t>(rd.i64());
    r->whole[i] = static_cast<uint8_t>(rd.i64());
    r->s_values[i] = rd.floats();
    r->u_values[i] = rd.floats();
  }
  if (!rd.ok) return false;
  *pos = rd.p;
  return true;
}

}  // namespace fsdpsim::real
