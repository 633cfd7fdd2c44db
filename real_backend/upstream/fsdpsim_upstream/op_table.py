"""The op table: one row per op of the .seq vocabulary (model/vocab/op.hpp), the only place
an op's library calls are written. `session.py` runs a row on the real objects
(`row.run(session, op)`) and `export.py` prints it as script lines (`row.write(writer, op,
indent)`). Where both make the same calls, the row holds them as data (op_calls.Call) and
both sides use them; a row adds its own `run` or `write` only for what one side does
besides: the harness's bookkeeping for the observations, a fix a profile switch asks for,
what the script spells differently. A new op is one row here.

The ops that save or load checkpoints have their functions in op_checkpoints.py."""
from . import op_checkpoints as ckpt
from .candidate_fixes import add_adapter_rollback
from .op_calls import Call, autocast, config, perform_all, print_all, refusal


class Row:
    """kind: the op's name in the .seq grammar. calls(scen, op): its library calls (data).
    run(s, op) / write(w, op, ind): the executor and the printer where the calls alone are not
    the op (default: perform / print the calls). needs_fsdp: the op calls FSDP or
    torch.distributed itself (a --plain script, which has no process group, refuses it). forward_pass: the op runs the
    model's forward or backward (session.run_op keeps the late delta fix off it)."""

    def __init__(self, kind, calls=None, run=None, write=None, needs_fsdp=False, forward_pass=False):
        self.kind, self.calls = kind, calls or (lambda scen, op: [])
        self._run, self._write = run, write
        self.needs_fsdp, self.forward_pass = needs_fsdp, forward_pass

    def run(self, s, op):
        if self._run:
            self._run(s, op, self.calls(s.scen, op))
        else:
            perform_all(s, self.calls(s.scen, op))

    def write(self, w, op, ind):
        if self._write:
            self._write(w, op, ind, self.calls(w.scen, op))
        else:
            print_all(w, self.calls(w.scen, op), ind)


# -- forward, backward, the optimizer ---------------------------------------------------------
def loss_text(w):
    return "model(x).float().sum()" if w.scen.dtype != "fp32" else "model(x).sum()"


def forward(s, grad):
    import torch

    from . import model_scenario  # torch at import: the op table itself imports without it (export)
    with torch.set_grad_enabled(grad):
        s.pending_loss = model_scenario.loss(s.pm, s.x) if s.scen.model else s.pm(s.x).float().sum()


def write_forward(w, op, ind, calls):
    w.emit(f"{ind}loss = {loss_text(w)}")


def write_eval(w, op, ind, calls):
    w.emit(f"{ind}with torch.no_grad():")
    w.emit(f"{ind}    model(x)")


def run_generate(s, op, calls):
    """generate N on a Linear stack: an RL rollout's N decode steps as N forwards under no_grad,
    each fed the previous output where it has the batch's shape (a square stack), else the batch.
    The last output is the pending loss, as eval's (a backward of it raises)."""
    import torch
    if s.scen.model:
        from . import model_scenario
        s.pending_loss = model_scenario.generate(s.pm, s.x, int(op.names[0]))
        return
    x = s.x
    with torch.no_grad():
        for _ in range(int(op.names[0])):
            out = s.pm(x)
            x = out if out.shape == s.x.shape else s.x
    s.pending_loss = out.float().sum()


def write_generate(w, op, ind, calls):
    if w.scen.model:  # the call a rollout makes (model_scenario.generate)
        w.emit(f"{ind}with torch.no_grad():  # generate {op.names[0]}: PeftModel.generate skips the root unit's FSDP hooks")
        w.emit(f"{ind}    model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens={op.names[0]},")
        w.emit(f"{ind}                   min_new_tokens={op.names[0]}, do_sample=False, pad_token_id=0)")
        return
    w.emit(f"{ind}with torch.no_grad():  # generate {op.names[0]}: the decode steps of a rollout")
    w.emit(f"{ind}    gen = x")
    w.emit(f"{ind}    for _ in range({op.names[0]}):")
    w.emit(f"{ind}        out = model(gen)")
    w.emit(f"{ind}        gen = out if out.shape == x.shape else x")


def backward_calls(scen, op):
    return [Call("loss", "backward")]


def run_backward(s, op, calls):
    if s.pending_loss is None:
        raise refusal("backward without a forward output")
    loss, s.pending_loss = s.pending_loss, None
    perform_all(s, calls, {"loss": loss})


