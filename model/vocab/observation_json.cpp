#include "model/vocab/observation_json.hpp"

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
    out.push_back(typed(v.items[i], Kind::String, path + "[" + std::to_string(i) + "]").text);
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

std::vector<OwnerBytes> owner_bytes(const JsonValue& obj, const std::string& key) {
  std::vector<OwnerBytes> out;
  each_member(need(obj, key, "", Kind::Object), key, Kind::Number,
              [&](const std::string& owner, const JsonValue& x) { out.push_back({owner, integer(x, key + "." + owner)}); });
  return out;
}

// Each element of an array field as an object, with its path "key[i].".
template <typename F>
void each_object(const JsonValue& obj, const std::string& key, bool required, F f) {
  const JsonValue* arr = member(obj, key, "", required);
  if (!arr) return;
  typed(*arr, Kind::Array, key);
  for (size_t i = 0; i < arr->items.size(); ++i) {
    std::string path = key + "[" + std::to_string(i) + "]";
    f(typed(arr->items[i], Kind::Object, path), path + ".");
  }
}

constexpr int kStatuses = kStatusCount;
constexpr int kWeightClasses = static_cast<int>(WeightClass::Corrupt) + 1;
constexpr int kCollOps = static_cast<int>(CollOp::Broadcast) + 1;
constexpr int kShardedStates = 2;
constexpr int kDevices = 2;
constexpr int kDTypes = 2;

void read(const JsonValue& v, Observation& o) {
  typed(v, Kind::Object, "observation");
  o.step = static_cast<int>(need_int(v, "step", ""));
  o.rank = static_cast<int>(need_int(v, "rank", ""));
  o.op = need_str(v, "op", "");
  o.status = need_enum<Status>(v, "status", "", kStatuses, status_name);
  if (const JsonValue* m = member(v, "message", "", false)) o.message = typed(*m, Kind::String, "message").text;
  if (const JsonValue* g = member(v, "grads", "", false)) o.grads = names(*g, "grads");
  if (const JsonValue* x = member(v, "index", "", false)) o.index = integer(*x, "index");
  o.active = names(*member(v, "active", "", true), "active");
  o.disabled = need(v, "disabled", "", Kind::Bool).boolean;
  const JsonValue& opt = need(v, "optimizer", "", Kind::Object);
  o.opt_missing = static_cast<int>(need_int(opt, "missing", "optimizer."));
  o.opt_total = static_cast<int>(need_int(opt, "total", "optimizer."));
  o.opt_unregistered = names(*member(opt, "unregistered", "optimizer.", true), "optimizer.unregistered");
  each_object(v, "groups", true, [&](const JsonValue& g, const std::string& p) {
    o.groups.push_back({need_str(g, "name", p), need_enum<ShardedState>(g, "state", p, kShardedStates, sharded_state_name)});
  });
  each_object(v, "params", true, [&](const JsonValue& x, const std::string& p) {
    ParamObs po;
    po.name = need_str(x, "name", p);
    po.group = need_str(x, "group", p);
    po.rg_s = need(x, "S.requires_grad", p, Kind::Bool).boolean;
    const JsonValue& u = *member(x, "U.requires_grad", p, true);
    po.rg_u = u.kind == Kind::Null ? -1 : typed(u, Kind::Bool, p + "U.requires_grad").boolean ? 1 : 0;
    po.device = need_enum<Device>(x, "device", p, kDevices, device_name);
    po.dtype = need_enum<DType>(x, "dtype", p, kDTypes, dtype_name);
    o.params.push_back(po);
  });
  each_object(v, "layers", true, [&](const JsonValue& x, const std::string& p) {
    LayerObs l;
    l.name = need_str(x, "name", p);
    l.group = need_str(x, "group", p);
    l.merged = names(*member(x, "merged", p, true), p + "merged");
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
    o.layers.push_back(l);
  });
  each_object(v, "collectives", true, [&](const JsonValue& x, const std::string& p) {
    Collective c;
    c.op = need_enum<CollOp>(x, "op", p, kCollOps, coll_op_name);
    c.group = need_str(x, "group", p);
    c.count = need_int(x, "count", p);
    if (x.find("dtype")) c.dtype = need_enum<DType>(x, "dtype", p, kDTypes, dtype_name);
    each_member(need(x, "parts", p, Kind::Object), p + "parts", Kind::Number, [&](const std::string& k, const JsonValue& n) {
      c.parts.push_back({k, integer(n, p + "parts." + k)});
    });
    o.collectives.push_back(c);
  });
  if (const JsonValue* d = member(v, "deltas", "", false))
    each_member(*d, "deltas", Kind::String, [&](const std::string& k, const JsonValue& w) {
      o.deltas.push_back({k, enum_of<WeightClass>(w.text, "deltas." + k, kWeightClasses, weight_class_name)});
    });
  each_object(v, "saved", false, [&](const JsonValue& x, const std::string& p) {
    o.saved.push_back({need_str(x, "name", p), need_int(x, "rows", p), need_int(x, "full_rows", p),
                       need_enum<DType>(x, "dtype", p, kDTypes, dtype_name)});
  });
  if (const JsonValue* r = member(v, "reload_diff", "", false)) o.reload_diff = names(*r, "reload_diff");
  if (const JsonValue* r = member(v, "reload_coincident", "", false)) o.reload_coincident = names(*r, "reload_coincident");
  o.sharded_bytes = owner_bytes(v, "sharded_bytes");
  o.peak_unsharded = owner_bytes(v, "peak_unsharded_bytes");
}

}  // namespace

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
