// RealRank: the model before and after prepare, op dispatch, and the per-op report
// read off the real objects.
#include "real_backend/real_rank.hpp"

#include <stdexcept>
#include <string>
#include "real_backend/activation_dtype.hpp"

#include <ATen/core/grad_mode.h>

#include <tuple>

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
                                  : (c.op == CollOp::AllGather || c.dtensor_reduce) && c.members.size() == 1 ? c.count
                                                                                       : ps.chunk_numel()});
    }
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace

RealRank::RealRank(const Layout& layout, uint64_t seed, Comm* comm)
    : layout_(&layout),
      seed_(seed),
      comm_(comm),
      params_(layout),
      pg_{comm},
      fsdp_(layout, params_, pg_),
      dtensor_(layout, params_, fsdp_, pg_),
      optimizer_(layout, params_, fsdp_),
      accelerator_(layout, seed, params_, fsdp_, dtensor_, pg_, optimizer_),
      ckpt_(layout, params_),
      peft_(layout, params_, fsdp_, dtensor_, pg_, ckpt_, accelerator_) {
  name_collectives(*comm_, layout);
  reset();
}

// from_pretrained (with ram-efficient loading only rank 0 holds values, the
// others' base weights are on meta), get_peft_model + add_adapter for each
// declared adapter; then prepare (fully_shard: each rank keeps its chunk),
// unless a `prepare` op runs it later.
void RealRank::reset() {
  params_.reset();
  fsdp_.reset();
  ckpt_.reset();
  loss_ = at::Tensor();
  have_output_ = false;
  accelerator_.place_base_params();
  peft_.get_peft_model();
  optimizer_.reset();  // no optimizer before accelerate's prepare builds it
  if (!layout_->explicit_prepare) accelerator_.prepare();
}

RankReport RealRank::apply(const Op& op, int step) {
  pg_.step = step;
  res_ = OpResult{};
  comm_->issued().clear();
  comm_->crossed().clear();
  fsdp_.begin_op();  // the op's start counts in its memory peak
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
    case OpKind::Forward: forward(true); break;
    case OpKind::Eval: forward(false); break;
    case OpKind::Generate: generate(std::stoi(op.names[0])); break;
    case OpKind::Backward: backward(); break;
    case OpKind::Step: optimizer_.step(); break;
    case OpKind::ZeroGrad: optimizer_.zero_grad(); break;
    case OpKind::TrainStep:
      optimizer_.zero_grad();
      forward(true);
      backward();  // a raise skips the step
      optimizer_.step();
      break;
    case OpKind::Merge: peft_.merge(op); break;
    case OpKind::Unmerge: peft_.unmerge_adapter(); break;
    case OpKind::SetAdapter: peft_.set_adapter(op); break;
    case OpKind::DisableEnter: peft_.disable_enter(); break;
    case OpKind::DisableExit: peft_.disable_exit(); break;
    case OpKind::AddAdapter: peft_.add_adapter(adapter(), layout_->adapters[adapter()].inference_mode, false, false); break;
    case OpKind::LoadAdapter: peft_.add_adapter(adapter(), !op.trainable, true, op.trainable); break;
    case OpKind::DeleteAdapter: peft_.delete_adapter(adapter()); break;
    case OpKind::Reshard:
    case OpKind::Unshard: {
      // FSDPModule.reshard()/unshard(): one module's group, or every module's.
      int only = op.names.empty() ? -1 : layout_->group_of_module(op.names[0]);
      if (!op.names.empty() && only < 0) break;
      for (size_t g = 0; g < layout_->groups.size(); ++g) {
        if (only >= 0 && static_cast<int>(g) != only) continue;
        if (op.kind == OpKind::Reshard) fsdp_.groups[g].module_reshard();
        else {
          fsdp_.groups[g].lazy_init();  // _fully_shard.py::FSDPModule.unshard runs the group's lazy_init each call
          fsdp_.groups[g].unshard();
        }
      }
      break;
    }
    case OpKind::StateDict: fsdp_.reshard_all(); break;  // the state-dict pre-hook
    case OpKind::SaveOptimizer: optimizer_.save(&res_.index); break;
    case OpKind::LoadOptimizer: optimizer_.load(&res_.index); break;
    case OpKind::SaveAdapters: peft_.save_adapters(op, &res_); break;
    case OpKind::LoadAdapters: peft_.load_adapters(&res_); break;
    case OpKind::DeltaWeight: peft_.delta_weight(layout_->layer_named(op.names[0]), &res_); break;
    case OpKind::Prepare: accelerator_.prepare(); break;
    case OpKind::NewOptimizer: optimizer_.renew(); break;
    case OpKind::GradientSync: fsdp_.set_requires_gradient_sync(op.sync); break;
    // never an observation: every command refuses such a file first (sim/core/crosscheck.cpp::real_backend_refusal)
    case OpKind::SaveModel:
    case OpKind::LoadModel:
    case OpKind::MergeAndUnload: throw std::logic_error(std::string(op_name(op.kind)) + " reached the C++ backend, which does not implement it");
  }
}