def step_calls(scen, op):
    return [Call("opt", "step", optional=True)]


def write_step(w, op, ind, calls):
    if w.opt_made:
        print_all(w, calls, ind)
    else:
        w.emit(f"{ind}pass  # step: no optimizer (nothing was trainable)")


def zero_grad_calls(scen, op):
    # exactly a training loop's two calls: the optimizer's objects (torch/optim/optimizer.py::
    # Optimizer.zero_grad) and the objects the modules register now (torch/nn/modules/module.py::
    # Module.zero_grad), so a shard's grad stays while its group is unsharded and no optimizer holds it
    return [Call("opt", "zero_grad", set_to_none=True, optional=True), Call("model", "zero_grad", set_to_none=True)]


def run_train_step(s, op, calls):
    perform_all(s, zero_grad_calls(s.scen, op))
    forward(s, True)
    run_backward(s, op, backward_calls(s.scen, op))
    perform_all(s, step_calls(s.scen, op))


def write_train_step(w, op, ind, calls):
    print_all(w, zero_grad_calls(w.scen, op), ind)
    if w.opt_made:
        w.emit(f"{ind}{loss_text(w)}.backward()")
        print_all(w, step_calls(w.scen, op), ind)
    else:  # nothing was trainable at the start: torch refuses a backward through no trainable parameter
        w.emit(f"{ind}loss = {loss_text(w)}")
        w.emit(f"{ind}if loss.requires_grad:")
        w.emit(f"{ind}    loss.backward()")


def run_new_optimizer(s, op, calls):
    if s.prepared:
        s.build_optimizer()


def write_new_optimizer(w, op, ind, calls):
    # what the modules hold now, a shard where FSDP registered one
    sel = "p.requires_grad" if w.scen.optimizer == "trainable" else "'.lora_' in n or 'modules_to_save' in n"
    w.emit(f"{ind}opt = torch.optim.AdamW([{'shards.get(n, p)' if w.fsdp else 'p'} for n, p in "
           f"model.named_parameters() if {sel}], lr=1e-2)")


# -- the adapters -----------------------------------------------------------------------------
def set_adapter_calls(scen, op):
    if op.list_form:
        return [Call("model.base_model", "set_adapter", list(op.names))]
    return [Call("model", "set_adapter", op.names[0])]


def reshard_unmerged(s):
    """FSDPModule.reshard on every FSDP module holding no merged layer (peft#3872's
    _reshard_fsdp_modules; flag-on-copy.patch's tuners_utils.py::_reshard_fsdp2_modules)."""
    for g, m in s.fsdp_modules:
        if not any(getattr(s.layer(l.name), "merged", False) for l in s.scen.layers if s.group_of_layer(l.name) == g):
            m.reshard()


def write_reshard_unmerged(w, ind):
    w.emit(f"{ind}for m in ({', '.join(w.groups())},):")
    w.emit(f"{ind}    if not any(getattr(l, 'merged', False) for l in m.modules()):")
    w.emit(f"{ind}        m.reshard()")


def tuner_flags_reshard(sw):
    """tuner_flags_reshard=on, docs/findings/flag-on-copy.patch: the tuner reshards every FSDP module
    holding no merged layer before it writes adapter flags (module-level tuners_utils.py::set_adapter,
    BaseTuner._enable_adapter_layers, BaseTuner.delete_adapter)."""
    return sw.get("tuner_flags_reshard", "off") == "on"


def run_set_adapter(s, op, calls):
    if not op.list_form:  # the list form is BaseTuner.set_adapter: no set_adapter_reshard fix applies there
        mode = s.sw["set_adapter_reshard"]
        if mode == "unmerge_first":
            s.unmerge_and_reshard_all()
        elif mode == "skip_merged":
            reshard_unmerged(s)
    # tuner_flags_reshard: after PeftModel.set_adapter's own check, both forms reach the module-level
    # set_adapter, which (patched) unmerges every layer and then reshards
    if tuner_flags_reshard(s.sw) and (op.list_form or op.names[0] in s.pm.peft_config):
        for m in s.lora_layers():
            if getattr(m, "merged", False):
                m.unmerge()
        reshard_unmerged(s)
    perform_all(s, calls)


