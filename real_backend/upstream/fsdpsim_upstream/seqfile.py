"""Reads the canonical `.seq` text fsdpsim prints (model/vocab/seq_printer.cpp):
the scenario, `---`, one op per line. Expectations are dropped: the upstream
backend observes, the C++ side judges."""
from dataclasses import dataclass, field


@dataclass
class Layer:
    name: str
    fan_in: int
    fan_out: int
    experts: int = 0
    quant: object = None  # `quant=nf4|fp4`: a bitsandbytes Linear4bit base with that quant_type
    compute_dtype: object = None  # its compute_dtype ("bf16" / "fp32"); None: bitsandbytes' default
    # a `model` scenario's module: its weight's shape as stored (a Conv1D's is (in, out), a norm's
    # (dim,)) and whether it is a Conv1D (PEFT's delta is transposed there: fan_in_fan_out)
    shape: object = None
    transposed: bool = False


@dataclass
class Adapter:
    name: str
    r: int
    alpha: int
    targets: list
    init: str = "random"
    inference_mode: bool = False
    deferred: bool = False
    autocast: object = None  # the autocast_adapter_dtype its entry point takes; None: the scenario's
    # LoraConfig(modules_to_save=...): layers PEFT wraps in a ModulesToSaveWrapper (peft/utils/other.py)
    modules_to_save: list = field(default_factory=list)
    use_dora: bool = False  # LoraConfig(use_dora=True): a lora_magnitude_vector per target layer


MP_KEYS = ("param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")


def mp_keys(words):
    """The MixedPrecisionPolicy keys a `mixed_precision` or `fully_shard` line sets, as text."""
    return {k: v for k, v in (w.split("=", 1) for w in words if "=" in w) if k in MP_KEYS}


@dataclass
class Shard:
    modules: list
    raf: str  # true | false | none
    mp: dict = field(default_factory=dict)  # the mixed_precision keys this call overrides

    @property
    def is_root(self):
        return self.modules == ["root"]


@dataclass
class Op:
    kind: str
    rank: int = -1
    names: list = field(default_factory=list)
    list_form: bool = False
    trainable: bool = False
    error: str = ""  # `expect error=S`: the status the recorded run had (export checks it)

    def runs_on(self, r):
        return self.rank < 0 or self.rank == r

    def text(self):
        out = f"@{self.rank} " if self.rank >= 0 else ""
        out += self.kind
        if self.kind == "load_adapter":
            return out + f" {self.names[0]} " + ("trainable" if self.trainable else "frozen")
        if self.list_form:
            out += " [" + ",".join(self.names) + "]"
        elif self.names:
            out += " " + self.names[0]
        return out

    @property
    def is_training(self):
        return self.kind in ("backward", "train_step")


@dataclass
class Scenario:
    world: int = 1
    seed: int = 0
    profile: str = "upstream"
    sets: dict = field(default_factory=dict)
    layers: list = field(default_factory=list)
    adapters: list = field(default_factory=list)
    shards: list = field(default_factory=list)
    optimizer: str = "trainable"
    loading: str = "full"
    dtype: str = "fp32"
    autocast_adapter_dtype: bool = True
    data: str = "same"
    # `checkpoint lin0,lin1`: layers wrapped in checkpoint_wrapper before fully_shard (hazard B7)
    checkpoint: list = field(default_factory=list)
    # `mixed_precision k=v ...`: the MixedPrecisionPolicy every fully_shard gets (text values)
    mp: dict = field(default_factory=dict)
    # `model FAMILY k=v ...` (model_config.parse_model_line): a transformers model built from its
    # config, whose modules with parameters become `layers` once it is built (session.py)
    model: object = None
    plan: str = ""  # `fully_shard_plan transformer_layers`: accelerate's units (prepare.py)

    def policy_keys(self, shard):
        """The policy keys fully_shard call `shard` is made with: the scenario's, its own over them."""
        return {**self.mp, **shard.mp}

    def adapter(self, name):
        return next(a for a in self.adapters if a.name == name)

    def autocast(self, a):
        """The autocast_adapter_dtype adapter a's get_peft_model / add_adapter / load_adapter call takes."""
        return self.autocast_adapter_dtype if a.autocast is None else a.autocast

    def layer(self, name):
        return next(l for l in self.layers if l.name == name)

    def saved(self, layer):
        """Some adapter lists the layer in modules_to_save (model/vocab/scenario.cpp saved_module)."""
        return any(layer in a.modules_to_save for a in self.adapters)

    def base_name(self, layer, what="weight"):
        """The layer's own parameter: `L.weight`, or `L.original_module.weight` once a
        ModulesToSaveWrapper holds it (peft/utils/other.py::AuxiliaryTrainingWrapper.__init__)."""
        return f"{layer}.original_module.{what}" if self.saved(layer) else f"{layer}.{what}"

    def param_owners(self):
        """{"lin0.lora_A.b": ("lin0", "lora_A", "b"), "lin1.modules_to_save.b.weight":
        ("lin1", "modules_to_save", "b")} for every adapter parameter the declarations
        produce. Owners are looked up whole, never recovered by splitting a name
        (docs/guide/seq-format.md "Names"; model/vocab/scenario.cpp adapter_of_param)."""
        owners = {}
        for l in self.layers:
            for a in self.adapters:
                if l.name in a.targets:
                    kinds = ("lora_A", "lora_B") + (("lora_magnitude_vector",) if a.use_dora else ())
                    for kind in kinds:
                        owners[f"{l.name}.{kind}.{a.name}"] = (l.name, kind, a.name)
            # ModulesToSaveWrapper.update: one deep copy of the layer per adapter listing it
            for a in self.adapters:
                if l.name in a.modules_to_save:
                    for what in ("weight", "bias"):
                        owners[f"{l.name}.modules_to_save.{a.name}.{what}"] = (l.name, "modules_to_save", a.name)
        return owners


