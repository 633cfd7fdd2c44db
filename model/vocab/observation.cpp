#include "model/vocab/observation.hpp"

#include <algorithm>
#include <sstream>

#include "model/vocab/table.hpp"

namespace fsdpsim {

const char* const kNoGradFnMessage = "element 0 of tensors does not require grad and does not have a grad_fn";

const char* status_name(Status s) {
  switch (s) {
    case Status::Ok: return "ok";
    case Status::NoGradFn: return "no_grad_fn";
    case Status::KeyError: return "key_error";
    case Status::ShapeError: return "shape_error";
    case Status::ValueError: return "value_error";
    case Status::Hang: return "hang";
    case Status::Mismatch: return "mismatch";
    case Status::NotRun: return "not_run";
    case Status::Exception: return "exception";
  }
  return "?";
}

bool status_from_name(const std::string& s, Status* out) {
  for (int i = 0; i < kStatusCount; ++i) {
    if (s == status_name(static_cast<Status>(i))) {
      *out = static_cast<Status>(i);
      return true;
    }
  }
  return false;
}

const char* weight_class_name(WeightClass w) {
  switch (w) {
    case WeightClass::Exact: return "exact";
    case WeightClass::MissingDelta: return "missing_delta";
    case WeightClass::ExtraDelta: return "extra_delta";
    case WeightClass::Corrupt: return "corrupt";
  }
  return "?";
}

bool weight_class_from_name(const std::string& s, WeightClass* out) {
  for (int i = 0; i <= static_cast<int>(WeightClass::Corrupt); ++i) {
    if (s == weight_class_name(static_cast<WeightClass>(i))) {
      *out = static_cast<WeightClass>(i);
      return true;
    }
  }
  return false;
}

const char* sharded_state_name(ShardedState s) { return s == ShardedState::Sharded ? "SHARDED" : "UNSHARDED"; }

const char* coll_op_name(CollOp c) {
  switch (c) {
    case CollOp::AllGather: return "all_gather";
    case CollOp::ReduceScatter: return "reduce_scatter";
    case CollOp::Broadcast: return "broadcast";
  }
  return "?";
}

std::string collective_text(const Collective& c) {
  std::string out = std::string(coll_op_name(c.op)) + "(" + c.group + ", " + std::to_string(c.count);
  if (c.op == CollOp::Broadcast) out += std::string(" ") + dtype_name(c.dtype);
  return out + ")";
}

std::string describe_pending(const std::vector<PendingCollective>& heads) {
  bool same = true;
  int waiting = 0;
  const PendingCollective* first = nullptr;
  for (const auto& h : heads) {
    if (!h.waiting) continue;
    ++waiting;
    if (!first) first = &h;
    same = same && h.coll.op == first->coll.op && h.coll.group == first->coll.group &&
           h.coll.count == first->coll.count && h.coll.dtype == first->coll.dtype;
  }
  same = same && waiting >= 2;
  std::string out;
  for (size_t r = 0; r < heads.size(); ++r) {
    const PendingCollective& h = heads[r];
    out += (r ? "; " : "") + std::string("rank ") + std::to_string(r) + " ";
    if (!h.waiting) {
      out += "issues no matching collective";
      continue;
    }
    out += "in " + collective_text(h.coll);
    if (same) {
      std::string m;
      for (size_t i = 0; i < h.members.size(); ++i) m += (i ? "," : "") + h.members[i];
      out += " of " + (m.empty() ? std::string("nothing") : m);
    }
    out += " at step " + std::to_string(h.step);
  }
  return out;
}

std::string names_set_text(const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? "," : "") + names[i];
  return out + "}";
}

std::string owner_bytes_text(const std::vector<OwnerBytes>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x.owner + ":" + std::to_string(x.bytes);
  return s.empty() ? std::string("-") : s;
}

bool Observation::operator==(const Observation& o) const { return observation_diff(*this, o).empty(); }