def write_tuner_flags_reshard(w, ind, unmerge=False):
    if tuner_flags_reshard(w.sw) and w.fsdp:
        w.fix(ind, "reshard each FSDP module holding no merged layer before adapter flags change", "tuner_flags_reshard")
        if unmerge:
            w.emit(f"{ind}model.base_model.unmerge_adapter()")
        write_reshard_unmerged(w, ind)


def write_set_adapter(w, op, ind, calls):
    # the script writes the switch's fix before either form; the session applies it before
    # PeftModel.set_adapter alone (run_set_adapter): kept as both were
    if w.sw["set_adapter_reshard"] == "unmerge_first" and w.fsdp:
        w.fix(ind, "unmerge, reshard every FSDP module, then set_adapter", "set_adapter_reshard")
        w.emit(f"{ind}model.base_model.unmerge_adapter()")
        w.reshard_all(ind)
    elif w.sw["set_adapter_reshard"] == "skip_merged" and w.fsdp:
        w.fix(ind, "reshard each FSDP module that holds no merged layer", "set_adapter_reshard")
        write_reshard_unmerged(w, ind)
    write_tuner_flags_reshard(w, ind, unmerge=True)
    print_all(w, calls, ind)


def disable_enter_calls(scen, op):
    return [Call("model", "disable_adapter", into="ctx"), Call("ctx", "__enter__")]


def run_disable_enter(s, op, calls):
    if s.disable_ctx is not None:
        raise refusal("disable_enter inside disable_adapter(): the context is already entered")
    # tuner_flags_reshard: in _enable_adapter_layers, after the config reads that may raise KeyError
    tuner = s.pm.base_model
    if tuner_flags_reshard(s.sw) and all(a in s.pm.peft_config for a in [s.pm.active_adapter, *tuner.active_adapters]):
        reshard_unmerged(s)
    names = {}
    perform_all(s, calls, names)
    s.disable_ctx = names["ctx"]  # only once entered


def write_disable_enter(w, op, ind, calls):
    write_tuner_flags_reshard(w, ind)
    print_all(w, calls, ind)


def disable_exit_calls(scen, op):
    return [Call("ctx", "__exit__", None, None, None)]


def run_disable_exit(s, op, calls):
    if s.disable_ctx is None:
        raise refusal("disable_exit outside disable_adapter(): no matching disable_enter")
    if s.sw["disable_exit_reshard"] == "on":
        s.unmerge_and_reshard_all()
    if tuner_flags_reshard(s.sw):  # _enable_adapter_layers(True)
        reshard_unmerged(s)
    ctx, s.disable_ctx = s.disable_ctx, None
    perform_all(s, calls, {"ctx": ctx})
    if s.sw["enable_inference_mode"] == "respect":
        # the fix of #3453: adapters whose config says inference_mode stay frozen
        # (LoRA layers only: ModulesToSaveWrapper.enable_adapters is not part of that fix)
        from . import observe
        for a in s.pm.base_model.active_adapters:
            if s.pm.peft_config[a].inference_mode:
                for n, p in s.named_adapter_params():
                    owner = observe.owner_of(s, n)
                    if owner is not None and owner[1] != "modules_to_save" and owner[2] == a:
                        p.requires_grad_(False)


def write_disable_exit(w, op, ind, calls):
    if w.sw["disable_exit_reshard"] == "on" and w.fsdp:
        w.fix(ind, "unmerge and reshard before the exit re-enables adapters", "disable_exit_reshard")
        w.emit(f"{ind}model.base_model.unmerge_adapter()")
        w.reshard_all(ind)
    write_tuner_flags_reshard(w, ind)
    print_all(w, calls, ind)
    if w.sw["enable_inference_mode"] == "respect":
        w.fix(ind, "enable_adapters keeps an inference_mode adapter frozen", "enable_inference_mode")
        w.emit(f"{ind}for n, p in model.named_parameters():")
        w.emit(f"{ind}    if '.lora_' in n and model.peft_config[n.split('.')[-2]].inference_mode:")
        w.emit(f"{ind}        p.requires_grad_(False)")


def add_adapter_calls(scen, op):
    """PeftModel.add_adapter; the scenario's build adds its later adapters with the same call."""
    a = scen.adapter(op.names[0])
    return [Call("model", "add_adapter", a.name, config(a), autocast_adapter_dtype=autocast(a))]


