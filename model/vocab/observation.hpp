// The observation of one op on one rank: the only thing the model and the
// real backend exchange. Printed as an aligned table or as JSON lines.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "model/vocab/name.hpp"
#include "model/vocab/placement.hpp"
#include "model/vocab/scenario.hpp"

namespace fsdpsim {

// Exception: an exception of any other type, reported with its type and text
// (the upstream backend never maps one to the nearest known status).
// AssertionError last: the binary codec's existing values (and trace hashes) stay as they were.
enum class Status : uint8_t { Ok, NoGradFn, KeyError, ShapeError, ValueError, Hang, Mismatch, NotRun, Exception, AssertionError };
constexpr int kStatusCount = static_cast<int>(Status::AssertionError) + 1;
const char* status_name(Status s);
bool status_from_name(const std::string& s, Status* out);

// Upstream error texts the observations carry verbatim.
extern const char* const kNoGradFnMessage;  // torch autograd, loss without grad_fn
// A reduce in FSDPParamGroup.post_backward on a group whose lazy init never set _orig_dtype.
extern const char* const kNoOrigDtype;
// torch's grad setter (torch/csrc/autograd/python_variable.cpp::THPVariable_set_grad) refusing a
// gradient of dtype `got` for a tensor of the other of fp32 and bf16 (its grad_dtype), as measured.
std::string grad_dtype_refused_message(DType got);

// What the stored base weight holds relative to W0 + sum of merged deltas. Unjudged: a value
// backend whose values cannot settle it (a peer holds no rows of a factor, a meta tensor); no
// opinion, never agreement (counted apart by the comparison, skipped by the spec). Last: the
// binary codec's existing values stay as they were.
enum class WeightClass : uint8_t { Exact, MissingDelta, ExtraDelta, Corrupt, Unjudged };
constexpr int kWeightClassCount = static_cast<int>(WeightClass::Unjudged) + 1;
const char* weight_class_name(WeightClass w);
bool weight_class_from_name(const std::string& s, WeightClass* out);

enum class ShardedState : uint8_t { Sharded, Unsharded };
const char* sharded_state_name(ShardedState s);

// AllReduce: DTensor's redistribution of a Partial tensor to Replicate (torch
// distributed/tensor/placement_types.py::Partial._reduce_value), e.g. a delta made with r >= world.
enum class CollOp : uint8_t { AllGather, ReduceScatter, Broadcast, AllReduce };
const char* coll_op_name(CollOp c);

// One parameter packed into a collective and the elements it takes there.
struct CollPart {
  Name param;
  int64_t numel = 0;
  bool operator==(const CollPart& o) const { return param == o.param && numel == o.numel; }
};

struct Collective {
  CollOp op = CollOp::AllGather;
  Name group;  // broadcast: the parameter's state-dict key
  int64_t count = 0;  // elements this rank contributes (padded shard numel); broadcast: full numel
  DType dtype = DType::F32;
  std::vector<CollPart> parts;  // in packing order; sums to count
  bool operator==(const Collective& o) const {
    return op == o.op && group == o.group && count == o.count && dtype == o.dtype && parts == o.parts;
  }
};
// "all_gather(root, 212)"; a broadcast names its dtype: "broadcast(lin0.lora_A.b, 64 bf16)".
std::string collective_text(const Collective& c);

// What one rank waits in when collectives fail to pair up.
struct PendingCollective {
  bool waiting = false;  // false: the rank issues no matching collective
  Collective coll;
  int step = 0;
  std::vector<std::string> members;  // the parameters packed into it
};
// "rank 0 in all_gather(lin0, 112) at step 5; rank 1 issues no matching
// collective". When every waiting rank issues the same op, group and size but
// packs different parameters, each lists them ("... of lin0.lora_A.a,...").
// The model's simulator and the real backend both word failures with this.
std::string describe_pending(const std::vector<PendingCollective>& heads);

struct GroupObs {
  Name name;
  ShardedState state = ShardedState::Sharded;
  bool operator==(const GroupObs& o) const { return name == o.name && state == o.state; }
};

// requires_grad of one adapter parameter on the shard S and the unsharded
// copy U, and where S lives (meta before a ram-efficient prepare on ranks > 0).
struct ParamObs {
  Name name;   // "lin0.lora_A.other"
  Name group;  // FSDP group managing it; "" when none does
  bool rg_s = false;
  int8_t rg_u = -1;   // -1: no U (group never unsharded, or parameter not managed)
  Device device = Device::Cpu;
  DType dtype = DType::F32;
  bool operator==(const ParamObs& o) const {
    return name == o.name && group == o.group && rg_s == o.rg_s && rg_u == o.rg_u && device == o.device &&
           dtype == o.dtype;
  }
};

// delta_weight: one active adapter's delta against the one computed from the
// full (gathered) A and B.
struct DeltaObs {
  Name adapter;
  WeightClass value = WeightClass::Exact;  // exact or corrupt
  bool operator==(const DeltaObs& o) const { return adapter == o.adapter && value == o.value; }
};

// save_adapters: one tensor of the adapter state dict this rank computed.
struct SavedObs {
  Name name;  // "lin0.lora_A.b"
  int64_t rows = 0;  // rows it holds
  int64_t full_rows = 0;
  DType dtype = DType::F32;
  bool operator==(const SavedObs& o) const {
    return name == o.name && rows == o.rows && full_rows == o.full_rows && dtype == o.dtype;
  }
};

// Bytes attributed to one owner: an adapter's name, or "base".
struct OwnerBytes {
  Name owner;
  int64_t bytes = 0;
  bool operator==(const OwnerBytes& o) const { return owner == o.owner && bytes == o.bytes; }
};

struct LayerObs {
  Name name;
  Name group;                // FSDP group managing the layer's base weight
  std::vector<Name> merged;  // LIFO order, oldest first
  WeightClass stored = WeightClass::Exact;      // the shard S
  WeightClass registered = WeightClass::Exact;  // whatever object the module holds now
  // Value backends only: the other classes the values fit as well (bit per WeightClass), when a
  // delta in play is zero on these rows. Not compared: see reconcile_value_blind (sim/core/value_blind.hpp).
  uint8_t stored_alt = 0, registered_alt = 0;
  bool operator==(const LayerObs& o) const {
    return name == o.name && group == o.group && merged == o.merged && stored == o.stored && registered == o.registered;
  }
};

// The one list of an observation's fields, in printing order. Every codec
// (the struct below, equality, observation_diff, print_json and the JSON
// reader in observation_json.cpp, the binary form a real rank sends its
// observer in, the trace hash) walks this list through for_each_field, so a
// field is added here and in its value type's codecs, nowhere else.
//   X(type, member, default, json parent or nullptr, json key, diff label, flags)
// kOmitDefault: left out of the JSON when it holds its default. kNotCompared:
// value backends only, settled by reconcile_value_blind (sim/core/value_blind.hpp),
// so neither equality nor the diff looks at it.
#define FSDPSIM_OBSERVATION_FIELDS(X)                                                                    \
  X(int, step, 0, nullptr, "step", "step", 0)                                                            \
  X(int, rank, 0, nullptr, "rank", "rank", 0)                                                            \
  X(std::string, op, , nullptr, "op", "op", 0)                         /* canonical op text */           \
  X(Status, status, Status::Ok, nullptr, "status", "status", 0)                                          \
  X(std::string, message, , nullptr, "message", "message", kOmitDefault | kEvidence)                     \
  /* training ops: adapters whose shards got gradients */                                                \
  X(std::optional<std::vector<Name>>, grads, , nullptr, "grads", "grads", kOmitDefault)           \
  /* key_error: first optimizer index not registered */                                                  \
  X(int64_t, index, -1, nullptr, "index", "index", kOmitDefault)                                         \
  X(std::vector<Name>, active, , nullptr, "active", "active", 0) /* BaseTuner.active_adapters */  \
  X(bool, disabled, false, nullptr, "disabled", "disabled", 0)          /* inside disable_adapter() */   \
  /* optimizer params not currently registered, of all, and their names */                              \
  X(int, opt_missing, 0, "optimizer", "missing", "optimizer_missing", 0)                                 \
  X(int, opt_total, 0, "optimizer", "total", "optimizer_total", 0)                                       \
  X(std::vector<Name>, opt_unregistered, , "optimizer", "unregistered", "optimizer_unregistered", 0) \
  X(std::vector<GroupObs>, groups, , nullptr, "groups", "group", 0)                                      \
  X(std::vector<ParamObs>, params, , nullptr, "params", "param", 0)                                      \
  X(std::vector<LayerObs>, layers, , nullptr, "layers", "layer", 0)                                      \
  X(std::vector<Collective>, collectives, , nullptr, "collectives", "collectives", 0)                    \
  X(std::vector<DeltaObs>, deltas, , nullptr, "deltas", "deltas", kOmitDefault)     /* delta_weight */   \
  X(std::vector<SavedObs>, saved, , nullptr, "saved", "saved", kOmitDefault)        /* save_adapters */  \
  /* load_adapters: parameters whose values differ from the saved ones */                                \
  X(std::vector<Name>, reload_diff, , nullptr, "reload_diff", "reload_diff", kOmitDefault)        \
  /* value backends: reloaded from another rank's rows whose values equal this rank's saved ones */      \
  X(std::vector<Name>, reload_coincident, , nullptr, "reload_coincident", "reload_coincident",    \
    kOmitDefault | kNotCompared)                                                                         \
  /* unmanaged adapter parameters (whole replicas on every rank) whose values differ between ranks */     \
  X(std::vector<Name>, replica_diff, , nullptr, "replica_diff", "replica_diff", kOmitDefault)     \
  /* value backends: unmanaged replicas an AdamW step moved whose values still equal every peer's */  \
  X(std::vector<Name>, replica_coincident, , nullptr, "replica_coincident", "replica_coincident",  \
    kOmitDefault | kNotCompared)                                                                         \
  /* memory: sharded parameters held after the op, and unsharded copies alive at its peak, per owner */  \
  X(std::vector<OwnerBytes>, sharded_bytes, , nullptr, "sharded_bytes", "sharded_bytes", 0)              \
  X(std::vector<OwnerBytes>, peak_unsharded, , nullptr, "peak_unsharded_bytes", "peak_unsharded", 0)

// What for_each_field passes beside each field.
struct FieldInfo {
  const char* parent;  // the JSON object the field sits in ("optimizer"), nullptr at top level
  const char* key;     // its JSON key
  const char* label;   // its name in observation_diff ("param" for "param[3]")
  int flags;
};
// kEvidence: a text compared up to kGlooSaid; what follows is the upstream pool's evidence.
constexpr int kOmitDefault = 1, kNotCompared = 2, kEvidence = 4;

// Between a hang's or mismatch's words, which the model shares, and what gloo said when the
// upstream pool let the collective through (real_backend/upstream/fsdpsim_upstream/probe.py's
// GLOO_SAID): gloo's exception, abort or timeout text, per rank, which no model predicts.
inline constexpr char kGlooSaid[] = " | gloo: ";
// The message up to kGlooSaid: what the backends compare and the findings quote. Inline: the
// torch-free UBSan test links observation_binary.cpp (the hash) without observation.cpp.
inline std::string message_words(const std::string& message) {
  const size_t at = message.find(kGlooSaid);
  return at == std::string::npos ? message : message.substr(0, at);
}

struct Observation {
#define FSDPSIM_DECLARE_FIELD(type, member, init, parent, key, label, flags) type member{init};
  FSDPSIM_OBSERVATION_FIELDS(FSDPSIM_DECLARE_FIELD)
#undef FSDPSIM_DECLARE_FIELD

