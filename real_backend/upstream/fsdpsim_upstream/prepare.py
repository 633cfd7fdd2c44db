"""The `prepare` op: accelerate's own `Accelerator.prepare(model, optimizer)`
with an FSDP2 plugin, which shards the children (its auto-wrap) and the root,
where the scenario lets it run; the direct `fully_shard` + AdamW path (what
accelerate's steps do, one by one) where it cannot. Which one ran, or the
reason key (REASONS) why not accelerate, is kept on the session (`prepared_by`)
and reported to crosscheck's summary. The reasons are measured on CPU gloo with
accelerate 1.15.0 / torch 2.13 (docs/design/upstream-backend.md)."""
import contextlib
import sys

import torch
from torch.distributed.fsdp import fully_shard

from . import observe
from .collectives import REC

RAF = {"true": True, "false": False, "none": None}


# A fallback's reason key (what crosscheck's summary counts) and why accelerate's path cannot run.
REASONS = {
    "prepare_twice": "prepare after prepare: accelerate's fsdp2_prepare_model leaves an FSDPModule as it is",
    "root_not_last": "accelerate shards the root, always last (fsdp2_prepare_model)",
    "nothing_trainable": ("nothing for the optimizer: under FSDP2 Accelerator.prepare raises 'When using FSDP2, "
                          "a model and optimizer must be passed together'"),
    "grouped": ("a second grouped fully_shard([a, b]), or a layer beside the group's first named with 'Norm': "
                "the one grouped unit fsdp2_prepare_model makes is its tail [final norm, output embedding], "
                "the final norm found as the last child whose class name holds 'Norm' (_find_final_norm)"),
    "mp_override": ("a fully_shard line that overrides the mixed_precision policy: accelerate's plugin "
                    "passes one mp_policy to every fully_shard (fsdp2_prepare_model)"),
    "checkpoint_child": ("more checkpointed layers sharded as children than fsdp2_prepare_model has units of one "
                         "named module for (the input embedding, and the tail where no group takes it): its "
                         "auto-wrap, bottom-up, shards the module inside a CheckpointWrapper and then the wrapper "
                         "as an empty unit, where the scenario shards the wrapper"),
    "model_lines": ("a transformers model sharded by fully_shard lines: accelerate's auto-wrap picks its units "
                    "by decoder-layer class (fully_shard_plan transformer_layers), not by path"),
    "unit_order": ("children in an order fsdp2_prepare_model does not shard them in: its auto-wrap units "
                   "bottom-up (layer order), then the input embedding, then the tail"),
}


class Units:
    """Where each child the scenario shards sits in accelerate's fsdp2_prepare_model, which makes,
    in this order, its auto-wrap units (one module each, picked by class name), the input
    embedding's unit (get_input_embeddings(), one module) and its tail (fully_shard([final norm,
    output embedding]), reshard_after_forward=False). A checkpointed child cannot be an auto-wrap
    unit (the policy looks through the CheckpointWrapper): it is the input embedding, or else the
    tail alone; a group [a, b] is the tail, a as the final norm, b as the output embedding."""

    def __init__(self, scen):
        self.children = [d for d in scen.shards if not d.is_root]
        self.groups = [d for d in self.children if len(d.modules) > 1]
        self.wrapped = [d for d in self.children if len(d.modules) == 1 and d.modules[0] in scen.checkpoint]
        layer_order = [l.name for l in scen.layers]  # the Net's children: accelerate's bottom-up order
        self.auto = sorted((d for d in self.children if len(d.modules) == 1 and d not in self.wrapped),
                           key=lambda d: layer_order.index(d.modules[0]))
        self.embed = self.wrapped[0] if self.wrapped else None
        rest = self.wrapped[1:] + self.groups
        self.tail = rest[0] if len(rest) == 1 else None
        grouped = self.tail is not None and len(self.tail.modules) > 1
        self.final_norm = self.tail.modules[0] if grouped else None
        self.output = self.tail.modules[-1] if self.tail is not None else None

    def reason(self):
        order = self.auto + [d for d in (self.embed, self.tail) if d is not None]
        if len(self.groups) > 1 or (self.final_norm and any("Norm" in d.modules[0] for d in self.auto)):
            return "grouped"
        if len(self.wrapped) + len(self.groups) > 2:
            return "checkpoint_child"
        if [id(d) for d in order] != [id(d) for d in self.children]:
            return "unit_order"
        return None