def run_add_adapter(s, op, calls):
    with add_adapter_rollback(s, op.names[0]):
        perform_all(s, calls)
    s.move_per_adapter(op.names[0])
    if s.scen.model:  # the targets PEFT matched for it (observe.owners reads them)
        from . import model_scenario
        model_scenario.resolve_targets(s)


# -- FSDP's own calls -------------------------------------------------------------------------
def run_reshard_unshard(s, op, calls):
    """FSDPModule.reshard / unshard on the module named (every member of a grouped
    fully_shard([...]) is an FSDPModule sharing the group's state: the whole group moves,
    torch _fully_shard.py::FSDPModule.unshard), or on every FSDP module. The module is the one
    fully_shard was given, wherever PEFT has moved it since: an adapter injected later wraps it
    as its base_layer (peft tuners/lora/layer.py LoraLayer, tuners_utils.py get_base_layer).
    A module no fully_shard was given has neither method: the harness does nothing (as the model)."""
    from torch.distributed.fsdp import FSDPModule
    targets = [m for _, m in s.fsdp_modules]
    if op.names:
        m = s.fsdp_module_of.get(op.names[0])
        targets = [m] if isinstance(m, FSDPModule) else []
    for m in targets:
        getattr(m, op.kind)()


def wrapped_later(w, layer):
    """Only an adapter added after fully_shard targets the layer: PEFT then wraps the FSDP module in a
    LoRA layer, its base_layer (peft tuners_utils.py BaseTunerLayer.get_base_layer)."""
    live = [a for a in w.scen.adapters if not a.deferred]
    return (any(layer in a.targets for a in w.scen.adapters if a.deferred) and
            not any(layer in a.targets or layer in a.modules_to_save for a in live))


def write_reshard_unshard(w, op, ind, calls):
    k = op.kind
    if not op.names:
        for g in w.groups():
            w.emit(f"{ind}{g}.{k}()")
    elif not any(op.names[0] in d.modules for d in w.scen.shards):
        w.emit(f"{ind}pass  # {op.names[0]} was given to no fully_shard: nothing to {k}")
    elif op.names[0] == "root":
        w.emit(f"{ind}model.{k}()")
    elif wrapped_later(w, op.names[0]):  # an adapter added after fully_shard wraps the FSDP module
        w.emit(f"{ind}getattr({w.layer(op.names[0])}, 'base_layer', {w.layer(op.names[0])}).{k}()")
    else:  # the module fully_shard was given (each member of a grouped call moves the whole group)
        w.emit(f"{ind}{w.layer(op.names[0])}.{k}()")


def run_prepare(s, op, calls):
    s.prepare()


def write_prepare(w, op, ind, calls):
    w.shard(ind)


# -- get_delta_weight -------------------------------------------------------------------------
def run_delta_weight(s, op, calls):
    """get_delta_weight of each active adapter of the layer, as PEFT computes it on whatever is
    registered (delta_weight_gather=on has made A and B full first: session.patch_delta_weight).
    The coordinator judges each against the full B @ A."""
    m = s.layer(op.names[0])
    s.deltas = {}
    for a in s.pm.base_model.active_adapters:
        if a not in getattr(m, "lora_A", {}):  # a layer no adapter targets has no delta
            continue
        s.deltas[a] = m.get_delta_weight(a)


def write_delta_weight(w, op, ind, calls):
    w.emit(f"{ind}layer = {w.layer(op.names[0])}")
    w.emit(f"{ind}deltas = {{a: layer.get_delta_weight(a) for a in model.base_model.active_adapters "
           f"if a in layer.lora_A}}")


