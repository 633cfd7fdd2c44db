// RankModel: the state after prepare, op dispatch, and the training ops
// (forward with FSDP hooks, backward, step).
#include "model/machine/rank_model.hpp"
#include "model/machine/activation_dtype.hpp"
#include "model/machine/activation_checkpoint.hpp"
#include "model/machine/loading.hpp"
#include "model/machine/peft_model.hpp"
#include "model/machine/param_wrapper.hpp"

#include <fmt/format.h>

#include "model/vocab/refill.hpp"

#include <algorithm>

namespace fsdpsim {

RankModel::RankModel(const Topology& topo, int rank) : topo_(&topo), rank_(rank) { reset(); }

// get_peft_model + add_adapter for each declared adapter, fully_shard, then
// accelerate's prepare: every group SHARDED, no U yet, the optimizer on S.
void RankModel::reset() {
  if (prov_) prov_->reset(topo_->params.size(), topo_->layers.size(), topo_->groups.size());
  {
    // A fresh state, but on the old one's buffers: what each list holds is assigned below.
    RankState fresh;
    auto keep = [](auto& to, auto& from) { from.clear(), to.swap(from); };
    keep(fresh.params, st_.params);
    // Not emptied: the assign below copies a fresh group over each kept one, which keeps the
    // buffer of its post-forward indices (a group records one every forward).
    fresh.groups.swap(st_.groups);
    keep(fresh.layers, st_.layers);
    keep(fresh.saved_ver, st_.saved_ver);
    keep(fresh.saved_drift, st_.saved_drift);
    keep(fresh.saved_rows, st_.saved_rows);
    keep(fresh.saved_own_rows, st_.saved_own_rows);
    keep(fresh.saved_nan, st_.saved_nan);
    keep(fresh.graph.grad, st_.graph.grad);
    keep(fresh.graph.group_out_rg, st_.graph.group_out_rg);
    keep(fresh.graph.group_in_rg, st_.graph.group_in_rg);
    keep(fresh.graph.hooks, st_.graph.hooks);
    keep(fresh.graph.ckpt_input_rg, st_.graph.ckpt_input_rg);
    keep(fresh.optimizer.objects, st_.optimizer.objects);
    keep(fresh.optimizer.state, st_.optimizer.state);
    keep(fresh.optimizer.saved_state, st_.optimizer.saved_state);
    keep(fresh.post_forward_order, st_.post_forward_order);
    st_ = std::move(fresh);
  }
  log_.clear();
  st_.params.assign(topo_->params.size(), FsdpParam{});
  st_.groups.assign(topo_->groups.size(), FsdpParamGroup{});
  st_.layers.assign(topo_->layers.size(), LoraLayer{});
  st_.saved_ver.assign(topo_->params.size(), 0);
  st_.saved_drift.assign(topo_->params.size(), 0);
  st_.saved_rows.assign(topo_->params.size(), -1);
  st_.saved_own_rows.assign(topo_->params.size(), 0);
  st_.saved_nan.assign(topo_->params.size(), 0);
  st_.graph.grad.assign(topo_->params.size(), 0);
  st_.graph.group_out_rg.assign(topo_->groups.size(), 0);
  st_.graph.group_in_rg.assign(topo_->groups.size(), 0);
  for (size_t p = 0; p < topo_->params.size(); ++p) {
    int a = topo_->params[p].adapter;
    st_.params[p].present = a < 0 || !topo_->adapters[a].deferred;
  }
  st_.prepared = !topo_->explicit_prepare;
  accelerator().place_base_params();
  res_ = OpResult{};
  peft().get_peft_model();
  if (st_.prepared) accelerator().upcast_trainable();
  if (st_.prepared) st_.optimizer.prepare(optimizer_port(fsdp()));  // before prepare there is no optimizer yet
}

LayerPort RankModel::layer_port(int layer) {
  return LayerPort{{*topo_, layer, st_.params, st_.groups, st_.prepared}, dtensor(), site()};
}

// The optimizer's port over this rank's parameters; `fsdp` must outlive it (a temporary lives
// through the call it is built in).
OptimizerPort RankModel::optimizer_port(const FsdpState& fsdp) {
  return OptimizerPort{*topo_, rank_, st_.params, fsdp, prov_};
}

Accelerator RankModel::accelerator() { return Accelerator(*topo_, rank_, st_.params, st_.prepared, log_, &st_.groups); }

PeftModel RankModel::peft() {
  return PeftModel(PeftPort{st_, st_, PeftModules{*topo_, st_.params, st_.layers, st_.prepared}, fsdp(), accelerator(), dtensor(), prov_});
}

const OpResult& RankModel::apply(const Op& op) {
  log_.clear();
  res_.status = Status::Ok;
  res_.message.clear();
  res_.index = -1;
  res_.opt_missing = 0;
  res_.has_grads = false;
  res_.grads = AdapterSet{};
  res_.deltas = AdapterOrder{};
  res_.corrupt_deltas = AdapterSet{};
  res_.reload_diff.clear();
  st_.memory.start_op();
  TrScope scope(site(), op_transition(op));
  if (Raise raised = dispatch(op)) {
    // What ran before the raise stays (upstream undoes nothing), its collectives included.
    res_.status = raised->status;
    res_.message = raised->message;
  }
  if (op.is_training()) res_.has_grads = true;
  return res_;
}

// The user's call an op is (provenance.hpp).
Tr RankModel::op_transition(const Op& op) {
  switch (op.kind) {
    case OpKind::Forward: return Tr::Forward;
    case OpKind::Eval: return Tr::Eval;
    case OpKind::Backward: return Tr::Backward;
    case OpKind::Step: return Tr::OptimizerStep;
    case OpKind::ZeroGrad: return Tr::ZeroGrad;
    case OpKind::TrainStep: return Tr::Forward;  // forward, backward and step: each stamps its own below
    case OpKind::Merge: return Tr::Merge;
    case OpKind::Unmerge: return Tr::Unmerge;
    case OpKind::SetAdapter: return op.list_form ? Tr::BaseSetAdapter : Tr::SetAdapter;
    case OpKind::DisableEnter: return Tr::DisableEnter;
    case OpKind::DisableExit: return Tr::DisableExit;
    case OpKind::AddAdapter: return Tr::AddAdapter;
    case OpKind::LoadAdapter: return Tr::LoadAdapter;
    case OpKind::DeleteAdapter: return Tr::DeleteAdapter;
    case OpKind::Reshard: return Tr::Reshard;
    case OpKind::Unshard: return Tr::Unshard;
    case OpKind::StateDict: return Tr::StateDict;
    case OpKind::SaveOptimizer: return Tr::SaveOptimizer;
    case OpKind::LoadOptimizer: return Tr::LoadOptimizer;
    case OpKind::SaveAdapters: return Tr::SaveAdapters;
    case OpKind::LoadAdapters: return Tr::LoadAdapters;
    case OpKind::DeltaWeight: return Tr::DeltaWeight;
    case OpKind::Prepare: return Tr::Prepare;
    case OpKind::NewOptimizer: return Tr::NewOptimizer;
    case OpKind::GradientSync: return Tr::GradientSync;
    case OpKind::SaveModel: return Tr::SaveModel;
    case OpKind::LoadModel: return Tr::LoadModel;
    case OpKind::Generate: return Tr::Generate;
    case OpKind::MergeAndUnload: return Tr::MergeAndUnload;
  }
  return Tr::None;
}

Raise RankModel::dispatch(const Op& op) {
  auto adapter = [&]() { return adapters_named(op.names).first(); };
  switch (op.kind) {
    case OpKind::Forward: return op_forward(true);
    case OpKind::Eval: return op_forward(false);
    case OpKind::Generate: return op_generate(std::stoi(op.names[0]));
    case OpKind::Backward: return op_backward();
    case OpKind::Step: st_.optimizer.step(optimizer_port(fsdp())); break;
    case OpKind::ZeroGrad: st_.optimizer.zero_grad(optimizer_port(fsdp())); break;
    case OpKind::TrainStep: {
      st_.optimizer.zero_grad(optimizer_port(fsdp()));
      if (Raise r = op_forward(true)) return r;
      {
        TrScope backward(site(), Tr::Backward);
        if (Raise r = op_backward()) return r;
      }
      TrScope step(site(), Tr::OptimizerStep);
      st_.optimizer.step(optimizer_port(fsdp()));
      break;
    }
    case OpKind::Merge: return peft().merge(op);
    case OpKind::Unmerge: return peft().unmerge_adapter();
    case OpKind::SetAdapter: return peft().set_adapter(op);
    case OpKind::DisableEnter: return peft().disable_enter();
    case OpKind::DisableExit: return peft().disable_exit();
    case OpKind::AddAdapter: return peft().add_adapter(adapter(), topo_->adapters[adapter()].inference_mode, false, false, st_.graph.grad);
    case OpKind::LoadAdapter: return peft().add_adapter(adapter(), !op.trainable, true, op.trainable, st_.graph.grad);
    case OpKind::DeleteAdapter: return peft().delete_adapter(adapter());
    case OpKind::Reshard:
    case OpKind::Unshard: {
      // FSDPModule.reshard() / unshard() act on one module's group (not
      // recursive); with no module named, on every FSDP module in turn.
      int only = op.names.empty() ? -1 : topo_->group_index(op.names[0]);
      if (!op.names.empty() && only < 0) break;  // that module holds no parameters
      for (size_t g = 0; g < topo_->groups.size(); ++g) {
        if (only >= 0 && static_cast<int>(g) != only) continue;
        if (op.kind == OpKind::Reshard) {
          st_.groups[g].reshard(fsdp().context(static_cast<int>(g)));  // FSDPModule.reshard -> FSDPParamGroup.reshard
        } else {
          if (Raise r = fsdp().module_unshard(static_cast<int>(g))) return r;
        }
      }
      break;
    }
    // _fsdp_state.py: the state-dict pre-hook reshards every group holding params.
    case OpKind::StateDict: fsdp().reshard_all(); break;
    case OpKind::SaveOptimizer: return st_.optimizer.save(optimizer_port(fsdp()), &res_.index, &res_.opt_missing);
    case OpKind::LoadOptimizer: return st_.optimizer.load(optimizer_port(fsdp()), &res_.index, &res_.opt_missing);
    case OpKind::SaveAdapters: return peft().save_adapters(op);
    case OpKind::SaveModel: return peft().save_model(op);
    case OpKind::LoadModel: return peft().load_model(op);
    case OpKind::MergeAndUnload: return peft().merge_and_unload();
    case OpKind::LoadAdapters: return peft().load_adapters(rank0_file_missing_, rank0_first_file_, &res_.reload_diff);
    case OpKind::DeltaWeight: return peft().delta_weight(topo_->layer_index(op.names[0]), &res_.deltas, &res_.corrupt_deltas);
    case OpKind::Prepare: accelerator().prepare(st_.optimizer, optimizer_port(fsdp())); break;
    // A fresh torch.optim.AdamW built as prepare builds it, now holding the late adapters' tensors.
    case OpKind::NewOptimizer:
      if (st_.prepared) st_.optimizer.prepare(optimizer_port(fsdp()));
      break;
    // _fully_shard.py::FSDPModule.set_requires_gradient_sync on the root (recurse=True): every group.
    case OpKind::GradientSync:
      for (FsdpParamGroup& gs : st_.groups) gs.reduce_grads = op.sync;
      break;
  }
  return {};
}

// PeftModel.forward under FSDP2 hooks: the root's pre-forward runs first, each
// child group unshards at its first module and runs post_forward after its
// last; the root's post_forward runs last (_fsdp_state.py::FSDPState._pre_forward
// / _post_forward). Under no_grad no backward hooks are registered.
Raise RankModel::op_forward(bool grad_enabled, bool root_hooks) {
  // `loss = model(x)` that raises never assigns: the previous forward's output (and its graph)
  // is what a later backward runs on. The FSDP state the raise left stays.
  thread_local PendingGraph previous;
  previous = st_.graph;
  Raise r = forward_hooks(grad_enabled, root_hooks);
  if (r) st_.graph = previous;
  if (!r && grad_enabled && prov_) {
    prov_->graph_step = prov_->step();
    prov_->graph_merged = observer().any_merged();
  }
  return r;
}

// generate N: an RL rollout's N decode steps, each a no_grad forward; the first raise ends it. On
// a `model` scenario it is transformers' generate, which PeftModel.generate reaches through the
// base model (peft peft_model.py::PeftModelForCausalLM.generate): the forward the decode calls is
// the inner causal LM's, so the root unit's hooks, registered on the PeftModel's forward (torch
// _fully_shard/_fsdp_state.py::FSDPState._register_pre_forward_hook), never run; the child units'
// do (huggingface/trl#4550, fixed in transformers' Trainer by register_fsdp_forward_method).
Raise RankModel::op_generate(int steps) {
  for (; steps > 0; --steps)
    if (Raise r = op_forward(false, !topo_->generate_skips_root)) return r;
  return {};
}

Raise RankModel::forward_hooks(bool grad_enabled, bool root_hooks) {
  PendingGraph& gr = st_.graph;
  std::fill(gr.grad.begin(), gr.grad.end(), 0);
  std::fill(gr.group_out_rg.begin(), gr.group_out_rg.end(), 0);
  std::fill(gr.group_in_rg.begin(), gr.group_in_rg.end(), 0);
  gr.hooks.clear();
  gr.ckpt_saved.resize(topo_->layers.size());
  gr.ckpt_input_rg.resize(topo_->layers.size());
  for (auto& saved : gr.ckpt_saved) saved.clear();
  int root = -1;
  for (size_t g = 0; g < topo_->groups.size(); ++g)
    if (topo_->groups[g].is_root) root = static_cast<int>(g);
  // A state left in PRE_BACKWARD returns from its pre-forward before anything else, and its
  // post-forward does nothing: no reshard, no hook (_fsdp_state.py::FSDPState._pre_forward).
  auto stuck = [&](int g) { return st_.groups[g].state_pre_backward; };
  if (!root_hooks) {
    // (op_rules: no generate on a model scenario before its first forward: the lazy init ran)
  } else if (root >= 0 && stuck(root)) {
    st_.groups[root].pre_forward_in_pre_backward(fsdp().context(root));
  } else {
    // _fsdp_state.py::FSDPState._root_pre_forward: _lazy_init before anything is unsharded.
    if (Raise r = fsdp().lazy_init()) return r;
    if (root >= 0)
      if (Raise r = st_.groups[root].pre_forward(fsdp().context(root))) return r;
  }
  // peft_model.py::PeftModel._enable_peft_forward_hooks -> has_active_enabled_adapter reads
  // peft_config[self.active_adapter], inside the root's forward (its pre-forward has run).
  if (st_.peft_active >= 0 && !st_.present.contains(st_.peft_active))
    return raise(Status::KeyError, fmt::format("KeyError: '{}'", topo_->adapters[st_.peft_active].name));
  bool path_rg = false;
  DType act = topo_->dtype;  // session Net.forward: `x = x.to(dtype)`, after the root's input cast
  bool recast = false;       // the last layer's output_dtype cast made a new tensor
  // A child group's pre-forward runs once, as its module is called: an enclosing unit's module is
  // called before the unit nested in it (topology.hpp GroupInfo::parent), so entering a group
  // enters its enclosing ones first, outermost first.
  thread_local std::vector<uint8_t> entered;
  entered.assign(topo_->groups.size(), 0);
  auto enter_one = [&](int g) -> Raise {
    entered[g] = 1;
    // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.pre_forward registers the post-backward
    // node only when entering a forward pass: a group left in FORWARD by a raise gets none.
    if (stuck(g)) {
      st_.groups[g].pre_forward_in_pre_backward(fsdp().context(g));
      return {};
    }
    gr.group_in_rg[g] = path_rg && st_.groups[g].training != TrainingState::Forward;
    return st_.groups[g].pre_forward(fsdp().context(g));
  };
  auto enter = [&](int g) -> Raise {
    while (!entered[g]) {  // the outermost of g's chain not yet entered, each time
      int h = g;
      while (topo_->groups[h].parent >= 0 && !entered[topo_->groups[h].parent]) h = topo_->groups[h].parent;
      if (Raise r = enter_one(h)) return r;
    }
    return {};
  };
  thread_local std::vector<int> exiting;
  for (size_t l = 0; l < topo_->layers.size(); ++l) {
    int g = topo_->layers[l].group;
    bool child = g != root;
    if (child && topo_->groups[g].first_layer == static_cast<int>(l)) {
      if (Raise r = ParamWrapper::forward(st_.layers[l], layer_port(static_cast<int>(l)))) return r;
      if (Raise r = enter(g)) return r;
    }
    const LayerInfo& li = topo_->layers[l];
    // Without the root's pre-forward its modules hold the sharded DTensors unless a forward left
    // the root unsharded (the root's reshard_after_forward default keeps it after a forward).
    if (!root_hooks && !child && root >= 0 && !st_.groups[root].unsharded())
      return raise(Status::Exception, DTensor::mixed_tensor_error(li.sharded_call_op));
    // The FSDP module of a layer wrapped after fully_shard is its base layer: its output
    // requires grad only through the input or the base parameters.
    const bool base_rg = li.lora_after_fsdp &&
                         (path_rg || (grad_enabled && (observer().registered_rg(li.weight) || (li.bias >= 0 && observer().registered_rg(li.bias)))));
    // A module that raises leaves every group it entered UNSHARDED (no post_forward); the
    // previous forward's output stands.
    const bool input_rg = path_rg;
    // The layer is a child group's FSDP module (each member of a grouped one: its hooks run per
    // module, _fsdp_state.py::_register_group_forward_hooks): its policy casts what enters and leaves.
    const bool module_hooks = child && !li.lora_after_fsdp;
    if (module_hooks) act = fsdp_cast_in(topo_->groups[g], act);
    if (Raise r = st_.layers[l].forward(layer_port(static_cast<int>(l)), st_.graph.grad, grad_enabled, &path_rg, &act)) {
      // ... except the member completing a grouped fully_shard([...]): its post-forward hook is
      // registered with always_call=True and runs on the raise (torch 2.13
      // _fsdp_state.py::_register_group_forward_hooks): the group reshards and goes IDLE. A tied
      // head, not a layer, completes its group (GroupInfo::tied_head): a layer's raise does not.
      const GroupInfo& gi = topo_->groups[g];
      if (child && gi.layers.size() > 1 && gi.last_layer == static_cast<int>(l) && !gi.tied_head && !stuck(g))
        st_.groups[g].post_forward(fsdp().context(g));
      return r;
    }
    const DType before_cast = act;
    if (module_hooks) act = fsdp_cast_out(topo_->groups[g], act);
    recast = act != before_cast;
    if (li.checkpoint && grad_enabled && path_rg) CheckpointWrapper(layer_port(static_cast<int>(l)), st_.layers[l], gr).forward(input_rg);
    // The groups whose module returns after this layer, innermost first: a nested unit's, then
    // those enclosing it whose module ends here too (GroupInfo::span_last).
    exiting.clear();
    for (int h = child ? g : -1; h >= 0 && topo_->groups[h].span_last == static_cast<int>(l); h = topo_->groups[h].parent)
      if (!stuck(h)) exiting.push_back(h);
    for (int h : exiting) {
      gr.group_out_rg[h] = h == g && li.lora_after_fsdp ? base_rg : path_rg;
      st_.groups[h].post_forward(fsdp().context(h));
    }
    // The hooks sit on each module's output; an enclosing module's output (the decoder layer's
    // residual sum) comes after the nested one's, so autograd reaches its hook first: registered
    // outermost first on one position, they fire in that order.
    for (auto h = exiting.rbegin(); h != exiting.rend(); ++h) {
      // A LoRA layer wrapped around the FSDP module puts the hook on the base output, which
      // autograd reaches after the layer's own output (tensor 2l, not 2l + 1) once the LoRA
      // layer adds a term to it (peft lora/layer.py::Linear.forward; else it returns that tensor).
      const bool base_output = *h == g && li.lora_after_fsdp && st_.layers[l].adds_output(layer_port(static_cast<int>(l)));
      gr.hooks.emplace_back(*h, 2 * static_cast<int>(l) + (base_output ? 0 : 1));
    }
  }
  const int n = static_cast<int>(topo_->layers.size());
  // A unit whose modules end with a tied output head (GroupInfo::tied_head) runs its post-forward
  // when the head, the last of its modules to run, returns after every layer (torch 2.13
  // _fsdp_state.py::_register_group_forward_hooks): its record comes after the last layer's and
  // its hook is on the logits (tensor 2n).
  for (size_t h = 0; h < topo_->groups.size(); ++h) {
    if (topo_->groups[h].span_last != n || !entered[h] || stuck(static_cast<int>(h))) continue;
    gr.group_out_rg[h] = path_rg;
    st_.groups[h].post_forward(fsdp().context(static_cast<int>(h)));
    gr.hooks.emplace_back(static_cast<int>(h), 2 * n);
  }
  if (root >= 0 && !stuck(root) && root_hooks) {
    gr.group_out_rg[root] = path_rg;
    st_.groups[root].post_forward(fsdp().context(root));
    // The group's pre-backward hook sits on its output before its output_dtype cast
    // (_fsdp_state.py::FSDPState._post_forward); a cast that changed the dtype made a new tensor,
    // the model's output, which autograd reaches first: the root's hook is on it. A `model`
    // scenario's output holds the loss (Topology::loss_in_root), computed after the logits
    // (transformers LlamaForCausalLM.forward -> self.loss_function): the hook on it fires first.
    gr.hooks.emplace_back(root, topo_->loss_in_root ? 2 * n + 1 : 2 * n - 1 + (recast ? 1 : 0));
  }
  gr.valid = true;
  gr.loss_rg = grad_enabled && path_rg;
  return {};
}

// loss.backward(): with nothing requiring grad autograd raises before any FSDP
// hook runs. Otherwise the pre-backward hooks fire as autograd reaches the
// tensors carrying them: later outputs first, and on one tensor in
// registration order (torch 2.13 _fsdp_state.py::FSDPState._post_forward ->
// _register_pre_backward_hook registers on the outputs; tensor hooks fire in
// registration order), so a child group producing the model's output fires
// before the root. All hooks on one tensor fire before autograd enters the
// module; a child whose input requires grad then runs post_backward as soon as
// its gradients exist, and the root's final callback runs the rest.
Raise RankModel::op_backward() {
  PendingGraph& gr = st_.graph;
  if (!gr.valid) return raise(Status::ValueError, "backward without a forward output");
  gr.valid = false;
  if (!gr.loss_rg) return raise(Status::NoGradFn, kNoGradFnMessage);
  const bool queued_here = !st_.final_callback_queued;
  thread_local std::vector<uint8_t> done;
  done.assign(topo_->groups.size(), 0);
  // AccumulateGrad skips a leaf whose requires_grad was turned off after the forward.
  // `fresh`: the U grads this backward wrote (a raising recompute takes back those below it).
  thread_local std::vector<int> fresh;
  fresh.clear();
  auto grads_into_u = [&](int g) {
    for (int p : topo_->groups[g].params)
      if (gr.grad[p] && st_.params[p].rg_u && !st_.params[p].detached && !st_.params[p].grad_u) {
        st_.params[p].grad_u = true;
        fresh.push_back(p);
      }
  };
  // Parameters no group manages (adapters added after fully_shard): autograd
  // writes their grad directly; nothing is reduced across ranks.
  auto unmanaged_grads = [&](int above_layer) {
    for (size_t p = 0; p < topo_->params.size(); ++p) {
      if (observer().group_of(static_cast<int>(p)) >= 0 || !gr.grad[p] || !st_.params[p].rg_s) continue;
      if (topo_->params[p].layer <= above_layer) continue;
      st_.params[p].grad_s = true;
      if (topo_->params[p].adapter >= 0) res_.grads.insert(topo_->params[p].adapter);
    }
  };
  // A checkpointed layer's recompute raising stops autograd there (no final callback):
  // the layers above it have their grads, that layer and those below have none.
  auto recompute = [&](int l) -> Raise {
    if (gr.ckpt_saved[l].empty()) return {};
    Raise r = CheckpointWrapper(layer_port(l), st_.layers[l], gr).recompute();
    if (r) {
      for (int p : fresh)
        if (topo_->params[p].layer <= l) st_.params[p].grad_u = false;
      unmanaged_grads(l);
    }
    return r;
  };
  // The root's own checkpointed layers, met between the child groups' hooks; descending.
  thread_local std::vector<int> root_ckpt;
  root_ckpt.clear();
  for (int l = static_cast<int>(topo_->layers.size()) - 1; l >= 0; --l)
    if (topo_->layers[l].checkpoint && topo_->groups[topo_->layers[l].group].is_root) root_ckpt.push_back(l);
  size_t next_root = 0;
  auto root_recomputes = [&](int t, bool including) -> Raise {
    for (; next_root < root_ckpt.size(); ++next_root) {
      const int at = 2 * root_ckpt[next_root] + 1;  // after its output's hooks fired
      if (!(at > t || (including && at == t))) break;
      if (Raise r = recompute(root_ckpt[next_root])) return r;
    }
    return {};
  };
  thread_local std::vector<std::pair<int, int>> order;
  order = gr.hooks;
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  // A unit with units nested in its module (GroupInfo::parent) gets its gradients at its module's
  // input, after autograd has gone through every nested module: its post_backward waits for the
  // last nested unit's hook (its slot in `order`; -1: nothing nested fired).
  thread_local std::vector<int> last_nested;
  thread_local std::vector<uint8_t> waiting;
  last_nested.assign(topo_->groups.size(), -1);
  waiting.assign(topo_->groups.size(), 0);
  for (size_t k = 0; k < order.size(); ++k)
    for (int a = topo_->groups[order[k].first].parent; a >= 0; a = topo_->groups[a].parent) last_nested[a] = static_cast<int>(k);
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    const int t = order[i].second;
    while (j < order.size() && order[j].second == t) ++j;
    if (Raise r = root_recomputes(t, false)) return r;
    for (size_t k = i; k < j; ++k)
      if (gr.group_out_rg[order[k].first]) st_.groups[order[k].first].pre_backward(fsdp().context(order[k].first));
    if (Raise r = root_recomputes(t, true)) return r;
    for (size_t k = i; k < j; ++k) {
      const int g = order[k].first;
      if (!gr.group_out_rg[g]) continue;
      grads_into_u(g);
      if (topo_->groups[g].is_root) continue;
      for (auto l = topo_->groups[g].layers.rbegin(); l != topo_->groups[g].layers.rend(); ++l)
        if (topo_->layers[*l].checkpoint)
          if (Raise r = recompute(*l)) return r;
      if (gr.group_in_rg[g] && last_nested[g] > static_cast<int>(k)) {
        waiting[g] = 1;
      } else if (gr.group_in_rg[g]) {
        done[g] = 1;
        if (Raise r = st_.groups[g].post_backward(fsdp().context(g), res_.grads)) return r;
      }
    }
    // The enclosing units whose last nested hook was among these, innermost first.
    for (size_t k = i; k < j; ++k)
      for (int a = topo_->groups[order[k].first].parent; a >= 0; a = topo_->groups[a].parent)
        if (waiting[a] && last_nested[a] == static_cast<int>(k)) {
          waiting[a] = 0;
          done[a] = 1;
          if (Raise r = st_.groups[a].post_backward(fsdp().context(a), res_.grads)) return r;
        }
    i = j;
  }
  if (Raise r = root_recomputes(-1, true)) return r;
  unmanaged_grads(-1);
  // A group without a hook (its state stuck in PRE_BACKWARD since a raised backward) still
  // has its U registered: autograd writes the gradients there, and nothing reduces them.
  for (size_t g = 0; g < topo_->groups.size(); ++g)
    if (st_.groups[g].state_pre_backward && !gr.group_out_rg[g] && st_.groups[g].unsharded()) grads_into_u(static_cast<int>(g));
  // Only a backward whose pre_backward queued the final callback runs it.
  if (queued_here && st_.final_callback_queued) return fsdp().post_backward_final_callback(done, res_.grads);
  return {};
}

}  // namespace fsdpsim