std::vector<std::string> observation_diff(const Observation& a, const Observation& b) {
  std::vector<std::string> d;
  auto add = [&](const std::string& field, const std::string& x, const std::string& y) {
    if (x != y) d.push_back(field + ": " + x + " vs " + y);
  };
  add("step", std::to_string(a.step), std::to_string(b.step));
  add("rank", std::to_string(a.rank), std::to_string(b.rank));
  add("op", a.op, b.op);
  add("status", status_name(a.status), status_name(b.status));
  add("message", a.message, b.message);
  add("grads", a.grads ? names_set_text(*a.grads) : "-", b.grads ? names_set_text(*b.grads) : "-");
  add("index", std::to_string(a.index), std::to_string(b.index));
  add("active", names_set_text(a.active), names_set_text(b.active));
  add("disabled", a.disabled ? "true" : "false", b.disabled ? "true" : "false");
  std::string ua, ub;
  for (const auto& n : a.opt_unregistered) ua += (ua.empty() ? "" : ",") + n;
  for (const auto& n : b.opt_unregistered) ub += (ub.empty() ? "" : ",") + n;
  add("optimizer_unregistered", ua, ub);
  add("optimizer_missing", std::to_string(a.opt_missing) + "/" + std::to_string(a.opt_total),
      std::to_string(b.opt_missing) + "/" + std::to_string(b.opt_total));
  size_t n = std::max(a.groups.size(), b.groups.size());
  for (size_t i = 0; i < n; ++i) {
    std::string x = i < a.groups.size() ? a.groups[i].name + ":" + sharded_state_name(a.groups[i].state) : "-";
    std::string y = i < b.groups.size() ? b.groups[i].name + ":" + sharded_state_name(b.groups[i].state) : "-";
    add("group[" + std::to_string(i) + "]", x, y);
  }
  n = std::max(a.params.size(), b.params.size());
  for (size_t i = 0; i < n; ++i) {
    auto txt = [](const std::vector<ParamObs>& v, size_t k) {
      if (k >= v.size()) return std::string("-");
      const ParamObs& p = v[k];
      return p.name + "@" + p.group + " S.rg=" + (p.rg_s ? "1" : "0") + " U.rg=" + (p.rg_u < 0 ? "-" : p.rg_u ? "1" : "0") +
             " " + device_name(p.device) + "/" + dtype_name(p.dtype);
    };
    add("param[" + std::to_string(i) + "]", txt(a.params, i), txt(b.params, i));
  }
  n = std::max(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < n; ++i) {
    auto txt = [](const std::vector<LayerObs>& v, size_t k) {
      if (k >= v.size()) return std::string("-");
      const LayerObs& l = v[k];
      std::string m;
      for (size_t j = 0; j < l.merged.size(); ++j) m += (j ? "," : "") + l.merged[j];
      return l.name + "@" + l.group + " merged=[" + m + "] stored=" + weight_class_name(l.stored) +
             " registered=" + weight_class_name(l.registered);
    };
    add("layer[" + std::to_string(i) + "]", txt(a.layers, i), txt(b.layers, i));
  }
  auto colls = [](const std::vector<Collective>& v) {
    std::string s;
    for (const auto& c : v) {
      s += (s.empty() ? "" : " ") + collective_text(c) + "[";
      for (size_t i = 0; i < c.parts.size(); ++i) s += (i ? "," : "") + c.parts[i].param + ":" + std::to_string(c.parts[i].numel);
      s += "]";
    }
    return s.empty() ? std::string("-") : s;
  };
  add("collectives", colls(a.collectives), colls(b.collectives));
  auto deltas = [](const std::vector<DeltaObs>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x.adapter + ":" + weight_class_name(x.value);
    return s.empty() ? std::string("-") : s;
  };
  add("deltas", deltas(a.deltas), deltas(b.deltas));
  auto saved = [](const std::vector<SavedObs>& v) {
    std::string s;
    for (const auto& x : v)
      s += (s.empty() ? "" : " ") + x.name + ":" + std::to_string(x.rows) + "/" + std::to_string(x.full_rows) + ":" +
           dtype_name(x.dtype);
    return s.empty() ? std::string("-") : s;
  };
  add("saved", saved(a.saved), saved(b.saved));
  add("reload_diff", names_set_text(a.reload_diff), names_set_text(b.reload_diff));
  add("sharded_bytes", owner_bytes_text(a.sharded_bytes), owner_bytes_text(b.sharded_bytes));
  add("peak_unsharded", owner_bytes_text(a.peak_unsharded), owner_bytes_text(b.peak_unsharded));
  return d;
}

