// RealRank: the model before and after prepare, op dispatch, and the per-op report
// read off the real objects.
#include "real_backend/real_rank.hpp"

#include "real_backend/values.hpp"

namespace fsdpsim::real {
namespace {

// The collectives as the vocabulary spells them, with their parts: an
// all-gather or reduce-scatter packs each member's padded shard, a broadcast
// (named by its parameter) carries the full tensor.
std::vector<Collective> collectives_of(const Layout& l, const std::vector<IssuedCollective>& issued) {
  std::vector<Collective> out;
  for (const auto& c : issued) {
    Collective k;
    k.op = c.op;
    k.count = c.count;
    k.dtype = c.dtype;
    k.group = c.op == CollOp::Broadcast ? l.params[c.group].name : l.groups[c.group].name;
    for (int p : c.members) {
      const ParamSpec& ps = l.params[p];
      // A one-parameter all-gather (DTensor's redistribution) carries that tensor as sent, padding included.
      k.parts.push_back({ps.name, c.op == CollOp::Broadcast                              ? ps.rows * ps.cols
                                  : c.op == CollOp::AllGather && c.members.size() == 1 ? c.count
                                                                                       : ps.chunk_numel()});
    }
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace

RealRank::RealRank(const Layout& layout, uint64_t seed, Comm* comm) : layout_(&layout), seed_(seed), comm_(comm) {
  std::vector<std::string> groups, params;
  std::vector<std::vector<int>> packing;
  for (const auto& g : layout.groups) groups.push_back(g.name), packing.push_back(g.params);
  for (const auto& p : layout.params) params.push_back(p.name);
  comm_->set_names(groups, params, packing);
  reset();
}

// This rank's padded dim-0 chunk of a full row-major value.
at::Tensor RealRank::chunk_of(const std::vector<float>& full, const ParamSpec& p) const {
  const int64_t rows = p.chunk_rows, start = comm_->rank() * p.chunk_rows;
  at::Tensor out = at::zeros({rows * p.cols});
  const int64_t have = p.local_rows(comm_->rank());
  if (have > 0) out.narrow(0, 0, have * p.cols).copy_(at::from_blob(const_cast<float*>(full.data()) + start * p.cols, {have * p.cols}, at::kFloat));
  return out.view(param_shape(*layout_, p, rows));
}

// from_pretrained (with ram-efficient loading only rank 0 holds values, the
// others' base weights are on meta), get_peft_model + add_adapter for each
// declared adapter; then prepare (fully_shard: each rank keeps its chunk),
// unless a `prepare` op runs it later.
void RealRank::reset() {
  const size_t n = layout_->params.size();
  params_.assign(n, RealParamSlot{});
  groups_.assign(layout_->groups.size(), RealGroup{});
  post_forward_order_.clear();
  layers_.assign(layout_->layers.size(), RealLayer{});
  present_ = AdapterSet();
  peft_config_.clear();
  active_ = AdapterSet::of(0);
  active_order_ = AdapterOrder{};
  peft_active_ = 0;
  inference_mode_ = AdapterSet();
  disabled_ = false;
  has_opt_ckpt_ = false;
  opt_ckpt_.clear();
  saved_adapters_ = AdapterSet();
  saved_file_order_.clear();
  saved_.clear();
  loss_ = at::Tensor();
  have_output_ = false;
  prepared_ = false;
  const bool on_meta = layout_->loading == Loading::RamEfficient && comm_->rank() != 0;
  const at::ScalarType dtype = layout_->dtype == DType::BF16 ? at::kBFloat16 : at::kFloat;
  for (size_t p = 0; p < n; ++p) {
    if (layout_->params[p].adapter >= 0) continue;  // LoRA and modules_to_save copies come with their adapter
    create_param(static_cast<int>(p), initial_values(*layout_, seed_, static_cast<int>(p)));
    place_param(static_cast<int>(p), on_meta, dtype);
  }
  bool first = true;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    const AdapterDecl& d = layout_->adapters[a];
    if (d.deferred) continue;
    create_adapter(static_cast<int>(a), false);
    present_.insert(static_cast<int>(a));
    peft_config_.push_back(static_cast<int>(a));
    if (d.inference_mode) inference_mode_.insert(static_cast<int>(a));
    inject_adapter(static_cast<int>(a), d.inference_mode, first);  // get_peft_model, then add_adapter
    first = false;
  }
  optimizer_.clear();  // no optimizer before accelerate's prepare builds it
  optimizer_objects_.clear();
  if (!layout_->explicit_prepare) op_prepare();
}

RankReport RealRank::apply(const Op& op, int step) {
  step_ = step;
  res_ = OpResult{};
  comm_->issued().clear();
  comm_->crossed().clear();
  note_unsharded_peak();  // the op's start counts
  try {
    dispatch(op);
  } catch (const OpError& e) {
    res_.status = e.status;  // raised upstream: the op stops there
    res_.message = e.message;
  }
  return report(op, step);
}

void RealRank::dispatch(const Op& op) {
  auto adapter = [&]() { return layout_->adapter_named(op.names[0]); };
  switch (op.kind) {
    case OpKind::Forward: op_forward(true); break;
    case OpKind::Eval: op_forward(false); break;
    case OpKind::Backward: op_backward(); break;
    case OpKind::Step: op_step(); break;
    case OpKind::ZeroGrad: op_zero_grad(); break;
    case OpKind::TrainStep:
      op_zero_grad();
      op_forward(true);
      op_backward();  // a raise skips the step
      op_step();
      break;
    case OpKind::Merge: op_merge(op); break;
    case OpKind::Unmerge: unmerge_adapter(); break;
    case OpKind::SetAdapter: op_set_adapter(op); break;
    case OpKind::DisableEnter: op_disable_enter(); break;
    case OpKind::DisableExit: op_disable_exit(); break;
    case OpKind::AddAdapter: op_add_adapter(adapter(), layout_->adapters[adapter()].inference_mode, false, false); break;
    case OpKind::LoadAdapter: op_add_adapter(adapter(), !op.trainable, true, op.trainable); break;
    case OpKind::DeleteAdapter: op_delete_adapter(adapter()); break;
    case OpKind::Reshard:
    case OpKind::Unshard: {
      // FSDPModule.reshard()/unshard(): one module's group, or every module's.
      int only = op.names.empty() ? -1 : layout_->group_of_module(op.names[0]);
      if (!op.names.empty() && only < 0) break;
      for (size_t g = 0; g < layout_->groups.size(); ++g) {
        if (only >= 0 && static_cast<int>(g) != only) continue;
        if (op.kind == OpKind::Reshard) module_reshard(static_cast<int>(g));
        else {
          init_mp_dtypes(static_cast<int>(g));  // _fully_shard.py::FSDPModule.unshard runs the group's lazy_init each call
          unshard(static_cast<int>(g));
        }
      }
      break;
    }
    case OpKind::StateDict: reshard_all(); break;  // the state-dict pre-hook
    case OpKind::SaveOptimizer: op_save_optimizer(); break;
    case OpKind::LoadOptimizer: op_load_optimizer(); break;
    case OpKind::SaveAdapters: op_save_adapters(op); break;
    case OpKind::LoadAdapters: op_load_adapters(); break;
    case OpKind::DeltaWeight: op_delta_weight(layout_->layer_named(op.names[0])); break;
    case OpKind::Prepare: op_prepare(); break;
    case OpKind::NewOptimizer: new_optimizer(); break;
    // _fully_shard.py::FSDPModule.set_requires_gradient_sync on the root, recurse=True: every group.
    case OpKind::GradientSync:
      for (RealGroup& gr : groups_) gr.reduce_grads = op.sync;
      break;
  }
}

bool RealRank::in_some_layer(int adapter) const {
  for (const auto& ls : layout_->layers)
    if (ls.lora_a[adapter] >= 0 && registered(ls.lora_a[adapter]).defined()) return true;
  return false;
}

RankReport RealRank::report(const Op& op, int step) {
  RankReport r;
  r.step = step;
  r.rank = comm_->rank();
  r.op = op_text(op);
  r.status = res_.status;
  r.message = res_.message;
  // an op that went on after a cross-paired collective says so, as the model's simulator does
  if (r.status == Status::Ok && r.message.empty()) r.message = comm_->crossed();
  r.index = res_.index;
  if (op.is_training()) {
    r.grads.emplace();
    for (int a : res_.grads)  // a deleted adapter cannot be seen holding one, a half-added one can
      if (in_some_layer(a)) r.grads->push_back(layout_->adapters[a].name);
  }
  for (int a : active_) r.active.push_back(layout_->adapters[a].name);
  r.disabled = disabled_;
  r.deltas = res_.deltas;
  r.delta_layer = res_.delta_layer;
  r.delta_values = res_.delta_values;
  int first = -1;
  std::vector<std::string> unregistered;
  r.opt_missing = optimizer_missing(&first, &unregistered);
  r.opt_unregistered.assign(unregistered.begin(), unregistered.end());
  r.opt_total = static_cast<int>(optimizer_.size());
  // A group is UNSHARDED when its parameters' names hold their U objects.
  // Before prepare there is no FSDP: no groups (and no group of a parameter or layer).
  for (size_t g = 0; g < layout_->groups.size() && prepared_; ++g) {
    bool u = false;
    for (int p : layout_->groups[g].params)
      if (registered(p).defined()) {
        u = params_[p].leaf.u.defined() && registered(p).unsafeGetTensorImpl() == params_[p].leaf.u.unsafeGetTensorImpl();
        break;
      }
    r.groups.push_back({layout_->groups[g].name, u ? ShardedState::Unsharded : ShardedState::Sharded});
  }
  const size_t n = layout_->params.size();
  r.present.assign(n, 0);
  r.u_registered.assign(n, 0);
  r.whole.assign(n, 0);
  r.adam_steps.assign(n, 0);
  r.s_values.assign(n, {});
  r.u_values.assign(n, {});
  for (size_t p = 0; p < n; ++p) {
    const ParamSpec& ps = layout_->params[p];
    const RealParam& rp = params_[p].leaf;
    bool present = registered(p).defined();
    r.present[p] = present;
    if (rp.s.defined() && !rp.s.is_meta()) {
      // Read in place (no detach or copy: a report is taken after every op, for every parameter).
      at::Tensor s = rp.s.is_contiguous() ? rp.s : rp.s.detach().contiguous();
      const float* v = s.data_ptr<float>();
      if (!prepared_ && ps.group >= 0) {  // before prepare a managed parameter is whole: report the chunk fully_shard will keep
        at::Tensor c = chunk_of(std::vector<float>(v, v + s.numel()), ps);
        r.s_values[p].assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      } else {
        r.s_values[p].assign(v, v + s.numel());
      }
    }
    bool holds_u = present && rp.u.defined() && registered(p).unsafeGetTensorImpl() == rp.u.unsafeGetTensorImpl();
    r.u_registered[p] = holds_u;
    r.whole[p] = params_[p].detached;
    r.adam_steps[p] = rp.adam_step;
    if (holds_u) {
      at::Tensor u = rp.u.is_contiguous() ? rp.u : rp.u.detach().contiguous();
      r.u_values[p].assign(u.data_ptr<float>(), u.data_ptr<float>() + u.numel());
    }
    if (ps.adapter < 0 || !present) continue;
    ParamObs po;
    po.name = ps.name;
    po.group = group_of(static_cast<int>(p)) >= 0 && prepared_ ? layout_->groups[ps.group].name : "";
    po.rg_s = rp.s.requires_grad();
    po.rg_u = rp.u.defined() ? static_cast<int8_t>(rp.u.requires_grad()) : int8_t{-1};
    po.device = rp.place.is_meta() ? Device::Meta : Device::Cpu;
    po.dtype = dtype_of(rp.place);
    r.params.push_back(po);
  }
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    std::vector<std::string> m;
    for (int a : layers_[l].merged) m.push_back(layout_->adapters[a].name);
    r.merged.push_back(m);
  }
  r.collectives = collectives_of(*layout_, comm_->issued());
  r.saved = res_.saved;
  r.reload_diff.assign(res_.reload_diff.begin(), res_.reload_diff.end());
  r.reload_coincident.assign(res_.reload_coincident.begin(), res_.reload_coincident.end());
  r.sharded_bytes = sharded_bytes();
  r.peak_unsharded = res_.peak_owners;
  return r;
}

// A rank stopped inside a collective: its state is not observable, only the
// failure and the collectives it issued up to the one it waits in.
RankReport RealRank::failed_report(const Op& op, int step, Status s, const std::string& desc) {
  RankReport r;
  r.step = step;
  r.rank = comm_->rank();
  r.op = op_text(op);
  r.status = s;
  r.message = (s == Status::Mismatch ? "collective mismatch: " : "hang: ") + desc;
  r.collectives = collectives_of(*layout_, comm_->issued());
  return r;
}

}  // namespace fsdpsim::real
