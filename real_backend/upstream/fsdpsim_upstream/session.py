"""One sequence on one rank: builds the scenario with the real libraries
(torch FSDP2 `fully_shard` and accelerate's `Accelerator.prepare` (prepare.py), PEFT
`get_peft_model` / `add_adapter`, AdamW),
runs each op through the real API, and reads every observation off the real
objects. Nothing here consults fsdpsim's model."""
import os
import sys

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from torch.distributed.fsdp import FSDPModule

from . import observe, prepare
from .collectives import REC
from .outcomes import CannotRun, HarnessError, classify_exception, harness_level  # noqa: F401 (rank.py and the tests import them from here)

BATCH = 4


class Experts(nn.Module):
    """A mixture-of-experts parameter (E, in, out), no bias: what PEFT's
    ParamWrapper targets through `target_parameters` (the experts' outputs
    are averaged)."""

    def __init__(self, experts, fan_in, fan_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(experts, fan_in, fan_out) / fan_in ** 0.5)
        # stored (E, in, out): peft/tuners/lora/layer.py::ParamWrapper.update_layer reads a 3-D
        # parameter as (E, out, in) unless the module says it is transposed
        self.is_transposed = True

    def forward(self, x):
        return torch.einsum("bi,eio->bo", x, self.weight) / self.weight.shape[0]


# Net's own state sits in its instance __dict__ under this key: a '.' is refused in .seq names
# (model/vocab/name_rules.cpp), so no layer can take it, whereas a plain attribute such as
# `order` would be replaced by a layer of that name (Module.__setattr__ moves it to _modules).
HARNESS = "fsdpsim.net"


class Net(nn.Module):
    """The scenario's layers in order, ReLU between them. Its children are the layers alone,
    each under its own name; the layer order and the input dtype are kept out of the
    module's attribute namespace (HARNESS)."""

    def __init__(self, layers, dtype=torch.float32):
        super().__init__()
        for l in layers:
            # add_module, not setattr: torch refuses a name that is already an attribute
            # (torch/nn/modules/module.py::Module.add_module) where setattr would shadow it
            self.add_module(l.name, Experts(l.experts, l.fan_in, l.fan_out) if l.experts
                            else nn.Linear(l.fan_in, l.fan_out))
        self.__dict__[HARNESS] = ([l.name for l in layers], dtype)

    def forward(self, x):
        order, dtype = self.__dict__[HARNESS]
        x = x.to(dtype)
        for i, name in enumerate(order):
            # the child now registered under the name (PEFT and checkpoint_wrapper replace it there)
            x = self._modules[name](x)
            if i + 1 < len(order):
                x = torch.relu(x)
        return x


def saved_name(key, adapter, scen=None):
    """fsdpsim's name of an adapter state-dict key (PEFT drops the adapter name from it).
    A modules_to_save copy is saved as `L.weight` / `L.bias`
    (peft/utils/other.py::ModulesToSaveWrapper.adapter_state_dict): its copy's name."""
    name = observe.model_name(key.replace(".lora_A.weight", f".lora_A.{adapter}.weight")
                              .replace(".lora_B.weight", f".lora_B.{adapter}.weight"))
    for layer in (scen.adapter(adapter).modules_to_save if scen is not None else ()):
        for what in ("weight", "bias"):
            if name == f"{layer}.{what}":
                return f"{layer}.modules_to_save.{adapter}.{what}"
    return name


def lora_config(a, inference_mode=None, layers=()):
    # init=zero is PEFT's default (lora_B = 0); init=random draws B too.
    # Experts layers are ParamWrapper targets (target_parameters).
    experts = {l.name for l in layers if l.experts}
    params = [f"{t}.weight" for t in a.targets if t in experts]
    # target_parameters only when used: PEFT releases before it (0.15.x) take every other
    # argument here (peft/tuners/lora/config.py::LoraConfig), and so run the other scenarios.
    extra = {"target_parameters": params} if params else {}
    return LoraConfig(r=a.r, lora_alpha=a.alpha, target_modules=[t for t in a.targets if t not in experts] or None,
                      init_lora_weights=(a.init == "zero"), modules_to_save=list(a.modules_to_save) or None,
                      inference_mode=a.inference_mode if inference_mode is None else inference_mode, **extra)


