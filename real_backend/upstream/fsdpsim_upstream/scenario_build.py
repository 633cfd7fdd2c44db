"""How an exported repro (export.py) builds the scenario: the base model (its
dtype; under `loading ram_efficient` on meta on ranks > 0), the PEFT model and
its adapters (each with its own `autocast_adapter_dtype`), the `checkpoint`
wrappers, `fully_shard` and, for ram-efficient loading, accelerate's own
broadcast of rank 0's state dict. Each function writes lines through the
Writer `w` (w.emit, w.fix, w.scen, w.sw); what the session does at run time
(session.py) is what these lines do in the script."""
RAF = {"true": "True", "false": "False", "none": "None"}
DTYPE = {"fp32": "torch.float32", "bf16": "torch.bfloat16"}


def lora_config_text(a, layers):
    experts = {l.name for l in layers if l.experts}
    mods = [t for t in a.targets if t not in experts]
    params = [f"{t}.weight" for t in a.targets if t in experts]
    out = f"LoraConfig(r={a.r}, lora_alpha={a.alpha}"
    if mods:
        out += f", target_modules={mods!r}"
    if params:
        out += f", target_parameters={params!r}"
    if a.init != "zero":
        out += ", init_lora_weights=False"
    if a.modules_to_save:
        out += f", modules_to_save={list(a.modules_to_save)!r}"
    if a.inference_mode:
        out += ", inference_mode=True"
    return out + ")"


def autocast_arg(scen, a):
    """`, autocast_adapter_dtype=...` of adapter a's entry point: written where the base is bf16
    (in fp32 PEFT's cast has nothing to do, and the call is left as a user writes it)."""
    return f", autocast_adapter_dtype={scen.autocast(a)}" if scen.dtype != "fp32" else ""


def per_adapter_fix(w, ind, name):
    """adapter_meta_check=per_adapter after an adapter is added (peft#2834, fix #2836)."""
    if w.sw["adapter_meta_check"] == "per_adapter":
        w.fix(ind, "peft#2834 / #2836: move the new adapter to its base layer unless its own parameters are on meta",
              "adapter_meta_check")
        w.emit(f"{ind}move_adapter_to_base(model, {name!r}, {w.scen.autocast(w.scen.adapter(name))})")


def net(w):
    s, e = w.scen, w.emit
    if any(l.experts for l in s.layers):
        e("class Experts(nn.Module):")
        e('    """A mixture-of-experts weight (E, in, out), marked transposed for PEFT\'s ParamWrapper."""')
        e("")
        e("    def __init__(self, experts, fan_in, fan_out):")
        e("        super().__init__()")
        e("        self.weight = nn.Parameter(torch.randn(experts, fan_in, fan_out) / fan_in ** 0.5)")
        e("        self.is_transposed = True")
        e("")
        e("    def forward(self, x):")
        e('        return torch.einsum("bi,eio->bo", x, self.weight) / self.weight.shape[0]')
        e("")
        e("")
    e("class Net(nn.Module):")
    e(f'    """{", ".join(l.name for l in s.layers)} in order, ReLU between them."""')
    e("")
    e("    def __init__(self):")
    e("        super().__init__()")
    for l in s.layers:
        mod = f"Experts({l.experts}, {l.fan_in}, {l.fan_out})" if l.experts else f"nn.Linear({l.fan_in}, {l.fan_out})"
        e(f"        self.{l.name} = {mod}")
    e("")
    e("    def forward(self, x):")
    body = "x"
    for i, l in enumerate(s.layers):
        body = f"self.{l.name}({body})"
        if i + 1 < len(s.layers):
            body = f"torch.relu({body})"
    e(f"        return {body}")
    e("")