def parse(text):
    scen = Scenario()
    ops = []
    body = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line == "---":
            body = True
            continue
        expect = ""
        if " expect" in line or line.startswith("expect"):
            line, expect = (w.strip() for w in line.split("expect", 1))
            if not line:
                continue
        words = line.split()
        if body:
            ops.append(_op(words))
            ops[-1].error = next((w.split("=", 1)[1] for w in expect.split() if w.startswith("error=")), "")
            continue
        key, rest = words[0], words[1:]
        if key == "world":
            scen.world = int(rest[0])
        elif key == "seed":
            scen.seed = int(rest[0])
        elif key == "profile":
            scen.profile = rest[0]
        elif key == "set":
            k, v = rest[0].split("=", 1)
            scen.sets[k] = v
        elif key == "layer":
            opts = dict(w.split("=", 1) for w in rest[3:])
            scen.layers.append(Layer(rest[0], int(rest[1]), int(rest[2]), int(opts.get("experts", 0)),
                                     opts.get("quant"), opts.get("compute_dtype")))
        elif key == "adapter":
            kv = dict(w.split("=", 1) for w in rest[1:] if "=" in w)
            scen.adapters.append(Adapter(rest[0], int(kv.get("r", 8)), int(kv.get("alpha", 8)),
                                         kv.get("targets", "").split(","), kv.get("init", "random"),
                                         "inference_mode" in rest[1:], "deferred" in rest[1:],
                                         {"true": True, "false": False}.get(kv.get("autocast")),
                                         [n for n in kv.get("modules_to_save", "").split(",") if n],
                                         "use_dora" in rest[1:]))
        elif key == "fully_shard":
            raf = "none"
            for w in rest[1:]:
                if w.startswith("reshard_after_forward="):
                    raf = w.split("=", 1)[1]
            scen.shards.append(Shard(rest[0].split(","), raf, mp_keys(rest[1:])))
        elif key == "model":
            from .model_config import parse_model_line
            scen.model = parse_model_line(line)
        elif key == "fully_shard_plan":
            scen.plan = rest[0]
        elif key == "optimizer":
            scen.optimizer = rest[0]
        elif key == "loading":
            scen.loading = rest[0]
        elif key == "data":
            scen.data = rest[0]
        elif key == "checkpoint":
            scen.checkpoint = [n for n in rest[0].split(",") if n]
        elif key == "mixed_precision":
            scen.mp = mp_keys(rest)
        elif key == "dtype":
            scen.dtype = rest[0]
            scen.autocast_adapter_dtype = "autocast_adapter_dtype=false" not in rest[1:]
        else:
            raise ValueError(f"unknown scenario line: {raw}")
    return scen, ops


def _op(words):
    op = Op(kind="")
    if words[0].startswith("@"):
        op.rank = int(words[0][1:])
        words = words[1:]
    op.kind = words[0]
    arg = " ".join(words[1:])
    if op.kind == "load_adapter":
        op.names = [words[1]]
        op.trainable = words[2] == "trainable"
    elif arg.startswith("["):
        op.list_form = True
        op.names = [n for n in arg.strip("[]").split(",") if n]
    elif arg:
        op.names = [arg]
    return op
