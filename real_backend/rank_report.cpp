#include "real_backend/rank_report.hpp"

#include "model/vocab/byte_codec.hpp"
#include "model/vocab/observation_binary.hpp"

namespace fsdpsim::real {

void write_report(std::string& out, const RankReport& r) {
  append_binary(out, r);
  ByteWriter w{out};
  w.i64(static_cast<int64_t>(r.merged.size()));
  for (const auto& m : r.merged) {
    w.i64(static_cast<int64_t>(m.size()));
    for (const auto& s : m) w.str(s);
  }
  w.i64(static_cast<int64_t>(r.present.size()));
  for (size_t i = 0; i < r.present.size(); ++i) {
    w.i64(r.present[i]);
    w.i64(r.u_registered[i] | (i < r.u_cast.size() && r.u_cast[i] ? 2 : 0));  // both flags in one word
    w.i64(r.whole[i]);
    w.i64(i < r.adam_steps.size() ? r.adam_steps[i] : 0);
    w.bytes(r.s_values[i].data(), r.s_values[i].size() * sizeof(float));
    w.bytes(r.u_values[i].data(), r.u_values[i].size() * sizeof(float));
  }
  w.i64(r.delta_layer);
  w.i64(static_cast<int64_t>(r.delta_values.size()));
  for (const DeltaValue& d : r.delta_values) {
    w.i64(d.form);
    w.bytes(d.shape.data(), d.shape.size() * sizeof(int64_t));
    w.bytes(d.values.data(), d.values.size() * sizeof(float));
  }
}

bool read_report(const std::string& in, size_t* pos, RankReport* r) {
  size_t p = *pos;
  if (!read_binary(in, &p, r)) return false;
  ByteReader rd{in, p};
  r->merged.resize(rd.count(sizeof(int64_t)));
  for (auto& m : r->merged) {
    m.resize(rd.count(sizeof(int64_t)));
    for (auto& s : m) s = rd.str();
    if (!rd.ok) break;
  }
  size_t n = rd.count(4 * sizeof(int64_t));
  r->present.resize(n);
  r->u_registered.resize(n);
  r->u_cast.resize(n);
  r->whole.resize(n);
  r->adam_steps.resize(n);
  r->s_values.resize(n);
  r->u_values.resize(n);
  for (size_t i = 0; i < n && rd.ok; ++i) {
    r->present[i] = static_cast<uint8_t>(rd.i64());
    const int64_t u_flags = rd.i64();
    r->u_registered[i] = static_cast<uint8_t>(u_flags & 1);
    r->u_cast[i] = static_cast<uint8_t>((u_flags >> 1) & 1);
    r->whole[i] = static_cast<uint8_t>(rd.i64());
    r->adam_steps[i] = rd.i64();
    r->s_values[i] = rd.pod_array<float>();
    r->u_values[i] = rd.pod_array<float>();
  }
  r->delta_layer = static_cast<int>(rd.i64());
  r->delta_values.resize(rd.count(3 * sizeof(int64_t)));
  for (DeltaValue& d : r->delta_values) {
    d.form = static_cast<DeltaForm>(rd.i64());
    d.shape = rd.pod_array<int64_t>();
    d.values = rd.pod_array<float>();
    if (!rd.ok) break;
  }
  if (!rd.ok) return false;
  *pos = rd.p;
  return true;
}

}  // namespace fsdpsim::real