def run_delete_adapter(s, op, calls):
    # tuner_flags_reshard: BaseTuner.delete_adapter reshards after its config and merged checks
    if tuner_flags_reshard(s.sw) and op.names[0] in s.pm.peft_config and not any(
            op.names[0] in getattr(m, "merged_adapters", []) for m in s.lora_layers()):
        reshard_unmerged(s)
    if s.sw.get("delete_fallback", "per_layer") != "shared":
        perform_all(s, calls)
        return
    # delete_fallback=shared, docs/findings/delete-fallback-per-layer.patch around the real call: every layer
    # that lost its active adapter takes the first layer's pick (module-level tuners_utils.py::delete_adapter),
    # then an active adapter whose config has inference_mode is frozen again (BaseTuner.delete_adapter)
    from peft.tuners.tuners_utils import BaseTunerLayer
    tuner = s.pm.base_model
    layers = [m for k, m in tuner.model.named_modules() if tuner.prefix not in k and isinstance(m, tuner.tuner_layer_cls)]
    was_active = [op.names[0] in m.active_adapters for m in layers]
    perform_all(s, calls)
    if not layers:
        return
    pick = layers[0].active_adapters[:]
    for m, was in zip(layers[1:], was_active[1:]):
        if was and m.active_adapters != pick:
            m.set_adapter(pick)
    frozen = [a for a in tuner.active_adapters if getattr(s.pm.peft_config.get(a), "inference_mode", False)]
    for m in layers:
        if frozen and isinstance(m, BaseTunerLayer):
            m.set_requires_grad(frozen, requires_grad=False)

def write_delete_adapter(w, op, ind, calls):
    write_tuner_flags_reshard(w, ind)
    print_all(w, calls, ind)


ROWS = (
    Row("forward", run=lambda s, op, calls: forward(s, True), write=write_forward, forward_pass=True),
    Row("eval", run=lambda s, op, calls: forward(s, False), write=write_eval, forward_pass=True),
    Row("backward", backward_calls, run=run_backward, forward_pass=True),
    Row("step", step_calls, write=write_step),
    Row("train_step", run=run_train_step, write=write_train_step, forward_pass=True),
    Row("zero_grad", zero_grad_calls),
    Row("generate", run=run_generate, write=write_generate, forward_pass=True),
    # BaseTuner._unload_and_optionally_merge: each LoRA layer merges its active adapters and is
    # replaced by its base layer, in the tree FSDP sharded
    Row("merge_and_unload", lambda scen, op: [Call("model.base_model", "merge_and_unload")]),
    Row("merge", lambda scen, op: [Call("model.base_model", "merge_adapter", *([list(op.names)] if op.names else []))]),
    Row("unmerge", lambda scen, op: [Call("model.base_model", "unmerge_adapter")]),
    Row("set_adapter", set_adapter_calls, run=run_set_adapter, write=write_set_adapter),
    Row("disable_enter", disable_enter_calls, run=run_disable_enter, write=write_disable_enter),
    Row("disable_exit", disable_exit_calls, run=run_disable_exit, write=write_disable_exit),
    Row("add_adapter", add_adapter_calls, run=run_add_adapter),
    Row("load_adapter", ckpt.load_adapter_calls, run=ckpt.run_load_adapter, write=ckpt.write_load_adapter),
    Row("delete_adapter", lambda scen, op: [Call("model", "delete_adapter", op.names[0])], run=run_delete_adapter,
        write=write_delete_adapter),
    Row("reshard", run=run_reshard_unshard, write=write_reshard_unshard, needs_fsdp=True),
    Row("unshard", run=run_reshard_unshard, write=write_reshard_unshard, needs_fsdp=True),
    Row("state_dict", lambda scen, op: [Call("model", "state_dict")]),
    Row("save_optimizer", run=ckpt.run_save_optimizer, write=ckpt.write_optimizer_checkpoint, needs_fsdp=True),
    Row("load_optimizer", run=ckpt.run_load_optimizer, write=ckpt.write_optimizer_checkpoint, needs_fsdp=True),
    Row("save_adapters", run=ckpt.run_save_adapters, write=ckpt.write_save_adapters),
    Row("load_adapters", run=ckpt.run_load_adapters, write=ckpt.write_load_adapters),
    Row("delta_weight", run=run_delta_weight, write=write_delta_weight),
    Row("prepare", run=run_prepare, write=write_prepare, needs_fsdp=True),
    Row("new_optimizer", run=run_new_optimizer, write=write_new_optimizer),
    # the root's FSDPModule.set_requires_gradient_sync (recurse=True: every FSDP module's reduce_grads)
    Row("gradient_sync", lambda scen, op: [Call("model", "set_requires_gradient_sync", op.names[0] == "on")],
        needs_fsdp=True),
    Row("save_model", run=ckpt.run_save_model, write=ckpt.write_save_model, needs_fsdp=True),
    Row("load_model", run=ckpt.run_load_model, write=ckpt.write_load_model, needs_fsdp=True),
)

ROW = {r.kind: r for r in ROWS}