void print_json_string(std::ostream& os, const std::string& s) {
  os << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') os << '\\' << c;
    else if (static_cast<unsigned char>(c) < 0x20) os << "\\u00" << "0123456789abcdef"[(c >> 4) & 15] << "0123456789abcdef"[c & 15];
    else os << c;
  }
  os << '"';
}

namespace {

void json_string(std::ostream& os, const std::string& s) { print_json_string(os, s); }

void json_names(std::ostream& os, const std::vector<std::string>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ',';
    json_string(os, v[i]);
  }
  os << ']';
}

// "stored_alt":["extra_delta"], only when some class is set.
void json_alt(std::ostream& os, const char* key, uint8_t mask) {
  if (!mask) return;
  os << ",\"" << key << "\":[";
  bool first = true;
  for (int c = 0; c <= static_cast<int>(WeightClass::Corrupt); ++c)
    if ((mask >> c) & 1) {
      os << (first ? "" : ",") << '"' << weight_class_name(static_cast<WeightClass>(c)) << '"';
      first = false;
    }
  os << ']';
}

}  // namespace

void print_json(std::ostream& os, const Observation& o) {
  os << "{\"step\":" << o.step << ",\"rank\":" << o.rank << ",\"op\":";
  json_string(os, o.op);
  os << ",\"status\":\"" << status_name(o.status) << "\"";
  if (!o.message.empty()) {
    os << ",\"message\":";
    json_string(os, o.message);
  }
  if (o.grads) {
    os << ",\"grads\":";
    json_names(os, *o.grads);
  }
  if (o.index >= 0) os << ",\"index\":" << o.index;
  os << ",\"active\":";
  json_names(os, o.active);
  os << ",\"disabled\":" << (o.disabled ? "true" : "false");
  os << ",\"optimizer\":{\"missing\":" << o.opt_missing << ",\"total\":" << o.opt_total << ",\"unregistered\":";
  json_names(os, o.opt_unregistered);
  os << "}";
  os << ",\"groups\":[";
  for (size_t i = 0; i < o.groups.size(); ++i) {
    os << (i ? "," : "") << "{\"name\":";
    json_string(os, o.groups[i].name);
    os << ",\"state\":\"" << sharded_state_name(o.groups[i].state) << "\",\"registered\":\""
       << (o.groups[i].state == ShardedState::Sharded ? "S" : "U") << "\"}";
  }
  os << "],\"params\":[";
  for (size_t i = 0; i < o.params.size(); ++i) {
    os << (i ? "," : "") << "{\"name\":";
    json_string(os, o.params[i].name);
    os << ",\"group\":";
    json_string(os, o.params[i].group);
    os << ",\"S.requires_grad\":" << (o.params[i].rg_s ? "true" : "false") << ",\"U.requires_grad\":"
       << (o.params[i].rg_u < 0 ? "null" : o.params[i].rg_u ? "true" : "false") << ",\"device\":\""
       << device_name(o.params[i].device) << "\",\"dtype\":\"" << dtype_name(o.params[i].dtype) << "\"}";
  }
  os << "],\"layers\":[";
  for (size_t i = 0; i < o.layers.size(); ++i) {
    os << (i ? "," : "") << "{\"name\":";
    json_string(os, o.layers[i].name);
    os << ",\"group\":";
    json_string(os, o.layers[i].group);
    os << ",\"merged\":";
    json_names(os, o.layers[i].merged);
    os << ",\"stored\":\"" << weight_class_name(o.layers[i].stored) << "\",\"registered\":\""
       << weight_class_name(o.layers[i].registered) << "\"";
    json_alt(os, "stored_alt", o.layers[i].stored_alt);
    json_alt(os, "registered_alt", o.layers[i].registered_alt);
    os << "}";
  }
  os << "],\"collectives\":[";
  for (size_t i = 0; i < o.collectives.size(); ++i) {
    os << (i ? "," : "") << "{\"op\":\"" << coll_op_name(o.collectives[i].op) << "\",\"group\":";
    json_string(os, o.collectives[i].group);
    os << ",\"count\":" << o.collectives[i].count;
    if (o.collectives[i].op == CollOp::Broadcast) os << ",\"dtype\":\"" << dtype_name(o.collectives[i].dtype) << "\"";
    os << ",\"parts\":{";
    for (size_t j = 0; j < o.collectives[i].parts.size(); ++j) {
      os << (j ? "," : "");
      json_string(os, o.collectives[i].parts[j].param);
      os << ":" << o.collectives[i].parts[j].numel;
    }
    os << "}}";
  }
  os << "]";
  if (!o.deltas.empty()) {
    os << ",\"deltas\":{";
    for (size_t i = 0; i < o.deltas.size(); ++i) {
      os << (i ? "," : "");
      json_string(os, o.deltas[i].adapter);
      os << ":\"" << weight_class_name(o.deltas[i].value) << "\"";
    }
    os << "}";
  }
  if (!o.saved.empty()) {
    os << ",\"saved\":[";
    for (size_t i = 0; i < o.saved.size(); ++i) {
      os << (i ? "," : "") << "{\"name\":";
      json_string(os, o.saved[i].name);
      os << ",\"rows\":" << o.saved[i].rows << ",\"full_rows\":" << o.saved[i].full_rows << ",\"dtype\":\""
         << dtype_name(o.saved[i].dtype) << "\"}";
    }
    os << "]";
  }
  if (!o.reload_diff.empty()) {
    os << ",\"reload_diff\":";
    json_names(os, o.reload_diff);
  }
  if (!o.reload_coincident.empty()) {
    os << ",\"reload_coincident\":";
    json_names(os, o.reload_coincident);
  }
  auto owners = [&](const char* key, const std::vector<OwnerBytes>& v) {
    os << ",\"" << key << "\":{";
    for (size_t i = 0; i < v.size(); ++i) {
      os << (i ? "," : "");
      json_string(os, v[i].owner);
      os << ":" << v[i].bytes;
    }
    os << "}";
  };
  owners("sharded_bytes", o.sharded_bytes);
  owners("peak_unsharded_bytes", o.peak_unsharded);
  os << "}";
}