  bool operator==(const Observation& o) const;
};

// Calls f(info, field) for every field of `o` in list order; `o` may be const.
template <typename O, typename F>
void for_each_field(O& o, F&& f) {
#define FSDPSIM_VISIT_FIELD(type, member, init, parent, key, label, flags) \
  f(FieldInfo{parent, key, label, flags}, o.member);
  FSDPSIM_OBSERVATION_FIELDS(FSDPSIM_VISIT_FIELD)
#undef FSDPSIM_VISIT_FIELD
}
// The same over two observations at once: f(info, a.field, b.field).
template <typename A, typename B, typename F>
void for_each_field_pair(A& a, B& b, F&& f) {
#define FSDPSIM_VISIT_PAIR(type, member, init, parent, key, label, flags) \
  f(FieldInfo{parent, key, label, flags}, a.member, b.member);
  FSDPSIM_OBSERVATION_FIELDS(FSDPSIM_VISIT_PAIR)
#undef FSDPSIM_VISIT_PAIR
}

// Field-by-field difference, empty when equal: "grads: {other} vs {}".
std::vector<std::string> observation_diff(const Observation& a, const Observation& b);

std::string names_set_text(const std::vector<std::string>& names);  // "{a,b}"
std::string names_set_text(const std::vector<Name>& names);
std::string owner_bytes_text(const std::vector<OwnerBytes>& v);  // "a:640 base:1680"

void print_json(std::ostream& os, const Observation& o);
void print_json_string(std::ostream& os, const std::string& s);  // quoted, with JSON escapes  // one line, no trailing newline
// One row per observation; `s` names each parameter's adapter (see Scenario::owner_of_param).
// width > 0: cells cut to fit that many columns (print_fitted), with a line saying so.
void print_table(std::ostream& os, const Scenario& s, const std::vector<Observation>& obs, size_t width = 0);

// Cells of print_table's columns, shared with the HTML timeline (sim/report/report_html.cpp):
// "ag 2x547 rs 2x208" ("-" when none); placements other than cpu/fp32; what
// delta_weight and save_adapters computed ("-" when nothing); "key_error 0 (2/4)".
std::string colls_cell(const Observation& o);
std::string placement_cell(const Scenario& s, const Observation& o);
std::string detail_cell(const Observation& o);
std::string status_cell(const Observation& o);

}  // namespace fsdpsim
