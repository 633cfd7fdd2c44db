"""The `prepare` op: accelerate's own `Accelerator.prepare(model, optimizer)`
with an FSDP2 plugin where the scenario lets it run, the direct
`fully_shard` + AdamW path (what accelerate's steps do, one by one) where it
cannot. Which one ran, and why not accelerate, is kept on the session
(`prepared_by`) for the tests. The reasons are measured on CPU gloo with
accelerate 1.15.0 / torch 2.13 (docs/design/upstream-backend.md)."""
import torch
from torch.distributed.fsdp import fully_shard

from . import observe
from .collectives import REC

RAF = {"true": True, "false": False, "none": None}


def empty_rows(rows, world):
    """Whether some rank holds no row of a dim-0 size `rows`: FSDP2 shards with torch.chunk
    (torch _fsdp_param.py::FSDPParam._init_sharded_param), whose chunks are ceil(rows/world)."""
    chunk = -(-rows // world)
    return rows == 0 or -(-rows // chunk) < world


def child_rows(scen, name):
    """The dim-0 sizes of every parameter a child `fully_shard` of layer `name` manages."""
    layer = next(l for l in scen.layers if l.name == name)
    e = max(layer.experts, 1)
    out = [layer.experts] if layer.experts else [layer.fan_out, layer.fan_out]  # weight (and bias)
    for a in scen.adapters:
        if name in a.targets:
            out += [a.r * e, layer.fan_out]  # lora_A, lora_B
        if name in a.modules_to_save:
            out += [layer.fan_out, layer.fan_out]
    return out


def blocker(sess, held):
    """Why accelerate's path cannot prepare this scenario on this rank, or None."""
    s = sess.scen
    if sess.prepared:
        return "prepare after prepare: accelerate's fsdp2_prepare_model leaves an FSDPModule as it is"
    if not s.shards or not s.shards[-1].is_root or any(d.is_root for d in s.shards[:-1]):
        return "accelerate shards the root, always last (fsdp2_prepare_model)"
    if s.loading == "ram_efficient":
        return ("loading ram_efficient: on ranks > 0 every meta parameter's data_ptr() is 0, and "
                "_prepare_fsdp2's data_ptr mapping hands the optimizer one parameter for all of them")
    if not held:
        return ("nothing for the optimizer: under FSDP2 Accelerator.prepare raises 'When using FSDP2, "
                "a model and optimizer must be passed together'")
    if sess.world > 1 and any(empty_rows(r, sess.world) for d in s.shards[:-1] for m in d.modules
                              for r in child_rows(s, m)):
        # (one such parameter alone maps to itself; the rule stays on the safe side of two)
        return ("a child sharded before prepare holds no row on some rank: its empty local tensor's "
                "data_ptr() is 0, and _prepare_fsdp2's data_ptr mapping mixes two such parameters up")
    return None


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


def shard_children(sess):
    """The scenario's non-root fully_shard calls, in its order. accelerate picks children only
    by class or size (fsdp_utils.py::fsdp2_prepare_auto_wrap_policy), never by module name nor
    as a group; fsdp2_prepare_model leaves a module that is already an FSDPModule as it is."""
    for d in sess.scen.shards:
        if not d.is_root:
            shard_one(sess, d)


def shard_one(sess, d):
    """One `fully_shard` line of the scenario, as the direct path calls it."""
    if d.is_root:
        fully_shard(sess.pm, mesh=sess.mesh, reshard_after_forward=sess.root_raf(RAF[d.raf]))
    else:
        mods = [sess.module_of(m) for m in d.modules]
        fully_shard(mods if len(mods) > 1 else mods[0], mesh=sess.mesh, reshard_after_forward=RAF[d.raf])


def accelerator():
    """An Accelerator with an FSDP2 plugin. On CPU, AcceleratorState.__init__ (state.py) takes
    the FSDP branch only for an accelerator device (MULTI_GPU, MULTI_XPU, ...): with cpu=True and
    an FSDP2 plugin it settles on MULTI_CPU and prepare wraps the model in DistributedDataParallel
    (measured). The harness sets the shared state's distributed_type to FSDP and its plugin; from
    there Accelerator.prepare runs its own _prepare_fsdp2 on gloo."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_ram_efficient_loading=False)
    threads = torch.get_num_threads()
    acc = Accelerator(cpu=True, fsdp_plugin=plugin)
    # PartialState.__init__ on MULTI_CPU without OMP_NUM_THREADS sets torch's thread count to the
    # cores per rank: the rank keeps its own (rank.py main: one thread per rank process)
    torch.set_num_threads(threads)
    if acc.state.distributed_type != DistributedType.FSDP:
        acc.state.distributed_type = DistributedType.FSDP
        acc.state.fsdp_plugin = plugin
    return acc


def through_accelerate(sess):
    """The children as the scenario says, then Accelerator.prepare(model, AdamW over the
    unsharded adapter parameters): the root's fully_shard (fsdp2_prepare_model, whose root
    takes no reshard_after_forward: torch's None, False at the root), the optimizer switched
    to the sharded objects (fsdp2_switch_optimizer_parameters) and wrapped (AcceleratedOptimizer).
    A root `reshard_after_forward=true|false` is set afterwards with
    FSDPModule.set_reshard_after_forward(recurse=False), torch's documented way to set the root's."""
    shard_children(sess)
    held = optimizer_params(sess)  # the children's params are their sharded objects now
    acc = accelerator()
    model, opt = acc.prepare(sess.pm, adamw(held))
    root = sess.scen.shards[-1]
    value = sess.root_raf(RAF[root.raf])
    if value is not None:
        model.set_reshard_after_forward(value, recurse=False)
    sess.pm, sess.opt, sess.opt_names = model, opt, [n for n, _ in held]


def direct(sess):
    """fully_shard bottom-up as the scenario says; under ram_efficient loading as
    accelerate's fsdp2_prepare_model does it: full state dict, model to meta, fully_shard,
    fsdp2_load_full_state_dict. build_optimizer() follows (AdamW over the S objects registered
    right after: what accelerate's fsdp2_switch_optimizer_parameters leaves it holding)."""
    ram = sess.scen.loading == "ram_efficient"
    if ram:
        original_sd = sess.pm.state_dict()
        sess.pm.to("meta")
    for d in sess.scen.shards:
        shard_one(sess, d)
    if ram:
        load_full_state_dict(sess, original_sd)


def run(sess):
    """The prepare op: accelerate's path unless blocker() names a reason."""
    sess.apply_checkpointing()
    reason = blocker(sess, optimizer_params(sess))
    if reason is None:
        through_accelerate(sess)
        sess._name_fsdp_params()
    else:
        direct(sess)
        sess._name_fsdp_params()  # build_optimizer reads the FSDPParams by name
        build_optimizer(sess)
    sess.prepared_by = "accelerate" if reason is None else "direct: " + reason
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