def is_ac_wrapper(m):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import ActivationWrapper
    return isinstance(m, ActivationWrapper)


class Session:
    def __init__(self, scen, ops, rank, world, mesh, switches, tmpdir):
        self.scen, self.ops, self.rank, self.world, self.mesh = scen, ops, rank, world, mesh
        self.sw = switches
        self.tmpdir = tmpdir
        self.pending_loss = None
        self.disable_ctx = None
        self.opt = None
        self.opt_names = []
        self.opt_ckpt = None
        self.prepared = False
        self.prepared_by = None  # the first prepare's path: "accelerate", or the reason key (prepare.py REASONS)
        self.fsdp_modules = []  # (group name, module) in the model's group order
        self.fsdp_module_of = {}  # every module fully_shard was given, by layer name ("root": the model)
        self.fsdp_param = {}  # fsdpsim name -> FSDPParam
        self.named_cache = None  # model.named_parameters() while an observation is read

    # ---- building -------------------------------------------------------
    def base_net(self):
        """The base model as loaded: in the scenario's dtype; with
        `loading ram_efficient` only rank 0 has real weights and the others
        hold meta tensors (transformers' loading under accelerate's
        fsdp_cpu_ram_efficient_loading)."""
        torch.manual_seed(self.scen.seed)
        if self.scen.loading == "ram_efficient" and self.rank > 0:
            with torch.device("meta"):
                net = Net(self.scen.layers, self.dtype)
        else:
            net = Net(self.scen.layers, self.dtype)
        return net.to(self.dtype)

    def build(self):
        self.dtype = torch.bfloat16 if self.scen.dtype == "bf16" else torch.float32
        net = self.base_net()
        torch.manual_seed(self.scen.seed)
        cpu = Net(self.scen.layers).to(self.dtype)  # W0 as every rank will hold it after prepare
        self.w0 = {l.name: getattr(cpu, l.name).weight.detach().clone() for l in self.scen.layers}
        live = [a for a in self.scen.adapters if not a.deferred]
        self.pm = get_peft_model(net, lora_config(live[0], layers=self.scen.layers), adapter_name=live[0].name,
                                 autocast_adapter_dtype=self.scen.autocast(live[0]))
        for a in live[1:]:
            self.pm.add_adapter(a.name, lora_config(a, layers=self.scen.layers), **self.autocast_kw(a))
            self.move_per_adapter(a.name)
        self.patch_delta_weight()
        # `data per_rank`: each rank its own batch, as a DistributedSampler hands out
        # (rank 0's is the `same` batch every rank reads otherwise)
        shift = self.rank * 1000003 if self.scen.data == "per_rank" else 0
        g = torch.Generator().manual_seed(self.scen.seed + 1 + shift)
        self.x = torch.randn(BATCH, self.scen.layers[0].fan_in, generator=g)
        if not any(op.kind == "prepare" for op in self.ops):
            self.prepare()

    def layer(self, name):
        """The layer's own module (PEFT's LoRA layer, or the plain one no adapter
        targets): under `checkpoint`, the one the CheckpointWrapper holds."""
        m = getattr(self.pm.base_model.model, name)
        return m._modules["_checkpoint_wrapped_module"] if name in self.scen.checkpoint and is_ac_wrapper(m) else m

    def module_of(self, group):
        """The module at a group's path: what fully_shard was given (under
        `checkpoint`, the CheckpointWrapper, as accelerate shards it)."""
        return self.pm if group == "root" else getattr(self.pm.base_model.model, group)

    def apply_checkpointing(self):
        """`checkpoint L,...`: each layer wrapped where it sits, before any
        fully_shard (accelerate/utils/fsdp_utils.py::fsdp2_apply_ac, which
        accelerator.py::_prepare_fsdp2 runs before fsdp2_prepare_model)."""
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        for name in self.scen.checkpoint:
            m = getattr(self.pm.base_model.model, name)
            if not is_ac_wrapper(m):
                self.pm.set_submodule("base_model.model." + name, checkpoint_wrapper(m, preserve_rng_state=False))

    def prepare(self):
        """The prepare op (prepare.py: accelerate's Accelerator.prepare where it runs)."""
        prepare.run(self)

    def build_optimizer(self):
        prepare.build_optimizer(self)

    def root_raf(self, value):
        # root_reshard_rule=force_false mirrors torch <= 2.7 (the root never reshards).
        return False if self.sw["root_reshard_rule"] == "force_false" else value

    def _name_fsdp_params(self):
        fqn = {id(m): n for n, m in self.pm.named_modules()}
        groups = []
        for d in self.scen.shards:
            name = "root" if d.is_root else d.modules[0]
            mod = self.module_of(name)
            for member in (["root"] if d.is_root else d.modules):
                self.fsdp_module_of[member] = self.module_of(member)
            state = mod._get_fsdp_state()
            for pg in state._fsdp_param_groups:
                for fp in pg.fsdp_params:
                    pname = observe.model_name(fqn[id(fp._module_info.module)] + "." + fp._module_info.param_name)
                    REC.param_name[id(fp)] = pname
                    REC.group_name[id(fp)] = name
                    self.fsdp_param[pname] = fp
                    fp._fsdpsim_group = name
            if state._fsdp_param_groups:
                groups.append((name, mod))
        # the model's order: the root's group first, then the children in module order, a grouped
        # fully_shard([lin2, lin0]) at its first module in the model (named_modules pre-order)
        order = {l.name: i for i, l in enumerate(self.scen.layers)}
        first = {d.modules[0]: min(order[m] for m in d.modules) for d in self.scen.shards if not d.is_root}
        groups.sort(key=lambda g: -1 if g[0] == "root" else first[g[0]])
        self.fsdp_modules = groups

    def named_adapter_params(self):
        """(fsdpsim name, registered object) of every adapter parameter (LoRA and
        modules_to_save copies), in model.named_parameters() order (read once per observation)."""
        owners = observe.owners(self)
        for n, p in (self.named_cache if self.named_cache is not None else self.pm.named_parameters()):
            name = observe.model_name(n)
            if ".lora_" in n or name in owners:
                yield name, p

    # ---- ops ------------------------------------------------------------
    def reshard_all(self):
        for _, m in self.fsdp_modules:
            m.reshard()

    def unmerge_and_reshard_all(self):
        """The fixes of peft#3895 and #3800: unmerge what is merged, then reshard
        every FSDP module, so the flags that follow reach the shards."""
        if self.any_merged():
            self.pm.base_model.unmerge_adapter()
        self.reshard_all()

    def any_merged(self):
        # a ModulesToSaveWrapper has no `merged`
        return any(getattr(m, "merged", False) for m in self.lora_layers())

    def lora_layers(self):
        return [self.layer(l.name) for l in self.scen.layers]

    def op_forward(self, grad):
        with torch.set_grad_enabled(grad):
            self.pending_loss = self.pm(self.x).float().sum()

    def op_backward(self):
        if self.pending_loss is None:
            raise HarnessError("backward without a forward output")
        loss, self.pending_loss = self.pending_loss, None
        loss.backward()

    def op_zero_grad(self):
        # exactly a training loop's two calls: the optimizer's objects (torch/optim/optimizer.py::
        # Optimizer.zero_grad) and the objects the modules register now (torch/nn/modules/module.py::
        # Module.zero_grad), so a shard's grad stays while its group is unsharded and no optimizer holds it
        if self.opt is not None:
            self.opt.zero_grad(set_to_none=True)
        self.pm.zero_grad(set_to_none=True)

    def op_step(self):
        if self.opt is not None:
            self.opt.step()

    def op_set_adapter(self, op):
        if op.list_form:
            self.pm.base_model.set_adapter(list(op.names))
            return
        mode = self.sw["set_adapter_reshard"]
        if mode == "unmerge_first":
            self.unmerge_and_reshard_all()
        elif mode == "skip_merged":
            for g, m in self.fsdp_modules:
                if not any(getattr(self.layer(l.name), "merged", False) for l in self.scen.layers
                           if self.group_of_layer(l.name) == g):
                    m.reshard()
        self.pm.set_adapter(op.names[0])

    def group_of_layer(self, layer):
        fp = self.fsdp_param.get(self.scen.base_name(layer))
        return getattr(fp, "_fsdpsim_group", "")

    def op_disable_enter(self):
        if self.disable_ctx is not None:
            raise HarnessError("disable_enter inside disable_adapter(): the context is already entered")
        ctx = self.pm.disable_adapter()
        ctx.__enter__()
        self.disable_ctx = ctx

    def op_disable_exit(self):
        if self.disable_ctx is None:
            raise HarnessError("disable_exit outside disable_adapter(): no matching disable_enter")
        if self.sw["disable_exit_reshard"] == "on":
            self.unmerge_and_reshard_all()
        ctx, self.disable_ctx = self.disable_ctx, None
        ctx.__exit__(None, None, None)
        if self.sw["enable_inference_mode"] == "respect":
            # the fix of #3453: adapters whose config says inference_mode stay frozen
            # (LoRA layers only: ModulesToSaveWrapper.enable_adapters is not part of that fix)
            for a in self.pm.base_model.active_adapters:
                if self.pm.peft_config[a].inference_mode:
                    for n, p in self.named_adapter_params():
                        owner = observe.owner_of(self, n)
                        if owner is not None and owner[1] != "modules_to_save" and owner[2] == a:
                            p.requires_grad_(False)

    def op_add_adapter(self, name, inference_mode):
        a = self.scen.adapter(name)
        self.pm.add_adapter(name, lora_config(a, inference_mode, self.scen.layers), **self.autocast_kw(a))
        self.move_per_adapter(name)

    def op_load_adapter(self, name, trainable):
        """PeftModel.load_adapter(path, name, is_trainable) from a checkpoint
        of that adapter (its seeded initial values) written beforehand."""
        import os
        a = self.scen.adapter(name)
        path = os.path.join(self.tmpdir, f"src-{self.rank}-{name}")
        if not os.path.exists(path):
            torch.manual_seed(self.scen.seed + 7 + self.scen.adapters.index(a))
            src = get_peft_model(Net(self.scen.layers), lora_config(a, layers=self.scen.layers), adapter_name=name)
            src.save_pretrained(path, selected_adapters=[name])
        sub = path if name == "default" else os.path.join(path, name)
        self.pm.load_adapter(sub, adapter_name=name, is_trainable=trainable,
                             autocast_adapter_dtype=self.scen.autocast(a))
        self.move_per_adapter(name)

    def autocast_kw(self, a):
        """add_adapter's autocast_adapter_dtype, passed only when not its default (True,
        peft/peft_model.py::PeftModel.add_adapter): releases before the argument (0.15.x)
        then run every scenario that keeps the default."""
        return {} if self.scen.autocast(a) is True else {"autocast_adapter_dtype": self.scen.autocast(a)}

    def move_per_adapter(self, name):
        """adapter_meta_check=per_adapter, the fix #2836 proposed: a new
        adapter follows its base layer's device and dtype unless its own
        parameters are on meta, whatever the other adapters in the container
        hold (peft/tuners/tuners_utils.py::BaseTunerLayer._move_adapter_to_device_of_base_layer)."""
        if self.sw["adapter_meta_check"] != "per_adapter":
            return
        for l in self.scen.layers:
            m = self.layer(l.name)
            if not hasattr(m, "lora_A") or name not in m.lora_A:
                continue
            base = m.get_base_layer().weight
            for container in (m.lora_A, m.lora_B):
                mod = container[name]
                if mod.weight.device.type == "meta":
                    continue
                mod.to(device=base.device, dtype=base.dtype if base.dtype.is_floating_point else None)
                if self.scen.autocast(self.scen.adapter(name)) and mod.weight.dtype == torch.bfloat16:
                    mod.to(dtype=torch.float32)  # peft_model.py::PeftModel._cast_adapter_dtype

    def op_delete_adapter(self, name):
        self.pm.delete_adapter(name)

    def op_reshard_unshard(self, op):
        """FSDPModule.reshard / unshard on the module named (every member of a grouped
        fully_shard([...]) is an FSDPModule sharing the group's state: the whole group moves,
        torch _fully_shard.py::FSDPModule.unshard), or on every FSDP module. The module is the one
        fully_shard was given, wherever PEFT has moved it since: an adapter injected later wraps it
        as its base_layer (peft tuners/lora/layer.py LoraLayer, tuners_utils.py get_base_layer).
        A module no fully_shard was given has neither method: the harness does nothing (as the model)."""
        targets = [m for _, m in self.fsdp_modules]
        if op.names:
            m = self.fsdp_module_of.get(op.names[0])
            targets = [m] if isinstance(m, FSDPModule) else []
        for m in targets:
            if op.kind == "reshard":
                m.reshard()
            else:
                m.unshard()

    def op_save_optimizer(self):
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
        if self.sw["optimizer_ckpt_reshard"] == "on":
            self.reshard_all()
        # no optimizer was built (nothing trainable at prepare): nothing to save, as the model has it
        self.opt_ckpt = get_optimizer_state_dict(self.pm, self.opt) if self.opt is not None else {}

    def op_load_optimizer(self):
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict
        if self.opt_ckpt is None:
            raise HarnessError("no optimizer checkpoint to load (save_optimizer first)")
        if self.sw["optimizer_ckpt_reshard"] == "on":
            self.reshard_all()
        if self.opt is not None:
            set_optimizer_state_dict(self.pm, self.opt, self.opt_ckpt)

    # ---- adapter checkpoints ---------------------------------------------
    def op_save_adapters(self, op):
        """PeftModel.save_pretrained's selection (all adapters unless named;
        adapter_save_selection=active keeps only the active one), each
        adapter's state dict through get_peft_model_state_dict (whose
        model.state_dict() runs FSDP's pre-hook, which reshards); rank 0
        writes. adapter_save_gather=on makes every managed tensor full first
        (DTensor.full_tensor, DCP's full state dict)."""
        from peft.utils import get_peft_model_state_dict
        from torch.distributed.tensor import DTensor
        if op.names:
            names = list(op.names)
        elif self.sw["adapter_save_selection"] == "active":
            names = list(self.pm.base_model.active_adapters)
        else:
            names = list(self.pm.peft_config)
        missing = [n for n in names if n not in self.pm.peft_config]
        if missing:
            raise HarnessError("selected adapters are not in the model: {" + ",".join(missing) + "}")
        sd = self.pm.state_dict()
        if self.sw["adapter_save_gather"] == "on":
            sd = {k: (v.full_tensor() if isinstance(v, DTensor) and (".lora_" in k or ".modules_to_save." in k) and
                      any(f".{n}." in k for n in names) else v) for k, v in sd.items()}
        self.saved = {}
        self.saved_obs = []
        for a in names:
            asd = get_peft_model_state_dict(self.pm, state_dict=sd, adapter_name=a)
            local = {k: (v.to_local() if isinstance(v, DTensor) else v).detach().clone() for k, v in asd.items()}
            self.saved[a] = local
            for k, v in asd.items():
                t = v.to_local() if isinstance(v, DTensor) else v
                name = saved_name(k, a, self.scen)
                self.saved_obs.append({"name": name, "rows": int(t.shape[0]), "full_rows": int(v.shape[0]),
                                       "dtype": observe.DTYPES.get(t.dtype, str(t.dtype))})
        self.saved_obs.sort(key=lambda x: observe.param_sort_key(self)(x["name"]))
        self.saved_view = list(self.saved_obs)  # kept for the reload (saved_obs goes to the observation)
        # what this rank held at save time: a reload must restore exactly that
        chosen = {x["name"] for x in self.saved_obs}
        self.saved_own = {n: observe.local_of(s).detach().clone() for n, s in observe.shard_objects(self)
                          if n in chosen}
        # and how many AdamW steps each had taken: a step since that leaves the values as they were
        # (bf16 rounding an lr-sized update away) is one the reload's values cannot show
        self.saved_steps = {n: observe.adam_steps(self, s) for n, s in observe.shard_objects(self) if n in chosen}
        # each save has its own file: a rank 0 already at its next save never changes what a
        # peer still loads (the C++ backend's Comm::write_rank0_file numbers them the same way)
        self.saves = getattr(self, "saves", 0) + 1
        if self.rank == 0:
            import os
            import torch as _t
            _t.save(self.saved, os.path.join(self.tmpdir, f"adapters-{self.saves}.pt"))
            open(os.path.join(self.tmpdir, f"adapters-{self.saves}.done"), "w").close()

    def op_load_adapters(self):
        """Every rank loads the file rank 0 wrote (set_peft_model_state_dict ->
        load_state_dict, whose FSDP pre-hook reshards), then compares what it
        holds with what was saved."""
        import os
        import time
        from peft.utils import set_peft_model_state_dict
        n = max(getattr(self, "saves", 0), 1)  # a peer that never saved reads rank 0's first
        done = os.path.join(self.tmpdir, f"adapters-{n}.done")
        if getattr(self, "saved", None) is None and not os.path.exists(done):
            raise HarnessError("no adapters were saved (save_adapters first)")
        t0 = time.time()
        while not os.path.exists(done):  # rank 0 may still be writing
            if time.time() - t0 > 10:
                raise HarnessError("no adapters were saved (save_adapters first)")
            time.sleep(0.005)
        saved = torch.load(os.path.join(self.tmpdir, f"adapters-{n}.pt"))
        self.reload_expect = getattr(self, "saved_own", None) or {}
        # rank 0's local rows, of the shape this rank holds: they land on this rank's rows
        full = {x["name"]: x["full_rows"] for x in getattr(self, "saved_view", [])}
        self.reload_foreign = set()
        for a, asd in saved.items():
            for k, v in asd.items():
                name = saved_name(k, a, self.scen)
                mine = self.reload_expect.get(name)
                if (self.rank > 0 and mine is not None and mine.shape[0] > 0 and name in full and
                        v.shape[0] == mine.shape[0] != full[name]):
                    self.reload_foreign.add(name)
                # an unmanaged replica (added after prepare) takes rank 0's whole copy
                elif self.rank > 0 and mine is not None and observe.managed(self, name) is None:
                    self.reload_foreign.add(name)
        for a, asd in saved.items():
            res = set_peft_model_state_dict(self.pm, asd, adapter_name=a)
            if os.environ.get("FSDPSIM_UPSTREAM_DEBUG"):
                print("load", a, {k: tuple(v.shape) for k, v in asd.items()}, res, file=sys.stderr)

    def op_delta_weight(self, layer):
        """get_delta_weight of each active adapter of LAYER, as PEFT computes
        it on whatever is registered; delta_weight_gather=on makes A and B
        full first. The coordinator judges each against the full B @ A."""
        from torch.distributed.tensor import DTensor
        m = self.layer(layer)
        self.deltas = {}
        for a in self.pm.base_model.active_adapters:
            if a not in getattr(m, "lora_A", {}):  # a layer no adapter targets has no delta
                continue
            d = m.get_delta_weight(a)
            self.deltas[a] = d

    def patch_delta_weight(self, late=False):
        """delta_weight_gather=on: every get_delta_weight of a ParamWrapper
        layer (delta_weight, merge, unmerge) reads the full A and B, as the
        fix #3102 proposed. At the build, for good; with `late`, the
        ParamWrappers an add_adapter / load_adapter made since (returned, for
        run_op to take the fix off again after the op)."""
        patched = []
        if self.sw["delta_weight_gather"] != "on":
            return patched
        for l in self.scen.layers:
            m = self.layer(l.name)
            if l.experts and hasattr(m, "get_delta_weight"):
                if late and "get_delta_weight" in vars(m):
                    continue  # one the build patched
                m.get_delta_weight = lambda a, m=m: Session.delta_on_full(m, a, type(m).get_delta_weight)
                patched.append(m)
        return patched

    @staticmethod
    def delta_on_full(m, a, compute=None):
        """The fix #3102 proposed (summon the full parameters), for FSDP2: A
        and B all-gathered (DTensor.full_tensor), PEFT's own get_delta_weight
        run on them, the registered objects put back."""
        from torch.distributed.tensor import DTensor
        saved = {}
        for mod in (m.lora_A[a], m.lora_B[a]):
            w = mod._parameters["weight"]
            saved[mod] = w
            if isinstance(w, DTensor):
                mod._parameters["weight"] = nn.Parameter(w.full_tensor(), requires_grad=w.requires_grad)
        try:
            d = compute(m, a) if compute else m.get_delta_weight(a)
            w = m.get_base_layer().weight if compute is None else getattr(m.get_base_layer(), m.parameter_name)
            if isinstance(w, DTensor) and not isinstance(d, DTensor):
                # the delta laid out like the weight it is added to (each rank slices its own rows: no collective)
                from torch.distributed.tensor import distribute_tensor
                d = distribute_tensor(d.detach(), w.device_mesh, w.placements, src_data_rank=None)
            return d
        finally:
            for mod, w in saved.items():
                mod._parameters["weight"] = w

    def run_op(self, op):
        """One op. A ParamWrapper made after the build gets the delta_weight_gather fix for
        the op's merges, unmerges and deltas, as the built ones have it, but not for a
        forward: there the model keeps _activate_lora's plain W + delta of a wrapper made
        around an FSDP module (the mixed DTensor refusal) whatever the fix."""
        late = [] if op.kind in ("forward", "eval", "train_step", "backward") else self.patch_delta_weight(late=True)
        try:
            self._run_op(op)
        finally:
            for m in late:
                del m.get_delta_weight

    def _run_op(self, op):
        k = op.kind
        if k in ("forward", "eval"):
            self.op_forward(k == "forward")
        elif k == "backward":
            self.op_backward()
        elif k == "step":
            self.op_step()
        elif k == "zero_grad":
            self.op_zero_grad()
        elif k == "train_step":
            self.op_zero_grad()
            self.op_forward(True)
            self.op_backward()
            self.op_step()
        elif k == "merge":
            self.pm.base_model.merge_adapter(list(op.names) if op.names else None)
        elif k == "unmerge":
            self.pm.base_model.unmerge_adapter()
        elif k == "set_adapter":
            self.op_set_adapter(op)
        elif k == "disable_enter":
            self.op_disable_enter()
        elif k == "disable_exit":
            self.op_disable_exit()
        elif k == "add_adapter":
            self.op_add_adapter(op.names[0], None)
        elif k == "load_adapter":
            self.op_load_adapter(op.names[0], op.trainable)
        elif k == "delete_adapter":
            self.op_delete_adapter(op.names[0])
        elif k in ("reshard", "unshard"):
            self.op_reshard_unshard(op)
        elif k == "state_dict":
            self.pm.state_dict()
        elif k == "save_optimizer":
            self.op_save_optimizer()
        elif k == "load_optimizer":
            self.op_load_optimizer()
        elif k == "prepare":
            self.prepare()
        elif k == "new_optimizer":
            if self.prepared:
                self.build_optimizer()
        elif k == "save_adapters":
            self.op_save_adapters(op)
        elif k == "load_adapters":
            self.op_load_adapters()
        elif k == "delta_weight":
            self.op_delta_weight(op.names[0])
        elif k == "gradient_sync":
            # the root's FSDPModule.set_requires_gradient_sync (recurse=True: every FSDP module's reduce_grads)
            self.pm.set_requires_gradient_sync(op.names[0] == "on")
        else:
            raise NotImplementedError(f"op {k} is not supported by the upstream backend yet")