def build_model(w, s2):
    """main()'s lines from the base model to the batch `x`."""
    s, e = w.scen, w.emit
    e(f"    torch.manual_seed({s.seed})")
    cast = f".to({DTYPE[s.dtype]})" if s.dtype != "fp32" else ""
    if s.loading == "ram_efficient":
        e("    if rank > 0:  # loading ram_efficient: only rank 0 loads the weights, the others build on meta")
        e('        with torch.device("meta"):')
        e("            net = Net()")
        e("    else:")
        e("        net = Net()")
        base = f"net{cast}"
    elif s2:
        e("    net = Net()")
        e("    W0 = {name: m.weight.detach().clone() for name, m in net.named_children()}  # noqa: N806")
        base = "net"
    else:
        base = f"Net(){cast}"
    live = [a for a in s.adapters if not a.deferred]
    e(f"    model = get_peft_model({base}, {lora_config_text(live[0], s.layers)}, adapter_name={live[0].name!r}"
      f"{autocast_arg(s, live[0])})")
    for a in live[1:]:
        e(f"    model.add_adapter({a.name!r}, {lora_config_text(a, s.layers)}{autocast_arg(s, a)})")
        per_adapter_fix(w, "    ", a.name)
    shift = " + 1000003 * rank" if s.data == "per_rank" else ""  # data per_rank: each rank its own batch
    e(f"    x = torch.randn({w.batch}, {s.layers[0].fan_in}, "
      f"generator=torch.Generator().manual_seed({s.seed + 1}{shift})){cast}")


def through_accelerate(w):
    """Whether the script's prepare goes through Accelerator.prepare, as the session's does
    (prepare.py::blocker: the reasons that hold for the whole scenario; nothing trainable is
    the script's own branch at run time)."""
    from types import SimpleNamespace
    from . import prepare
    if sum(op.kind == "prepare" for op in w.ops) > 1:
        return False
    return prepare.blocker(SimpleNamespace(scen=w.scen, world=w.scen.world, prepared=False), [None]) is None


def module_expr(name):
    """The script's expression for the module `name` (a layer or "root"): after fully_shard, every
    member of a grouped fully_shard([...]) is an FSDPModule of its own, sharing the group's state."""
    return "model" if name == "root" else f"model.base_model.model.{name}"


def fsdp_module_expr(scen, name):
    """module_expr for the module fully_shard was given, where a deferred adapter may wrap it later."""
    return f"fsdp_module({module_expr(name)})" if any(a.deferred for a in scen.adapters) else module_expr(name)


