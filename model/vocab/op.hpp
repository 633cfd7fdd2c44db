// Ops (one line each after `---`) and the `expect` clauses attached to them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"
#include "model/vocab/source_error.hpp"

namespace fsdpsim {

#define FSDPSIM_OPS(X)                                                     \
  X(Forward, "forward") X(Eval, "eval") X(Backward, "backward")            \
  X(Step, "step") X(TrainStep, "train_step") X(ZeroGrad, "zero_grad")      \
  X(Merge, "merge") X(Unmerge, "unmerge") X(SetAdapter, "set_adapter")     \
  X(DisableEnter, "disable_enter") X(DisableExit, "disable_exit")          \
  X(AddAdapter, "add_adapter") X(LoadAdapter, "load_adapter")              \
  X(DeleteAdapter, "delete_adapter") X(Reshard, "reshard")                 \
  X(Unshard, "unshard") X(StateDict, "state_dict")                         \
  X(SaveOptimizer, "save_optimizer") X(LoadOptimizer, "load_optimizer")    \
  X(SaveAdapters, "save_adapters") X(LoadAdapters, "load_adapters")        \
  X(DeltaWeight, "delta_weight") X(Prepare, "prepare")                   \
  X(NewOptimizer, "new_optimizer") X(GradientSync, "gradient_sync")       \
  X(SaveModel, "save_model") X(LoadModel, "load_model")                   \
  X(MergeAndUnload, "merge_and_unload") X(Generate, "generate")

enum class OpKind : uint8_t {
#define FSDPSIM_ENUM(e, s) e,
  FSDPSIM_OPS(FSDPSIM_ENUM)
#undef FSDPSIM_ENUM
};
constexpr int kOpKindCount = 29;
// The kinds `--draw all` draws: those before save_model. A later kind drawn there would change
// what every existing seed generates; `--draw all2` draws every kind.
constexpr int kDrawAllOpKinds = 25;

const char* op_name(OpKind k);
std::optional<OpKind> op_from_name(const std::string& s);

// One `expect` item. Which fields are meaningful depends on `key`.
struct ExpectItem {
  enum class Key : uint8_t { Ok, Error, Grads, Index, Missing, Stored, Merged, State, Finding, Placed };
  Key key = Key::Ok;
  Status status = Status::Ok;          // Error
  std::vector<std::string> names;      // Grads (adapters), Merged (adapters)
  std::string target;                  // Stored/Merged: layer; State: group; Finding: spec id; Placed: param
  std::string value;                   // Stored: class; State: SHARDED|UNSHARDED; Placed: DEVICE/DTYPE
  int64_t a = 0, b = 0;                // Index: a; Missing: a/b
  SourcePos pos;
  bool operator==(const ExpectItem& o) const {
    return key == o.key && status == o.status && names == o.names && target == o.target && value == o.value &&
           a == o.a && b == o.b;
  }
};

struct Expect {
  int rank = -1;  // -1: every rank the op ran on
  std::vector<ExpectItem> items;
  SourcePos pos;
  bool operator==(const Expect& o) const { return rank == o.rank && items == o.items; }
};

struct Op {
  OpKind kind = OpKind::Forward;
  int rank = -1;                    // `@R`: this rank only; -1: every rank
  std::vector<std::string> names;   // adapters (merge, set_adapter, save_adapters, add/load/delete)
                                    // or a module (reshard, unshard, delta_weight)
                                    // or the state dict's form (save_model full|sharded, load_model full|sharded|plain)
                                    // or generate's step count in decimal (`generate 3`: {"3"})
  bool list_form = false;           // `set_adapter [a]` (base_model.set_adapter) vs `set_adapter a`
  bool trainable = false;           // load_adapter NAME trainable|frozen
  bool sync = true;                 // gradient_sync on|off (FSDPModule.set_requires_gradient_sync)
  std::vector<Expect> expects;
  SourcePos pos;
  bool operator==(const Op& o) const {
    return kind == o.kind && rank == o.rank && names == o.names && list_form == o.list_form &&
           trainable == o.trainable && sync == o.sync && expects == o.expects;
  }
  bool runs_on(int r) const { return rank < 0 || rank == r; }
  bool is_training() const { return kind == OpKind::Backward || kind == OpKind::TrainStep; }
};

std::string op_text(const Op& op);  // canonical op text without expects, e.g. "@1 set_adapter other"
void op_text_into(const Op& op, std::string& out);  // the same into `out`, reusing its buffer

}  // namespace fsdpsim