namespace {

// Compact per-layer text: "lin0:[default]" only where something is merged or
// the stored weight is not exact; "-" when every layer is clean.
std::string layers_cell(const Observation& o) {
  std::string out;
  for (const auto& l : o.layers) {
    if (l.merged.empty() && l.stored == WeightClass::Exact && l.registered == WeightClass::Exact) continue;
    std::string m;
    for (size_t j = 0; j < l.merged.size(); ++j) m += (j ? "," : "") + l.merged[j];
    out += (out.empty() ? "" : " ") + l.name + ":[" + m + "]";
    if (l.stored != WeightClass::Exact) out += std::string("/S=") + weight_class_name(l.stored);
    if (l.registered != WeightClass::Exact) out += std::string("/reg=") + weight_class_name(l.registered);
  }
  return out.empty() ? "-" : out;
}

std::string groups_cell(const Observation& o) {
  std::string out;
  for (const auto& g : o.groups)
    out += (out.empty() ? "" : " ") + g.name + ":" + (g.state == ShardedState::Sharded ? "S" : "U");
  return out;
}

// Adapters whose shard requires grad, and those whose registered U (group
// unsharded now) disagrees with S.
std::string trainable_cell(const Scenario& s, const Observation& o) {
  std::vector<std::string> on;
  std::vector<std::string> drift;
  auto unsharded = [&](const std::string& g) {
    for (const auto& x : o.groups)
      if (x.name == g) return x.state == ShardedState::Unsharded;
    return false;
  };
  for (const auto& p : o.params) {
    std::string adapter = s.owner_of_param(p.name);  // from the declarations, not by splitting the name
    if (p.rg_s && std::find(on.begin(), on.end(), adapter) == on.end()) on.push_back(adapter);
    if (p.rg_u >= 0 && (p.rg_u != 0) != p.rg_s && unsharded(p.group) && std::find(drift.begin(), drift.end(), adapter) == drift.end())
      drift.push_back(adapter);
  }
  std::string out = names_set_text(on);
  if (!drift.empty()) out += " U!=S:" + names_set_text(drift);
  return out;
}

}  // namespace