// PeftModel.forward under the FSDP2 hooks: the root's pre-forward first, each
// child group unshards at its first module and reshards after its last, the
// root's post-forward last (_fsdp_state.py::FSDPState._pre_forward/_post_forward).
// `loss = model(x)` that raises never assigns: a later backward runs on the previous output,
// whose graph each group's out_rg and in_rg describe (the FSDP state the raised forward changed stays).
void RealRank::forward(bool grad_enabled) {
  std::vector<std::pair<bool, bool>> prev;  // per group: out_rg, in_rg
  for (const FsdpParamGroup& gr : fsdp_.groups) prev.emplace_back(gr.out_rg, gr.in_rg);
  try {
    forward_hooks(grad_enabled);
  } catch (...) {
    for (size_t g = 0; g < fsdp_.groups.size(); ++g) std::tie(fsdp_.groups[g].out_rg, fsdp_.groups[g].in_rg) = prev[g];
    throw;
  }
}

// An RL rollout's decode steps on a Linear stack (upstream op_table.py::run_generate): under
// no_grad, each step's input is the previous step's output when that has the batch's shape, else
// the batch again. Nothing of the output is kept beyond the loss the last step leaves.
void RealRank::generate(int steps) {
  struct Clear {
    at::Tensor& feed;
    at::Tensor& out;
    ~Clear() { feed = out = at::Tensor(); }
  } clear{feed_, out_};
  for (int step = 0; step < steps; ++step) {
    forward(false);
    feed_ = out_;
  }
}

void RealRank::forward_hooks(bool grad_enabled) {
  at::AutoGradMode mode(grad_enabled);
  fsdp_.lazy_init();
  ckpt_.begin_forward();
  fsdp_.root_pre_forward();
  const int root = fsdp_.root();
  peft_.check_active_config();
  // `data same`: every rank reads rank 0's batch; `per_rank`: its own (a DistributedSampler's shard).
  std::vector<float> x = rank_input(*layout_, seed_, layout_->data == Data::PerRank ? comm_->rank() : 0);
  at::Tensor h = at::from_blob(x.data(), {static_cast<int64_t>(x.size()) / layout_->layers.front().in, layout_->layers.front().in}, at::kFloat).clone();
  if (feed_.defined() && feed_.sizes() == h.sizes()) h = feed_.to(at::kFloat);  // generate's previous output
  const bool mp = layout_->mixed_precision;
  // session.py Net.forward: `x = x.to(dtype)`, after the root's pre-forward (whose input cast never
  // reaches a layer); under a policy the activation then carries its real dtype.
  if (mp) h = h.to(scalar_type_of(layout_->dtype));
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    int g = layout_->layers[l].group;
    const GroupSpec& gs = layout_->groups[g];
    bool child = g != root;
    if (child && gs.first_layer == static_cast<int>(l)) {
      peft_.layer(static_cast<int>(l)).activate_lora();
      fsdp_.pre_forward(g, h);
    }
    // A child group's FSDP module (each member of a grouped one: _fsdp_state.py::
    // _register_group_forward_hooks runs its hooks per module) casts what enters and leaves it.
    const bool module_hooks = mp && child && !layout_->layers[l].lora_after_fsdp;
    if (module_hooks) h = fsdp_cast_in(gs, h);
    at::Tensor base_out;
    const at::Tensor in = h;
    const bool ckpt = layout_->layers[l].checkpoint;
    if (ckpt) ckpt_.start_saving(static_cast<int>(l));
    try {
      h = peft_.layer_forward(static_cast<int>(l), h, &base_out);
    } catch (...) {
      ckpt_.stop_saving();
      if (child && gs.layers.size() > 1 && gs.last_layer == static_cast<int>(l)) fsdp_.post_forward_on_raise(g);
      throw;
    }
    ckpt_.stop_saving();
    if (ckpt) ckpt_.forward(static_cast<int>(l), in, h);
    // A layer wrapped after fully_shard: the FSDP module is its base layer.
    if (child && gs.last_layer == static_cast<int>(l)) fsdp_.post_forward(g, layout_->layers[l].lora_after_fsdp ? base_out : h);
    // _fsdp_state.py::FSDPState._post_forward: the pre-backward hook sits on the output before its
    // output_dtype cast; a cast that changes the dtype is a new tensor, the next one's input.
    if (module_hooks) h = fsdp_cast_out(gs, h);
    if (l + 1 < layout_->layers.size()) h = at::relu(h);
  }
  fsdp_.root_post_forward(h);
  out_ = h.detach();
  ckpt_.register_hooks([this](int layer, const at::Tensor& in) { return peft_.layer_forward(layer, in); });
  loss_ = h.sum();
  have_output_ = true;
}

