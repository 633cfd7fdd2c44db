#include "model/vocab/observation_json.hpp"

#include <fmt/format.h>

#include <cstring>

namespace fsdpsim {
namespace {

struct Bad {
  std::string what;
};

using Kind = JsonValue::Kind;

const JsonValue& typed(const JsonValue& v, Kind k, const std::string& path) {
  if (v.kind != k) throw Bad{path + ": expected " + json_kind_name(k) + ", got " + json_kind_name(v.kind)};
  return v;
}

const JsonValue* member(const JsonValue& obj, const std::string& key, const std::string& path, bool required) {
  const JsonValue* v = obj.find(key);
  if (!v && required) throw Bad{"missing field '" + path + key + "'"};
  return v;
}

const JsonValue& need(const JsonValue& obj, const std::string& key, const std::string& path, Kind k) {
  return typed(*member(obj, key, path, true), k, path + key);
}

int64_t integer(const JsonValue& v, const std::string& path) {
  typed(v, Kind::Number, path);
  if (!v.integral) throw Bad{path + ": expected an integer"};
  return v.integer;
}

int64_t need_int(const JsonValue& obj, const std::string& key, const std::string& path) {
  return integer(*member(obj, key, path, true), path + key);
}

std::string need_str(const JsonValue& obj, const std::string& key, const std::string& path) {
  return need(obj, key, path, Kind::String).text;
}

std::vector<std::string> names(const JsonValue& v, const std::string& path) {
  std::vector<std::string> out;
  for (size_t i = 0; i < typed(v, Kind::Array, path).items.size(); ++i)
    out.push_back(typed(v.items[i], Kind::String, fmt::format("{}[{}]", path, i)).text);
  return out;
}

// A name from one of the vocabulary's name tables.
template <typename E, typename NameOf>
E enum_of(const std::string& s, const std::string& path, int count, NameOf name_of) {
  std::string all;
  for (int i = 0; i < count; ++i) {
    if (s == name_of(static_cast<E>(i))) return static_cast<E>(i);
    all += std::string(i ? ", " : "") + name_of(static_cast<E>(i));
  }
  throw Bad{path + ": expected one of " + all + ", got '" + s + "'"};
}

template <typename E, typename NameOf>
E need_enum(const JsonValue& obj, const std::string& key, const std::string& path, int count, NameOf name_of) {
  return enum_of<E>(need_str(obj, key, path), path + key, count, name_of);
}

// {"a":640,"base":1680}: names and integers in order.
template <typename F>
void each_member(const JsonValue& v, const std::string& path, Kind k, F f) {
  for (const auto& [key, x] : typed(v, Kind::Object, path).members) f(key, typed(x, k, path + "." + key));
}

constexpr int kStatuses = kStatusCount;
constexpr int kWeightClasses = kWeightClassCount;
constexpr int kCollOps = static_cast<int>(CollOp::AllReduce) + 1;
constexpr int kShardedStates = 2;
constexpr int kDevices = 2;
constexpr int kDTypes = 2;
// A collective's wire dtype may also be uint8 (a group of mixed dtypes packs bytes).
constexpr int kWireDTypes = 3;

// Each value type's JSON form, read back. `path` names the value in errors.
void read_value(const JsonValue& v, const std::string& path, int& out) { out = static_cast<int>(integer(v, path)); }
void read_value(const JsonValue& v, const std::string& path, int64_t& out) { out = integer(v, path); }
void read_value(const JsonValue& v, const std::string& path, bool& out) { out = typed(v, Kind::Bool, path).boolean; }
void read_value(const JsonValue& v, const std::string& path, std::string& out) { out = typed(v, Kind::String, path).text; }
void read_value(const JsonValue& v, const std::string& path, Status& out) {
  out = enum_of<Status>(typed(v, Kind::String, path).text, path, kStatuses, status_name);
}
void read_value(const JsonValue& v, const std::string& path, std::vector<Name>& out) {
  out.clear();
  for (const auto& n : names(v, path)) out.emplace_back(n);
}
void read_value(const JsonValue& v, const std::string& path, std::optional<std::vector<Name>>& out) {
  read_value(v, path, out.emplace());
}
// Lists of objects: "key[i]." prefixes each member's path.
template <typename T, typename F>
void read_objects(const JsonValue& v, const std::string& path, std::vector<T>& out, F one) {
  for (size_t i = 0; i < typed(v, Kind::Array, path).items.size(); ++i) {
    std::string p = fmt::format("{}[{}].", path, i);
    out.push_back(one(typed(v.items[i], Kind::Object, p.substr(0, p.size() - 1)), p));
  }
}
void read_value(const JsonValue& v, const std::string& path, std::vector<GroupObs>& out) {
  read_objects(v, path, out, [](const JsonValue& g, const std::string& p) {
    return GroupObs{Name(need_str(g, "name", p)), need_enum<ShardedState>(g, "state", p, kShardedStates, sharded_state_name)};
  });
}
void read_value(const JsonValue& v, const std::string& path, std::vector<ParamObs>& out) {
  read_objects(v, path, out, [](const JsonValue& x, const std::string& p) {
    ParamObs po;
    po.name = Name(need_str(x, "name", p));
    po.group = Name(need_str(x, "group", p));
    po.rg_s = need(x, "S.requires_grad", p, Kind::Bool).boolean;
    const JsonValue& u = *member(x, "U.requires_grad", p, true);
    po.rg_u = u.kind == Kind::Null ? -1 : typed(u, Kind::Bool, p + "U.requires_grad").boolean ? 1 : 0;
    po.device = need_enum<Device>(x, "device", p, kDevices, device_name);
    po.dtype = need_enum<DType>(x, "dtype", p, kDTypes, dtype_name);
    return po;
  });
}
void read_value(const JsonValue& v, const std::string& path, std::vector<LayerObs>& out) {
  read_objects(v, path, out, [](const JsonValue& x, const std::string& p) {
    LayerObs l;
    l.name = Name(need_str(x, "name", p));
    l.group = Name(need_str(x, "group", p));
    read_value(*member(x, "merged", p, true), p + "merged", l.merged);
    l.stored = need_enum<WeightClass>(x, "stored", p, kWeightClasses, weight_class_name);
    l.registered = need_enum<WeightClass>(x, "registered", p, kWeightClasses, weight_class_name);
    auto alt = [&](const char* key) {
      uint8_t m = 0;
      if (const JsonValue* a = member(x, key, p, false))
        for (const auto& n : names(*a, p + key))
          m |= static_cast<uint8_t>(1u << static_cast<int>(enum_of<WeightClass>(n, p + key, kWeightClasses, weight_class_name)));
      return m;
    };
    l.stored_alt = alt("stored_alt");
    l.registered_alt = alt("registered_alt");
    return l;
  });
}
void read_value(const JsonValue& v, const std::string& path, std::vector<Collective>& out) {
  read_objects(v, path, out, [](const JsonValue& x, const std::string& p) {
    Collective c;
    c.op = need_enum<CollOp>(x, "op", p, kCollOps, coll_op_name);
    c.group = Name(need_str(x, "group", p));
    c.count = need_int(x, "count", p);
    if (x.find("dtype")) c.dtype = need_enum<DType>(x, "dtype", p, kWireDTypes, dtype_name);
    each_member(need(x, "parts", p, Kind::Object), p + "parts", Kind::Number, [&](const std::string& k, const JsonValue& n) {
      c.parts.push_back({Name(k), integer(n, p + "parts." + k)});
    });
    return c;
  });
}
void read_value(const JsonValue& v, const std::string& path, std::vector<DeltaObs>& out) {
  each_member(v, path, Kind::String, [&](const std::string& k, const JsonValue& w) {
    out.push_back({Name(k), enum_of<WeightClass>(w.text, path + "." + k, kWeightClasses, weight_class_name)});
  });
}
void read_value(const JsonValue& v, const std::string& path, std::vector<SavedObs>& out) {
  read_objects(v, path, out, [](const JsonValue& x, const std::string& p) {
    return SavedObs{Name(need_str(x, "name", p)), need_int(x, "rows", p), need_int(x, "full_rows", p),
                    need_enum<DType>(x, "dtype", p, kDTypes, dtype_name)};
  });
}
void read_value(const JsonValue& v, const std::string& path, std::vector<OwnerBytes>& out) {
  each_member(v, path, Kind::Number, [&](const std::string& owner, const JsonValue& x) {
    out.push_back({Name(owner), integer(x, path + "." + owner)});
  });
}

// The fields in FSDPSIM_OBSERVATION_FIELDS' order: those print_json always
// writes are required, the others keep their defaults when absent.
void read(const JsonValue& v, Observation& o) {
  typed(v, Kind::Object, "observation");
  for_each_field(o, [&](const FieldInfo& f, auto& field) {
    const JsonValue* in = &v;
    std::string prefix;
    if (f.parent) {
      in = &need(v, f.parent, "", Kind::Object);
      prefix = std::string(f.parent) + ".";
    }
    if (const JsonValue* x = member(*in, f.key, prefix, !(f.flags & kOmitDefault))) read_value(*x, prefix + f.key, field);
  });
}

// Each value type's JSON form, written.
// A JSON number: fmt's integer text, written without a temporary string.
void write_number(std::ostream& os, int64_t v) {
  const fmt::format_int text(v);
  os.write(text.data(), static_cast<std::streamsize>(text.size()));
}
void write_value(std::ostream& os, int v) { write_number(os, v); }
void write_value(std::ostream& os, int64_t v) { write_number(os, v); }
void write_value(std::ostream& os, bool v) { os << (v ? "true" : "false"); }
void write_value(std::ostream& os, const std::string& v) { print_json_string(os, v); }
void write_value(std::ostream& os, Status v) { os << '"' << status_name(v) << '"'; }
void write_value(std::ostream& os, const std::vector<Name>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ',';
    print_json_string(os, v[i]);
  }
  os << ']';
}
void write_value(std::ostream& os, const std::optional<std::vector<Name>>& v) {
  if (v) write_value(os, *v);
  else os << "null";
}
// "stored_alt":["extra_delta"], only when some class is set.
void write_alt(std::ostream& os, const char* key, uint8_t mask) {
  if (!mask) return;
  os << ",\"" << key << "\":[";
  bool first = true;
  for (int c = 0; c < kWeightClasses; ++c)
    if ((mask >> c) & 1) {
      os << (first ? "" : ",") << '"' << weight_class_name(static_cast<WeightClass>(c)) << '"';
      first = false;
    }
  os << ']';
}
void write_one(std::ostream& os, const GroupObs& g) {
  os << "{\"name\":";
  print_json_string(os, g.name);
  os << ",\"state\":\"" << sharded_state_name(g.state) << "\",\"registered\":\""
     << (g.state == ShardedState::Sharded ? "S" : "U") << "\"}";
}
void write_one(std::ostream& os, const ParamObs& p) {
  os << "{\"name\":";
  print_json_string(os, p.name);
  os << ",\"group\":";
  print_json_string(os, p.group);
  os << ",\"S.requires_grad\":" << (p.rg_s ? "true" : "false") << ",\"U.requires_grad\":"
     << (p.rg_u < 0 ? "null" : p.rg_u ? "true" : "false") << ",\"device\":\"" << device_name(p.device)
     << "\",\"dtype\":\"" << dtype_name(p.dtype) << "\"}";
}
void write_one(std::ostream& os, const LayerObs& l) {
  os << "{\"name\":";
  print_json_string(os, l.name);
  os << ",\"group\":";
  print_json_string(os, l.group);
  os << ",\"merged\":";
  write_value(os, l.merged);
  os << ",\"stored\":\"" << weight_class_name(l.stored) << "\",\"registered\":\"" << weight_class_name(l.registered) << "\"";
  write_alt(os, "stored_alt", l.stored_alt);
  write_alt(os, "registered_alt", l.registered_alt);
  os << "}";
}
void write_one(std::ostream& os, const Collective& c) {
  os << "{\"op\":\"" << coll_op_name(c.op) << "\",\"group\":";
  print_json_string(os, c.group);
  os << ",\"count\":";
  write_number(os, c.count);
  if (c.op == CollOp::Broadcast || c.dtype != DType::F32) os << ",\"dtype\":\"" << dtype_name(c.dtype) << "\"";
  os << ",\"parts\":{";
  for (size_t j = 0; j < c.parts.size(); ++j) {
    os << (j ? "," : "");
    print_json_string(os, c.parts[j].param);
    os << ':';
    write_number(os, c.parts[j].numel);
  }
  os << "}}";
}
void write_one(std::ostream& os, const SavedObs& s) {
  os << "{\"name\":";
  print_json_string(os, s.name);
  os << ",\"rows\":";
  write_number(os, s.rows);
  os << ",\"full_rows\":";
  write_number(os, s.full_rows);
  os << ",\"dtype\":\"" << dtype_name(s.dtype) << "\"}";
}
template <typename T>
void write_value(std::ostream& os, const std::vector<T>& v) {  // a list of objects
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) os << ',';
    write_one(os, v[i]);
  }
  os << ']';
}
// Name-keyed lists as one object: {"a":"exact"}, {"a":640,"base":1680}.
void write_value(std::ostream& os, const std::vector<DeltaObs>& v) {
  os << '{';
  for (size_t i = 0; i < v.size(); ++i) {
    os << (i ? "," : "");
    print_json_string(os, v[i].adapter);
    os << ":\"" << weight_class_name(v[i].value) << "\"";
  }
  os << '}';
}
void write_value(std::ostream& os, const std::vector<OwnerBytes>& v) {
  os << '{';
  for (size_t i = 0; i < v.size(); ++i) {
    os << (i ? "," : "");
    print_json_string(os, v[i].owner);
    os << ':';
    write_number(os, v[i].bytes);
  }
  os << '}';
}

}  // namespace