std::string colls_cell(const Observation& o) {
  int ag = 0, rs = 0, bc = 0;
  int64_t agn = 0, rsn = 0, bcn = 0;
  for (const auto& c : o.collectives) {
    if (c.op == CollOp::AllGather) ++ag, agn += c.count;
    else if (c.op == CollOp::ReduceScatter) ++rs, rsn += c.count;
    else ++bc, bcn += c.count;
  }
  if (!ag && !rs && !bc) return "-";
  std::string out;
  if (ag) out += "ag " + std::to_string(ag) + "x" + std::to_string(agn);
  if (rs) out += std::string(out.empty() ? "" : " ") + "rs " + std::to_string(rs) + "x" + std::to_string(rsn);
  if (bc) out += std::string(out.empty() ? "" : " ") + "bc " + std::to_string(bc) + "x" + std::to_string(bcn);
  return out;
}

// Adapter parameters not on cpu/fp32, grouped by placement: "meta/bf16:{a} cpu/bf16:{b}".
std::string placement_cell(const Scenario& s, const Observation& o) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by;
  for (const auto& p : o.params) {
    if (p.device == Device::Cpu && p.dtype == DType::F32) continue;
    std::string key = std::string(device_name(p.device)) + "/" + dtype_name(p.dtype);
    std::string adapter = s.owner_of_param(p.name);
    auto it = std::find_if(by.begin(), by.end(), [&](const auto& e) { return e.first == key; });
    if (it == by.end()) it = by.insert(by.end(), {key, {}});
    if (std::find(it->second.begin(), it->second.end(), adapter) == it->second.end()) it->second.push_back(adapter);
  }
  std::string out;
  for (const auto& [k, v] : by) out += (out.empty() ? "" : " ") + k + ":" + names_set_text(v);
  return out.empty() ? "-" : out;
}

// What delta_weight computed and what save_adapters wrote, when the op did.
std::string detail_cell(const Observation& o) {
  std::string out;
  for (const auto& d : o.deltas) out += (out.empty() ? "delta " : " ") + d.adapter + ":" + weight_class_name(d.value);
  if (!o.saved.empty()) {
    int64_t rows = 0, full = 0;
    for (const auto& sv : o.saved) rows += sv.rows, full += sv.full_rows;
    out += (out.empty() ? "" : " ") + std::string("saved ") + std::to_string(o.saved.size()) + " tensors, " +
           std::to_string(rows) + "/" + std::to_string(full) + " rows";
  }
  if (!o.reload_diff.empty()) out += (out.empty() ? "" : " ") + std::string("reload differs: ") + names_set_text(o.reload_diff);
  return out.empty() ? "-" : out;
}

std::string status_cell(const Observation& o) {
  std::string s = status_name(o.status);
  if (o.status == Status::KeyError) s += " " + std::to_string(o.index) + " (" + std::to_string(o.opt_missing) + "/" + std::to_string(o.opt_total) + ")";
  return s;
}

void print_table(std::ostream& os, const Scenario& s, const std::vector<Observation>& obs) {
  bool placed = false, detail = false;
  for (const auto& o : obs) {
    placed = placed || placement_cell(s, o) != "-";
    detail = detail || detail_cell(o) != "-";
  }
  std::vector<std::string> head = {"step", "rank", "op", "status", "grads", "S.requires_grad", "groups", "merged", "collectives"};
  if (placed) head.push_back("placement");
  if (detail) head.push_back("detail");
  std::vector<std::vector<std::string>> rows;
  for (const auto& o : obs) {
    rows.push_back({std::to_string(o.step), std::to_string(o.rank), o.op, status_cell(o),
                    o.grads ? names_set_text(*o.grads) : "", trainable_cell(s, o), groups_cell(o), layers_cell(o),
                    colls_cell(o)});
    if (placed) rows.back().push_back(placement_cell(s, o));
    if (detail) rows.back().push_back(detail_cell(o));
  }
  rows.insert(rows.begin(), head);
  print_aligned(os, rows);
  for (const auto& o : obs)
    if (!o.message.empty() && o.status != Status::Ok)
      os << "  step " << o.step << " rank " << o.rank << ": " << o.message << "\n";
}

}  // namespace fsdpsim
