"""One sequence on one rank: builds the scenario with the real libraries
(torch FSDP2 `fully_shard` and accelerate's `Accelerator.prepare` (prepare.py), PEFT
`get_peft_model` / `add_adapter`, AdamW),
runs each op through the real API (its row of the op table, op_table.py, which export.py
prints too), and reads every observation off the real objects. Nothing here consults
fsdpsim's model."""
import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model

from . import candidate_fixes, model_scenario, observe, op_table, prepare, reuse
from .collectives import REC
from .seqfile import Op
from .timing import PHASES
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


def seed_cpu(seed):
    """torch.manual_seed's CPU generator alone: the ranks draw on CPU only, and torch.manual_seed also
    queues a seeding of each lazy device (cuda, xpu, mtia), each with a formatted Python stack
    (torch/random.py::manual_seed, torch/cuda/__init__.py::_lazy_call): 0.8 ms a call quiet, two
    a build. The CPU stream is the same (manual_seed seeds torch.default_generator with it)."""
    torch.default_generator.manual_seed(int(seed))


COMPUTE_DTYPE = {"bf16": torch.bfloat16, "fp32": torch.float32, None: None}


def linear4bit(l):
    """`quant=nf4|fp4`: a bitsandbytes Linear4bit (an nn.Linear whose weight is a Params4bit,
    quantized when moved to a device: bitsandbytes/nn/modules.py::Params4bit.to). It draws its
    initial weight as nn.Linear does, so the unquantized W0 is the plain layer's."""
    import bitsandbytes as bnb
    return bnb.nn.Linear4bit(l.fan_in, l.fan_out, bias=True, compute_dtype=COMPUTE_DTYPE[l.compute_dtype],
                             quant_type=l.quant)