// loss.backward() by libtorch autograd (its own error when nothing requires
// grad), then the FSDP2 hook sequence in the order the hooks fire: the root's
// pre-backward, the children's in reverse forward order (a child whose input
// required grad runs post_backward there), the root's final callback for the rest.
void RealRank::backward() {
  if (!have_output_) throw OpError(Status::ValueError, "backward without a forward output");
  have_output_ = false;
  // Unmanaged leaves (adapters added after fully_shard) get their grad from autograd directly.
  std::vector<std::pair<at::TensorImpl*, int64_t>> before(params_.size(), {nullptr, -1});
  for (size_t p = 0; p < params_.size(); ++p) {
    if (params_.group_of(static_cast<int>(p)) >= 0 || !params_[p].leaf.s.defined()) continue;
    const at::Tensor& gr = params_[p].leaf.s.grad();
    if (gr.defined()) before[p] = {gr.unsafeGetTensorImpl(), gr._version()};
  }
  const std::vector<std::pair<int, int>> copied = fsdp_.copy_requires_grad_before_backward();
  // A checkpointed layer's recompute that raises stops autograd there: the hooks that fired
  // ran, the groups above that layer finished their post_backward, the final callback never runs.
  std::exception_ptr recompute_raised;
  ckpt_.begin_backward();
  const bool queued_here = !fsdp_.final_callback_queued;
  try {
    loss_.backward();
  } catch (const OpError&) {
    recompute_raised = std::current_exception();
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    loss_ = at::Tensor();
    throw OpError(msg.find("does not require grad") != std::string::npos ? Status::NoGradFn : Status::ValueError, msg);
  }
  loss_ = at::Tensor();
  const std::vector<uint8_t> done = fsdp_.run_backward_hooks(copied, recompute_raised != nullptr, ckpt_.raised(), &res_.grads);
  for (size_t p = 0; p < params_.size(); ++p) {
    if (params_.group_of(static_cast<int>(p)) >= 0 || !params_[p].leaf.s.defined()) continue;
    const at::Tensor& gr = params_[p].leaf.s.grad();
    if (!gr.defined()) continue;
    bool fresh = before[p].first != gr.unsafeGetTensorImpl() || before[p].second != gr._version();
    if (fresh && layout_->params[p].adapter >= 0) res_.grads.insert(layout_->params[p].adapter);
  }
  if (recompute_raised) std::rethrow_exception(recompute_raised);
  fsdp_.post_backward_final_callback(queued_here, done, &res_.grads);
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
      if (peft_.in_some_layer(a)) r.grads->push_back(layout_->adapters[a].name);
  }
  for (int a : peft_.active()) r.active.push_back(layout_->adapters[a].name);
  r.disabled = peft_.disabled();
  r.deltas = res_.deltas;
  r.delta_layer = res_.delta_layer;
  r.delta_values = res_.delta_values;
  int first = -1;
  std::vector<std::string> unregistered;
  r.opt_missing = optimizer_.missing(&first, &unregistered);
  r.opt_unregistered.assign(unregistered.begin(), unregistered.end());
  r.opt_total = optimizer_.size();
  // A group is UNSHARDED when its parameters' names hold their U objects.
  // Before prepare there is no FSDP: no groups (and no group of a parameter or layer).
  for (size_t g = 0; g < layout_->groups.size() && fsdp_.prepared; ++g) {
    bool u = false;
    for (int p : layout_->groups[g].params)
      if (params_.registered(p).defined()) {
        u = params_[p].holds_unsharded();
        break;
      }
    r.groups.push_back({layout_->groups[g].name, u ? ShardedState::Unsharded : ShardedState::Sharded});
  }
  const size_t n = layout_->params.size();
  r.present.assign(n, 0);
  r.u_registered.assign(n, 0);
  r.u_cast.assign(n, 0);
  r.whole.assign(n, 0);
  r.adam_steps.assign(n, 0);
  r.s_values.assign(n, {});
  r.u_values.assign(n, {});
  for (size_t p = 0; p < n; ++p) {
    const ParamSpec& ps = layout_->params[p];
    const ParamTensors& rp = params_[p].leaf;
    bool present = params_.registered(p).defined();
    r.present[p] = present;
    if (rp.s.defined() && !rp.s.is_meta()) {
      // Read in place (no detach or copy: a report is taken after every op, for every parameter).
      at::Tensor s = rp.s.is_contiguous() ? rp.s : rp.s.detach().contiguous();
      const float* v = s.data_ptr<float>();
      if (!fsdp_.prepared && ps.group >= 0) {  // before prepare a managed parameter is whole: report the chunk fully_shard will keep
        at::Tensor c = dtensor_.chunk_of(std::vector<float>(v, v + s.numel()), ps);
        r.s_values[p].assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      } else {
        r.s_values[p].assign(v, v + s.numel());
      }
    }
    bool holds_u = params_[p].holds_unsharded();
    r.u_registered[p] = holds_u;
    r.u_cast[p] = holds_u && params_[p].mp_param_dtype.has_value();
    r.whole[p] = params_[p].detached;
    r.adam_steps[p] = rp.adam_step;
    if (holds_u) {
      at::Tensor u = rp.u.is_contiguous() ? rp.u : rp.u.detach().contiguous();
      r.u_values[p].assign(u.data_ptr<float>(), u.data_ptr<float>() + u.numel());
    }
    if (ps.adapter < 0 || !present) continue;
    ParamObs po;
    po.name = ps.name;
    po.group = params_.group_of(static_cast<int>(p)) >= 0 && fsdp_.prepared ? layout_->groups[ps.group].name : "";
    po.rg_s = rp.s.requires_grad();
    po.rg_u = rp.u.defined() ? static_cast<int8_t>(rp.u.requires_grad()) : int8_t{-1};
    po.device = rp.place.is_meta() ? Device::Meta : Device::Cpu;
    po.dtype = dtype_of(rp.place);
    r.params.push_back(po);
  }
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    std::vector<std::string> m;
    for (int a : peft_.merged(static_cast<int>(l))) m.push_back(layout_->adapters[a].name);
    r.merged.push_back(m);
  }
  r.collectives = collectives_of(*layout_, comm_->issued());
  r.saved = res_.saved;
  r.reload_diff.assign(res_.reload_diff.begin(), res_.reload_diff.end());
  r.reload_coincident.assign(res_.reload_coincident.begin(), res_.reload_coincident.end());
  r.sharded_bytes = accelerator_.sharded_bytes();
  r.peak_unsharded = fsdp_.peak_owners;
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