def blocker(sess, held):
    """The reason key (REASONS) why accelerate's path cannot prepare this scenario on this rank, or None."""
    s = sess.scen
    if sess.prepared:
        return "prepare_twice"
    if not s.shards or not s.shards[-1].is_root or any(d.is_root for d in s.shards[:-1]):
        return "root_not_last"
    if not held:
        return "nothing_trainable"
    if s.model:
        return None if s.plan == "transformer_layers" else "model_lines"
    reason = Units(s).reason()
    if reason:
        return reason
    if any(d.mp for d in s.shards):
        return "mp_override"
    return None


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def mp_policy(keys):
    """torch's MixedPrecisionPolicy from a line's keys (_fsdp_api.py); unset keys keep its defaults."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    kw = {k: DTYPES[v] for k, v in keys.items() if k != "cast_forward_inputs"}
    if "cast_forward_inputs" in keys:
        kw["cast_forward_inputs"] = keys["cast_forward_inputs"] == "true"
    return MixedPrecisionPolicy(**kw)


def upcast_trainable(sess):
    """accelerate 1.15 utils/fsdp_utils.py::fsdp2_prepare_model under mixed precision: every
    trainable parameter not in fp32 is upcast in place (param.data) before fully_shard, so each
    group's trainable parameters share one original dtype."""
    for _, p in sess.pm.named_parameters():
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.to(torch.float32)


def optimizer_params(sess):
    """(name, registered object) of the adapter parameters the optimizer holds: the trainable
    ones, or all with `optimizer all`. A managed name's FSDPParam.sharded_param when its group
    is unsharded now; an adapter added after fully_shard is a plain tensor, taken as it is."""
    held = []
    for n, p in sess.named_adapter_params():
        fp = sess.fsdp_param.get(n)
        if fp is not None and getattr(fp, "_unsharded_param", None) is p:
            p = fp.sharded_param  # the group is unsharded now: its S object
        if sess.scen.optimizer != "trainable" or p.requires_grad:
            held.append((n, p))
    return held


def adamw(held):
    return torch.optim.AdamW([p for _, p in held], lr=1e-2)


def mark_units(sess, units):
    """Each auto-wrap child gets a class of its own (a subclass of its own class, named after its
    layer), as a user's model has one class per unit it wraps: accelerate's transformer-class
    auto-wrap (fsdp_utils.py::fsdp2_prepare_auto_wrap_policy) then picks exactly those modules.
    A group's first member, the tail's final norm, gets a class whose name holds "Norm", as a
    transformers model's final norm has (fsdp_utils.py::_find_final_norm reads the name). Returns
    the auto-wrap class names and (module, suffix) for unmark_units."""
    names, marked = [], []

    def mark(name, suffix):
        mod = sess.module_of(name)
        cls = type(mod)
        mod.__class__ = type(f"{cls.__name__}{suffix}", (cls,), {"__module__": cls.__module__})
        marked.append((mod, suffix))
        return mod.__class__.__name__

    for d in units.auto:
        names.append(mark(d.modules[0], f"_{d.modules[0]}"))
    if units.final_norm:
        mark(units.final_norm, f"_{units.final_norm}_FinalNorm")
    return names, marked


@contextlib.contextmanager
def embedding_roles(sess, units):
    """For the prepare, the Net answers what fsdp2_prepare_model asks a transformers model: its
    input and output embeddings (get_input_embeddings, get_output_embeddings: the units.embed and
    units.output layers) and, for a final norm, where its decoder's children are
    (base_model_prefix; PeftModel and LoraModel hand a missing attribute down, their __getattr__,
    so model.model is the Net). Nothing else reads them: the Net's own class is back after."""
    net = sess.pm.base_model.model
    cls = type(net)
    roles = {}
    if units.embed is not None:
        roles["get_input_embeddings"] = lambda self, m=sess.module_of(units.embed.modules[0]): m
    if units.output is not None:
        roles["get_output_embeddings"] = lambda self, m=sess.module_of(units.output): m
    if units.final_norm:
        roles["base_model_prefix"] = "model"
    if roles:
        net.__class__ = type(cls.__name__, (cls,), {"__module__": cls.__module__, **roles})
    try:
        yield
    finally:
        net.__class__ = cls