def shard_fn(w):
    s, e = w.scen, w.emit
    ram = s.loading == "ram_efficient"
    acc = through_accelerate(w)
    e("")
    e("def shard(model, mesh):")
    if acc:
        e('    """The children\'s fully_shard as the scenario says, then accelerate\'s Accelerator.prepare with')
        e("    an FSDP2 plugin: the root's fully_shard, the optimizer switched to the shards and wrapped.")
        e('    The shards the model registers and the optimizer."""')
    else:
        e('    """fully_shard bottom-up; the shards it registers (the objects gradients land on) and the optimizer."""')
    for name in s.checkpoint:
        e(f"    checkpoint_layer(model, {name!r})")
    if ram:
        e("    # loading ram_efficient, as accelerate's fsdp2_prepare_model does it: the full state dict (real on")
        e("    # rank 0 only), the model to meta, fully_shard, then rank 0 broadcasts every entry")
        e("    full_sd = model.state_dict()")
        e('    model.to("meta")')
    for d in s.shards:
        raf = RAF[d.raf]
        if d.is_root:
            raf = "False" if w.sw["root_reshard_rule"] == "force_false" else raf
            if acc:
                e("    params = optimizer_params(model, registered(model))")
                e("    if not params:  # under FSDP2 Accelerator.prepare takes no model without its optimizer")
                e(f"        fully_shard(model, mesh=mesh, reshard_after_forward={raf})")
                e("        return registered(model), None")
                e("    model, opt = accelerator().prepare(model, torch.optim.AdamW(params, lr=1e-2))")
                if raf != "None":  # accelerate gives the root none: torch's documented way to set it
                    e(f"    model.set_reshard_after_forward({raf}, recurse=False)")
                e("    return registered(model), opt")
                e("")
                e("")
                break
            e(f"    fully_shard(model, mesh=mesh, reshard_after_forward={raf})")
        else:
            mods = [module_expr(m) for m in d.modules]
            arg = mods[0] if len(mods) == 1 else "[" + ", ".join(mods) + "]"
            e(f"    fully_shard({arg}, mesh=mesh, reshard_after_forward={raf})")
    if not acc:
        if ram:
            e("    # the one attribute of the Accelerator that fsdp2_load_full_state_dict reads")
            e("    fsdp2_load_full_state_dict(SimpleNamespace(is_main_process=dist.get_rank() == 0), model, full_sd)")
        e("    shards = registered(model)")
        e("    return shards, make_optimizer(model, shards)")
        e("")
        e("")
    e("def make_optimizer(model, shards):")
    e("    params = optimizer_params(model, shards)")
    e("    return torch.optim.AdamW(params, lr=1e-2) if params else None")
    e("")
    e("")
    e("def optimizer_params(model, shards):")
    sel = "p.requires_grad" if s.optimizer == "trainable" else "True"
    e("    return [p for n, p in adapter_params(model, shards) if " + sel + "]")
    e("")
    e("")
    if any(a.deferred for a in s.adapters):
        e("def fsdp_module(m):")
        e('    """The module fully_shard was given: an adapter injected after fully_shard wraps it and keeps')
        e('    it as its base_layer (peft tuners_utils.py BaseTunerLayer.get_base_layer)."""')
        e("    while not isinstance(m, FSDPModule) and hasattr(m, \"base_layer\"):")
        e("        m = m.base_layer")
        e("    return m")
        e("")
        e("")
    e("def groups(model):")
    e('    """The FSDP modules by fsdpsim\'s group name."""')
    groups = ", ".join(f"{d.modules[0]!r}: {fsdp_module_expr(s, d.modules[0])}" for d in s.shards)
    e(f"    return {{{groups}}}")
    if w.uses & {"zero_grad", "train_step"}:
        e("")
        e("")
        e("def zero_grad(model, opt):")
        e("    if opt is not None:")
        e("        opt.zero_grad(set_to_none=True)")
        e("    model.zero_grad(set_to_none=True)")
    if "train_step" in w.uses:
        e("")
        e("")
        e("def train_step(model, opt, shards, x):")
        e("    zero_grad(model, opt)")
        e("    model(x).float().sum().backward()")
        e("    if opt is not None:")
        e("        opt.step()")


# Helpers a script defines when its lines call them (export.used_helpers picks them).
HELPERS = '''
def checkpoint_layer(model, name):
    """Activation checkpointing of one layer where it sits, before any fully_shard, as accelerate's
    fsdp2_apply_ac does it. torch 2.13 has no public import of checkpoint_wrapper: this is the
    private module accelerate itself imports it from."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    layer = model.base_model.model.get_submodule(name)
    model.base_model.model.set_submodule(name, checkpoint_wrapper(layer, preserve_rng_state=False))


def accelerator():
    """accelerate's Accelerator with an FSDP2 plugin. On CPU its AcceleratorState settles on MULTI_CPU
    (prepare would wrap the model in DistributedDataParallel) whatever the plugin: the state is set
    to FSDP, from where Accelerator.prepare runs its own FSDP2 path (_prepare_fsdp2) on gloo."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    acc = Accelerator(cpu=True, fsdp_plugin=plugin)
    acc.state.distributed_type = DistributedType.FSDP
    acc.state.fsdp_plugin = plugin
    return acc


def move_adapter_to_base(model, name, autocast):
    """# fix (peft#2834, fix #2836 proposed): BaseTunerLayer._move_adapter_to_device_of_base_layer skips a
    new adapter when *any* adapter in its lora_A/lora_B container is on meta; checked per adapter, the new
    one follows its base layer's device and dtype unless its own parameters are on meta (then in fp32 again
    under PEFT's autocast_adapter_dtype)."""
    for m in model.modules():
        if not hasattr(m, "lora_A") or name not in m.lora_A:
            continue
        base = m.get_base_layer().weight
        for mod in (m.lora_A[name], m.lora_B[name]):
            if mod.weight.device.type == "meta":
                continue
            mod.to(device=base.device, dtype=base.dtype if base.dtype.is_floating_point else None)
            if autocast and mod.weight.dtype == torch.bfloat16:
                mod.to(dtype=torch.float32)
'''