def quantize(net, layers):
    """Quantizes the 4-bit layers where the weights are real (Params4bit.to a non-meta device), and
    marks the model loaded in 4-bit as transformers does: PEFT's LoRA dispatch reads
    `is_loaded_in_4bit` to pick lora.bnb.Linear4bit (peft/tuners/lora/model.py::
    LoraModel._create_new_module passes it as loaded_in_4bit to bnb.py::dispatch_bnb_4bit)."""
    if any(l.quant for l in layers):
        net.is_loaded_in_4bit = True
        if next(net.parameters()).device.type != "meta":
            net.to("cpu")
    return net


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
                            else linear4bit(l) if l.quant else nn.Linear(l.fan_in, l.fan_out))
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
                              .replace(".lora_B.weight", f".lora_B.{adapter}.weight")
                              .replace(".lora_magnitude_vector", f".lora_magnitude_vector.{adapter}.weight"))
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
    modules = [t for t in a.targets if t not in experts] or None
    if modules == ["all-linear"]:  # PEFT's shorthand is the string (peft/utils/constants.py::INCLUDE_LINEAR_LAYERS_SHORTHAND)
        modules = "all-linear"
    return LoraConfig(r=a.r, lora_alpha=a.alpha, target_modules=modules,
                      init_lora_weights=(a.init == "zero"), modules_to_save=list(a.modules_to_save) or None,
                      inference_mode=a.inference_mode if inference_mode is None else inference_mode,
                      use_dora=a.use_dora, **extra)


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
        self.managed_memo = self.layer_memo = None  # observe.reading's, while one is read
        self.reuse_key = None  # set (reuse.key_of) where the model may come from the previous sequence

    # ---- building -------------------------------------------------------
    def base_net(self):
        """The base model as loaded: in the scenario's dtype; with
        `loading ram_efficient` only rank 0 has real weights and the others
        hold meta tensors (transformers' loading under accelerate's
        fsdp_cpu_ram_efficient_loading)."""
        seed_cpu(self.scen.seed)
        if self.scen.model:
            return model_scenario.build_base(self.scen, self.scen.seed, self.scen.loading == "ram_efficient" and self.rank > 0).to(self.dtype)
        if self.scen.loading == "ram_efficient" and self.rank > 0:
            with torch.device("meta"):
                net = Net(self.scen.layers, self.dtype)
        else:
            net = Net(self.scen.layers, self.dtype)
        return quantize(net.to(self.dtype), self.scen.layers)

    def build(self):
        self.dtype = torch.bfloat16 if self.scen.dtype == "bf16" else torch.float32
        if self.scen.model:  # its layers: the modules of the model its config builds
            self.scen.layers = model_scenario.layers_for(self.scen)
        observe.set_layers([l.name for l in self.scen.layers])
        with PHASES.timed("reset"):  # the last sequence's model, where the scenario is the same (reuse.py)
            kept = reuse.take(self, self.reuse_key)
        if not kept:
            self.build_model()
        self.patch_delta_weight()
        if self.scen.model:
            model_scenario.resolve_targets(self)
            if self.scen.plan == "transformer_layers":
                self.scen.shards = model_scenario.plan_shards(self.scen, self.pm)
            self.x = model_scenario.batch(self.scen, self.rank)
            if not any(op.kind == "prepare" for op in self.ops):
                with PHASES.timed("prepare"):
                    self.prepare()
            return
        # `data per_rank`: each rank its own batch, as a DistributedSampler hands out
        # (rank 0's is the `same` batch every rank reads otherwise)
        shift = self.rank * 1000003 if self.scen.data == "per_rank" else 0
        g = torch.Generator().manual_seed(self.scen.seed + 1 + shift)
        self.x = torch.randn(BATCH, self.scen.layers[0].fan_in, generator=g)
        if not any(op.kind == "prepare" for op in self.ops):
            with PHASES.timed("prepare"):
                self.prepare()

    def build_model(self):
        """The base model and PEFT's adapters on it, kept for the next sequence of the same
        scenario where reuse is on (reuse.py)."""
        with PHASES.timed("model"):
            net = self.base_net()
            cpu = net
            if any(l.quant for l in self.scen.layers) or next(net.parameters()).device.type == "meta":
                # W0 as every rank will hold it after prepare: a meta rank's (ram-efficient loading)
                # drawn as rank 0 draws it; a 4-bit layer's as quantized on its own copy. Elsewhere
                # the net just built holds it: the same draws from the same seed, which also leave
                # the generator where the second build would
                seed_cpu(self.scen.seed)
                cpu = (model_scenario.build_base(self.scen, self.scen.seed).to(self.dtype) if self.scen.model
                       else quantize(Net(self.scen.layers).to(self.dtype), self.scen.layers))
            self.w0 = {l.name: cpu.get_submodule(l.name).weight.detach().clone() for l in self.scen.layers}
        with PHASES.timed("peft"):
            live = [a for a in self.scen.adapters if not a.deferred]
            self.pm = get_peft_model(net, lora_config(live[0], layers=self.scen.layers), adapter_name=live[0].name,
                                     autocast_adapter_dtype=self.scen.autocast(live[0]))
            for a in live[1:]:
                op_table.ROW["add_adapter"].run(self, Op("add_adapter", names=[a.name]))
        with PHASES.timed("reset"):
            reuse.keep(self, self.reuse_key)

    def layer(self, name):
        """The layer's own module (PEFT's LoRA layer, or the plain one no adapter
        targets): under `checkpoint`, the one the CheckpointWrapper holds."""
        memo = self.layer_memo  # observe.reading: the modules stay while an observation is read
        if memo is not None and name in memo:
            return memo[name]
        m = self.pm.base_model.model.get_submodule(name)
        m = m._modules["_checkpoint_wrapped_module"] if name in self.scen.checkpoint and is_ac_wrapper(m) else m
        if memo is not None:
            memo[name] = m
        return m

    def module_of(self, group):
        """The module at a group's path: what fully_shard was given (under
        `checkpoint`, the CheckpointWrapper, as accelerate shards it)."""
        return self.pm if group == "root" else self.pm.base_model.model.get_submodule(group)

    def apply_checkpointing(self):
        """`checkpoint L,...`: each layer wrapped where it sits, before any
        fully_shard (accelerate/utils/fsdp_utils.py::fsdp2_apply_ac, which
        accelerator.py::_prepare_fsdp2 runs before fsdp2_prepare_model)."""
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        for name in self.scen.checkpoint:
            m = self.pm.base_model.model.get_submodule(name)
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
        if self.scen.model:  # the calls' paths are modules above the layers
            first = model_scenario.group_order(self.scen, self.scen.shards)
        else:
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

    # ---- what the ops use (op_table.py holds the ops) ---------------------
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

    def group_of_layer(self, layer):
        fp = self.fsdp_param.get(self.scen.base_name(layer))
        return getattr(fp, "_fsdpsim_group", "")

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
        """One op, its row of the op table (op_table.py). A ParamWrapper made after the build gets
        the delta_weight_gather fix for the op's merges, unmerges and deltas, as the built ones
        have it, but not for a forward pass: there the model keeps _activate_lora's plain
        W + delta of a wrapper made around an FSDP module (the mixed DTensor refusal) whatever the fix."""
        row = op_table.ROW.get(op.kind)
        if row is None:
            raise NotImplementedError(f"op {op.kind} is not supported by the upstream backend yet")
        late = [] if row.forward_pass else self.patch_delta_weight(late=True)
        try:
            with candidate_fixes.single_expert_delta(self):
                row.run(self, op)
        finally:
            for m in late:
                del m.get_delta_weight
