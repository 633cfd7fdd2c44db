// One FSDPParam on one rank (torch/distributed/fsdp/_fully_shard/_fsdp_param.py::
// FSDPParam): the shard S, the unsharded copy U, and for a LoRA parameter the
// symbolic values both hold; for a base weight the deltas merged into it.
#pragma once
#include <array>
#include <cstdint>
#include <optional>

#include "model/machine/version_token.hpp"
#include "model/vocab/limits.hpp"
#include "model/vocab/placement.hpp"

namespace fsdpsim {

// What a base weight holds beyond W0: +coeff * delta(adapter, version) per
// adapter. A value the symbolic form cannot express (a delta subtracted at a
// different version than it was added) makes it corrupt.
struct WeightContent {
  std::array<int8_t, kMaxAdapters> coeff{};
  std::array<DeltaId, kMaxAdapters> ver{};
  bool corrupt = false;
  void add(int adapter, DeltaId version, int sign);
  bool operator==(const WeightContent& o) const { return coeff == o.coeff && ver == o.ver && corrupt == o.corrupt; }
  bool operator!=(const WeightContent& o) const { return !(*this == o); }
};

// S always exists; U exists from the group's first unshard on. `u` in the
// methods below: the group is UNSHARDED, so U is the registered object.
struct FsdpParam {
  bool present = true;  // registered in the module tree (false: deferred, or deleted)
  bool recreated = false;  // a new Parameter object since the optimizer was built (add after delete)
  // Re-added after fully_shard over a managed name: the registered object is a new module no group
  // manages (peft tuners/lora/layer.py::LoraLayer.update_layer); the group keeps the deleted one's
  // FSDPParam (the ghost) and all-gathers its shard under this name (torch _fsdp_init.py::_get_managed_states).
  bool detached = false;
  uint32_t ghost_ver = 0;   // the ghost shard's values (frozen at the re-add, or stepped by the optimizer)
  bool ghost_grad = false;  // the ghost shard's grad (the optimizer still holds it)
  DType ghost_dtype = DType::F32;  // the ghost shard's dtype: the deleted module's, whatever the re-add holds
  bool ghost_rg = false;           // the ghost shard's requires_grad, as the deleted module left it
  bool rg_s = false, rg_u = false;
  bool grad_s = false, grad_u = false;
  // This rank's rows reach a part-filled broadcast's tail (NaN: torch.empty under the deterministic
  // mode the value backends run): a merge of these rows writes NaN into the weight, equal to nothing.
  bool nan_rows = false;
  uint32_t ver_s = 0, ver_u = 0;  // LoRA values: bumped by optimizer updates and loads
  // A whole unmanaged replica's lineage beyond ver_s: 0 while it holds what every rank holds,
  // else a token of the rank-specific gradients (per-rank data) that moved it (Optimizer::step).
  uint32_t drift = 0;
  // This rank's ver_s when U was last all-gathered: U is stale once S moves past it. ver_u
  // itself can differ from ver_s from the start (the gather of ranks' differing shards).
  uint32_t ver_s_at_gather = 0;
  WeightContent w_s, w_u;         // base weights: merged deltas
  // A Linear base weight: per adapter, how many deltas ops merged into (+) or took out of (-) U
  // since its all-gather, zero ones too; u_edit_corrupt: an edit no delta expresses (a DoRA unmerge
  // of a weight without the merge). A gather that pairs later gives U other A and B (a disabled
  // forward's unmerge runs before the peers' rows arrive): each edit is then the gathered ones' delta
  // (DTensor::replay_u_edits). Not in the state key: to_unsharded clears it, and only that gather reads it.
  std::array<int8_t, kMaxAdapters> u_edit{};
  bool u_edit_corrupt = false;
  Device device = Device::Cpu;    // of S (before prepare: the plain parameter)
  DType dtype = DType::F32;
  // _fsdp_param.py::FSDPParam.init_dtype_attrs: the policy's param_dtype when it differs from the
  // shard's dtype at the group's lazy init (the all-gather casts to it and U holds it); unset: None.
  std::optional<DType> param_dtype;

  bool registered_rg(bool u) const { return u ? rg_u : rg_s; }
  // _fsdp_param.py::FSDPParam._setattr_on_modules: a flip reaches whichever object is registered now.
  void set_registered_rg(bool u, bool value) { (u ? rg_u : rg_s) = value; }
  uint32_t registered_version(bool u) const { return u ? ver_u : ver_s; }
  WeightContent& registered_weight(bool u) { return u ? w_u : w_s; }
  // The values an all-gather packs under this name: a ghost packs the deleted module's shard
  // (torch _fsdp_param_group.py::FSDPParamGroup.unshard).
  uint32_t packed_version() const { return detached ? ghost_ver : ver_s; }
  DType packed_dtype() const { return detached ? ghost_dtype : dtype; }
  // What the all-gather carries and U holds: the cast, else the shard's own dtype
  // (_fsdp_collectives.py::_get_param_all_gather_inputs).
  DType gathered_dtype() const { return param_dtype.value_or(packed_dtype()); }
  bool managed_rg() const { return detached ? ghost_rg : rg_s; }  // FSDPParam.sharded_param.requires_grad

  // _fsdp_param.py::FSDPParam.to_unsharded -> set_requires_grad_if_needed(S, U): S -> U only.
  void to_unsharded() {
    rg_u = rg_s;
    ver_u = ver_s;
    ver_s_at_gather = ver_s;
    w_u = w_s;
    u_edit = {};
    u_edit_corrupt = false;
    // U's grad survives the unshard: the same Parameter object is reused (FSDPParam.init_unsharded_param),
    // and a backward without gradient sync leaves its grad there (FSDPParamGroup.post_backward).
  }
  // A matched all-gather combined different ranks' differing rows: values no rank holds.
  void mark_u_mixed() {
    w_u.corrupt = true;
    ver_u = kMixedVersion;
  }
  // U no longer shows S: gathered from ranks that disagreed, or S moved since.
  bool u_stale() const { return ver_u == kMixedVersion || ver_s != ver_s_at_gather; }
  // The group keeps the deleted module's FSDPParam as the ghost, frozen at its current values.
  void keep_ghost() {
    detached = true;
    ghost_ver = ver_s;
    ghost_grad = grad_s;
    ghost_dtype = dtype;
    ghost_rg = rg_s;
  }
  // A new Parameter object (add_adapter / load_adapter) holding `version`, frozen, no grad.
  void recreate(uint32_t version) {
    present = true;
    recreated = true;
    grad_s = grad_u = false;
    rg_s = false;
    ver_s = version;
    drift = 0;
  }

  // The optimizer's object for this name has a grad (the ghost's while detached; a
  // recreated object is not the one the optimizer holds).
  bool optimizer_grad() const { return detached ? ghost_grad : grad_s && !recreated; }
  // torch/optim/adamw.py::AdamW.step: the held object with a grad moves to fresh values.
  void optimizer_update() {
    if (detached) {
      if (ghost_grad) ghost_ver = (ghost_ver + 1) & 0xffffu;
    } else if (grad_s && !recreated) {
      ver_s = (ver_s + 1) & 0xffffu;
    }
  }
};

}  // namespace fsdpsim