def unmark_units(marked):
    """After prepare the unit classes (and the FSDP classes fully_shard made of them) take their
    own class's name again: a message that names a module (PEFT's "... for
    FSDPModulesToSaveWrapper(") reads as it would without the marking."""
    for mod, suffix in marked:
        for c in type(mod).__mro__:
            if c.__name__.endswith(suffix):
                c.__name__ = c.__name__[:-len(suffix)]
            if c.__qualname__.endswith(suffix):
                c.__qualname__ = c.__qualname__[:-len(suffix)]


def shard_one(sess, d):
    """One `fully_shard` line of the scenario, as the direct path calls it."""
    mp = {"mp_policy": mp_policy(sess.scen.policy_keys(d))} if sess.scen.policy_keys(d) else {}
    if d.is_root:
        fully_shard(sess.pm, mesh=sess.mesh, reshard_after_forward=sess.root_raf(RAF[d.raf]), **mp)
    else:
        mods = [sess.module_of(m) for m in d.modules]
        fully_shard(mods if len(mods) > 1 else mods[0], mesh=sess.mesh, reshard_after_forward=RAF[d.raf], **mp)


def accelerator(units=(), child_raf=True, ram_efficient=False, mp=None):
    """An Accelerator with an FSDP2 plugin whose auto-wrap picks the classes `units` by name
    (auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap), each sharded
    with reshard_after_forward=child_raf. accelerate 1.15 selects FSDP only for an accelerator
    device: PartialState._prepare_backend (state.py) gives a CPU process MULTI_CPU, and
    AcceleratorState.__init__ takes its FSDP branch (ACCELERATE_USE_FSDP or a plugin) only for
    MULTI_GPU, MULTI_XPU, ...; with cpu=True prepare would wrap the model in DistributedDataParallel
    (measured). No public setting reaches FSDP on CPU gloo, so the shared state's distributed_type
    and plugin are set as accelerate's own test scripts do on CPU
    (test_utils/scripts/test_distributed_data_loop.py); from there Accelerator.prepare runs its
    own _prepare_fsdp2. A mixed_precision policy `mp` (its keys) goes to the plugin as its
    mixed_precision_policy, with the Accelerator's mixed_precision="bf16" that users pair it with
    (dataclasses.py::FullyShardedDataParallelPlugin.set_mixed_precision keeps a policy already given)."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    wrap = {"auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": list(units)} if units else {}
    if mp:
        wrap["mixed_precision_policy"] = mp_policy(mp)
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_ram_efficient_loading=ram_efficient,
                                            reshard_after_forward=child_raf, **wrap)
    threads = torch.get_num_threads()
    # The state is shared by every prepare in this process: its mixed_precision is this prepare's
    # (state.py::AcceleratorState._check_initialized refuses a change once it is initialised).
    from accelerate.state import AcceleratorState
    want = "bf16" if mp else "no"
    if AcceleratorState._shared_state.get("_mixed_precision") is not None:
        AcceleratorState._shared_state["_mixed_precision"] = want
    acc = Accelerator(cpu=True, fsdp_plugin=plugin, mixed_precision=want)
    # PartialState.__init__ on MULTI_CPU without OMP_NUM_THREADS sets torch's thread count to the
    # cores per rank: the rank keeps its own (rank.py main: one thread per rank process)
    torch.set_num_threads(threads)
    if acc.state.distributed_type != DistributedType.FSDP:
        acc.state.distributed_type = DistributedType.FSDP
    acc.state.fsdp_plugin = plugin  # the state is shared: this prepare's plugin, not an earlier one's
    return acc


def through_accelerate(sess):
    """Accelerator.prepare(model, AdamW over the unsharded adapter parameters) shards it all:
    the children as fsdp2_prepare_model makes its units (Units: auto-wrap by class, mark_units;
    the input embedding and the tail, embedding_roles), then the root (which takes no
    reshard_after_forward: torch's None, False at the root); the optimizer switched to the sharded
    objects (fsdp2_switch_optimizer_parameters) and wrapped (AcceleratedOptimizer). The plugin has
    one reshard_after_forward for the auto-wrap and embedding units, the first one's, and the tail
    takes False; a unit or root that says otherwise is set afterwards with
    FSDPModule.set_reshard_after_forward(recurse=False), torch's documented way to set it."""
    units = Units(sess.scen)
    names, marked = mark_units(sess, units)
    held = optimizer_params(sess)  # every parameter is unsharded here: data_ptr() tells them apart
    plugin_units = units.auto + ([units.embed] if units.embed is not None else [])
    child_raf = next((RAF[d.raf] is not False for d in plugin_units), True)  # None: True below the root
    ram = sess.scen.loading == "ram_efficient"
    if ram:  # fsdp2_prepare_model broadcasts every state-dict entry (fsdp2_load_full_state_dict)
        REC.broadcast_keys = [observe.model_name(k) for k in sess.pm.state_dict()]
        REC.broadcast_index = 0
    try:
        with embedding_roles(sess, units):
            model, opt = accelerator(names, child_raf, ram, sess.scen.mp).prepare(sess.pm, adamw(held))
    finally:
        unmark_units(marked)
        REC.broadcast_keys = None
    for d in units.children:
        given = False if d is units.tail else child_raf  # fsdp2_prepare_model: the tail's is False
        if (RAF[d.raf] is not False) != given:
            sess.module_of(d.modules[0]).set_reshard_after_forward(not given, recurse=False)
    root = sess.scen.shards[-1]
    value = sess.root_raf(RAF[root.raf])
    if value is not None:
        model.set_reshard_after_forward(value, recurse=False)
    sess.pm, sess.opt, sess.opt_names = model, opt, held_names(model, opt, held)


def held_names(model, opt, held):
    """The name of each object the prepared optimizer holds. Under ram-efficient loading the
    ranks > 0 hold meta parameters, all with data_ptr() 0, and accelerate's _prepare_fsdp2 maps
    by data_ptr (accelerator.py::Accelerator._prepare_fsdp2): every meta entry there becomes the
    last meta parameter in named_parameters() order, frozen base weights included."""
    registered = {id(p): observe.model_name(n) for n, p in model.named_parameters()}
    return [registered.get(id(p), n) for p, (n, _) in zip(opt.param_groups[0]["params"], held)]


def direct(sess):
    """fully_shard bottom-up as the scenario says; under ram_efficient loading as
    accelerate's fsdp2_prepare_model does it: full state dict, model to meta, fully_shard,
    fsdp2_load_full_state_dict. The optimizer follows: AdamW over the S objects registered right
    after (build_optimizer), or, for a first prepare under ram_efficient loading, the one a user's
    Accelerator.prepare leaves (remap_optimizer_by_data_ptr)."""
    ram = sess.scen.loading == "ram_efficient"
    remap = ram and not sess.prepared and optimizer_params(sess)
    if remap:
        opt, held, old_ptrs = optimizer_before_prepare(sess)
    if sess.scen.mp:
        upcast_trainable(sess)
    if ram:
        original_sd = sess.pm.state_dict()
        sess.pm.to("meta")
    for d in sess.scen.shards:
        shard_one(sess, d)
    if ram:
        load_full_state_dict(sess, original_sd)
    if remap:
        remap_optimizer_by_data_ptr(sess, opt, held, old_ptrs)
    return bool(remap)


def optimizer_before_prepare(sess):
    """A user's AdamW over the unsharded parameters, made before Accelerator.prepare, and what
    accelerate's _prepare_fsdp2 records of it before it shards: each parameter's data_ptr() by
    canonical name (Accelerator._get_named_parameters(drop_refs=True)), the optimizer's entries
    swapped for placeholders that keep their parameter's data_ptr() (accelerator.py::
    Accelerator._prepare_fsdp2)."""
    from accelerate.utils.fsdp_utils import fsdp2_canonicalize_names
    held = optimizer_params(sess)
    opt = adamw(held)
    old_ptrs = fsdp2_canonicalize_names({n: p.data_ptr() for n, p in sess.pm.named_parameters()})
    for group in opt.param_groups:
        for i, p in enumerate(group["params"]):
            group["params"][i] = torch.empty(1, dtype=p.dtype, device=p.device)
            group["params"][i].data_ptr = p.data_ptr()
    return opt, held, old_ptrs


def remap_optimizer_by_data_ptr(sess, opt, held, old_ptrs):
    """accelerate's _prepare_fsdp2 after fsdp2_prepare_model: old data_ptr() -> the parameter of
    that canonical name now (a later name overwrites an earlier one of the same pointer: every meta
    parameter of a ram-efficient rank > 0 has 0), then fsdp2_switch_optimizer_parameters. Any
    ram-efficient prepare a user makes goes through it, however the model is sharded."""
    from accelerate.utils.fsdp_utils import fsdp2_canonicalize_names, fsdp2_switch_optimizer_parameters
    new_params = fsdp2_canonicalize_names(dict(sess.pm.named_parameters()))
    mapping = {ptr: new_params[n] for n, ptr in old_ptrs.items()}
    fsdp2_switch_optimizer_parameters(opt, mapping)
    sess.opt, sess.opt_names = opt, held_names(sess.pm, opt, held)


@contextlib.contextmanager
def deterministic_empty(on):
    """Under ram-efficient loading the ranks > 0 receive every entry into accelerate's torch.empty
    (fsdp_utils.py::fsdp2_load_full_state_dict) and take their shard through distribute_tensor's
    scatter into torch.empty_like (placement_types.py::Shard._split_tensor's caller): a root that
    sends fewer bytes leaves the rest as the allocator had it, which depends on what the rank
    process ran before. torch's own deterministic mode fills such memory (NaN, the integer
    maximum: torch.utils.deterministic.fill_uninitialized_memory); warn_only keeps every op as it
    is. The C++ backend fills the same way (Comm::broadcast_part_filled)."""
    if not on:
        yield
        return
    was, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def run(sess):
    """The prepare op: accelerate's path unless blocker() names a reason. The sequence's path is
    its first prepare's (the one that shards the model), kept before it runs: a prepare that
    raises part-way (a broadcast gloo aborts) still says which path raised."""
    sess.apply_checkpointing()
    reason = blocker(sess, optimizer_params(sess))
    if sess.prepared_by is None:
        sess.prepared_by = "accelerate" if reason is None else reason
    remapped = False
    with deterministic_empty(sess.scen.loading == "ram_efficient"):
        if reason is None and sess.scen.model:
            from . import model_scenario
            model_scenario.through_accelerate(sess, sys.modules[__name__])
        elif reason is None:
            through_accelerate(sess)
        else:
            remapped = direct(sess)
    sess._name_fsdp_params()  # build_optimizer reads the FSDPParams by name
    if reason is not None and not remapped:
        build_optimizer(sess)
    sess.prepared = True


def build_optimizer(sess):
    """AdamW over optimizer_params() (also the `new_optimizer` op: under FSDP2,
    Accelerator.prepare takes no optimizer without its model). With nothing trainable there is
    no optimizer to build (torch raises "optimizer got an empty parameter list"): the run goes
    on without one."""
    held = optimizer_params(sess)
    sess.opt = adamw(held) if held else None
    sess.opt_names = [n for n, _ in held]


def load_full_state_dict(sess, original_sd):
    """accelerate's own loading path: rank 0 broadcasts every state-dict
    entry (each rank in its own entry's dtype), load_state_dict(assign=True)."""
    from accelerate.utils.fsdp_utils import fsdp2_load_full_state_dict

    class Acc:  # the one attribute fsdp2_load_full_state_dict reads
        is_main_process = sess.rank == 0

    REC.broadcast_keys = [observe.model_name(k) for k in sess.pm.state_dict()]
    REC.broadcast_index = 0
    try:
        fsdp2_load_full_state_dict(Acc(), sess.pm, original_sd)
    finally:
        REC.broadcast_keys = None