void print_json(std::ostream& os, const Observation& o) {
  static const Observation fresh{};
  const char* open = nullptr;  // the nested object being written
  bool first = true;
  os << '{';
  for_each_field_pair(o, fresh, [&](const FieldInfo& f, const auto& x, const auto& d) {
    if ((f.flags & kOmitDefault) && x == d) return;
    if (open && (!f.parent || std::strcmp(open, f.parent) != 0)) {
      os << '}';
      open = nullptr;
    }
    if (f.parent && !open) {
      os << (first ? "" : ",") << '"' << f.parent << "\":{";
      open = f.parent;
      first = true;
    }
    os << (first ? "" : ",") << '"' << f.key << "\":";
    first = false;
    write_value(os, x);
  });
  if (open) os << '}';
  os << '}';
}

bool observation_from_json(const JsonValue& v, Observation* out, std::string* error) {
  Observation o;
  try {
    read(v, o);
  } catch (const Bad& b) {
    if (error) *error = b.what;
    return false;
  }
  *out = std::move(o);
  return true;
}

bool parse_observation_json(const std::string& line, Observation* out, std::string* error) {
  JsonValue v;
  std::string err;
  if (!parse_json(line, &v, &err)) {
    if (error) *error = "not JSON: " + err;
    return false;
  }
  return observation_from_json(v, out, error);
}

}  // namespace fsdpsim
