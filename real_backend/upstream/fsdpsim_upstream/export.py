"""`fsdpsim export FILE.seq --python`: a finding as a short, self-contained script on
the real libraries that a maintainer can paste into an upstream issue: the model, the
calls, and one plain `assert` of the invariant the finding breaks (repro_asserts.py),
exiting 1 through the assert while the bug is there and 0 once it is fixed. Top-level
code, no helpers beyond the ones a call needs; a torchrun script on CPU with gloo, or,
with --plain (the finding reproduces at world 1 without fully_shard), plain `python`
without torch.distributed. A file without a finding is a script that runs its ops and
exits 0.

Names: the .seq grammar allows layer names that are not Python identifiers (`lin-0`),
keywords (`class`) and ones Python mangles (`__w`); the script only ever spells a layer
name inside a string (nn.Sequential of an OrderedDict, get_submodule), so each compiles
and runs. A name nn.Module reserves (`forward`, `to`) cannot be a child of nn.Sequential
and is renamed in the script (its docstring says so)."""
import keyword
import os
import platform
import sys
from importlib import metadata

from types import SimpleNamespace

from . import op_table, profiles, repro_asserts, repro_checks, seqfile
from .scenario_build import lora_config_text

RAF = {"true": "True", "false": "False", "none": "None"}
DTYPE = {"fp32": "torch.float32", "bf16": "torch.bfloat16"}
# what session.py::linear4bit passes bitsandbytes as a 4-bit layer's compute_dtype (None: its default)
COMPUTE_DTYPE = {"fp32": "torch.float32", "bf16": "torch.bfloat16"}
BATCH = 4


def unwritten(sw, scen, ops=()):
    """A switch value whose fix this scenario would need and the script cannot write yet, else None."""
    if sw.get("delete_fallback") == "shared" and any(op.kind == "delete_adapter" for op in ops):
        return "delete_fallback=shared"
    if (sw.get("save_key_prefixes") == "wrappers_stripped" and scen.checkpoint
            and any(op.kind == "save_adapters" for op in ops)):
        return "save_key_prefixes=wrappers_stripped"
    # a refusal needs a checkpointed or experts target after fully_shard
    if (sw.get("add_adapter_rollback") == "on" and (scen.checkpoint or any(l.experts for l in scen.layers))
            and any(op.kind in ("add_adapter", "load_adapter") for op in ops)):
        return "add_adapter_rollback=on"
    if sw.get("single_expert_delta") == "param_layout" and any(l.experts == 1 for l in scen.layers):
        return "single_expert_delta=param_layout"
    if sw["delta_weight_gather"] == "on" and any(l.experts for l in scen.layers):
        return "delta_weight_gather=on (on an experts layer)"
    if sw["adapter_meta_check"] == "per_adapter" and scen.loading != "full":
        return "adapter_meta_check=per_adapter"
    return None


def versions():
    """The versions of the environment the export ran in (the .venv of fsdpsim's upstream backend)."""
    def v(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"
    return f"torch {v('torch')}, peft {v('peft')}, accelerate {v('accelerate')}, Python {platform.python_version()}"


def reserved_names():
    """Attribute names an nn.Sequential instance already has: add_module refuses them."""
    import torch.nn as nn
    return set(dir(nn.Sequential()))


def safe_attr(name):
    """A name the script may write as `.name`: an identifier, no keyword, not mangled."""
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__")


class Writer:
    def __init__(self, scen, ops, sw, finding, plain=False, prepares=None):
        self.scen, self.ops, self.sw, self.f = scen, ops, sw, finding
        self.fsdp = not plain
        # whether the sequence calls `prepare` (perhaps after the finding's step, which the script
        # stops at): then nothing is sharded before it, else the build shards up front
        self.prepares = any(op.kind == "prepare" for op in ops) if prepares is None else prepares
        self.lines = []
        self.applied = []  # the switches whose fix the script writes (its `# fix` lines)
        self.w0 = None  # the layer whose initial weight the check needs
        self.timeout = self.rank_needed = False
        live = [a for a in scen.adapters if not a.deferred]
        self.opt_made = not (scen.optimizer == "trainable" and live[0].inference_mode)
        self.last_save = 0
        reserved = reserved_names()
        taken = {l.name for l in scen.layers}
        self.renamed = {}  # the .seq's layer name -> the script's, for names nn.Module reserves
        for l in scen.layers:
            if l.name in reserved:
                new = l.name + "_"
                while new in taken or new in reserved:
                    new += "_"
                taken.add(new)
                self.renamed[l.name] = new

    # -- names ---------------------------------------------------------------------------------
    def name(self, layer):
        return self.renamed.get(layer, layer)

    def layer(self, layer):
        n = self.name(layer)
        return f"model.base_model.model.{n}" if safe_attr(n) else f"model.base_model.model.get_submodule({n!r})"

    def param(self, short):
        """`lin0.lora_A.b` (or `lin1.modules_to_save.b.weight`) as the script's expression."""
        layer, kind, adapter = self.scen.param_owners()[short]
        if kind == "modules_to_save":
            return f"{self.layer(layer)}.modules_to_save[{adapter!r}].{short.rsplit('.', 1)[1]}"
        return f"{self.layer(layer)}.{kind}[{adapter!r}].weight"

    def config(self, a):
        text = lora_config_text(a, self.scen.layers)
        for old, new in self.renamed.items():
            text = text.replace(repr(old), repr(new)).replace(repr(old + ".weight"), repr(new + ".weight"))
        return text

    def autocast(self, a):
        return f", autocast_adapter_dtype={self.scen.autocast(a)}" if self.scen.dtype != "fp32" else ""

    # -- lines ---------------------------------------------------------------------------------
    def emit(self, text=""):
        self.lines.append(text)

    def fix(self, ind, text, switch):
        """A candidate fix's lines follow (the profile switch `switch` asks for it)."""
        self.emit(f"{ind}# fix ({text})")
        if text not in self.applied:
            self.applied.append(text)

    def groups(self):
        """The FSDP modules, root first."""
        out = []
        for d in reversed(self.scen.shards):
            out.append("model" if d.is_root else self.layer(d.modules[0]))
        return out

    def reshard_all(self, ind):
        self.emit(f"{ind}for m in ({', '.join(self.groups())},):")
        self.emit(f"{ind}    m.reshard()")

    def op_body(self, op, ind):
        """The op's lines: its row of the op table (op_table.py), which session.py runs too."""
        row = op_table.ROW.get(op.kind)
        if row is None:
            raise ValueError(f"export --python does not support `{op.kind}` yet")
        row.write(self, op, ind)

    # -- the scenario --------------------------------------------------------------------------
    def base(self):
        """The base model's expression: nn.Sequential of the layers in order."""
        s = self.scen
        mods = []
        for l in s.layers:
            mod = (f"Experts({l.experts}, {l.fan_in}, {l.fan_out})" if l.experts else self.linear4bit(l) if l.quant
                   else f"nn.Linear({l.fan_in}, {l.fan_out})")
            mods.append(f"({self.name(l.name)!r}, {mod})")
        cast = f".to({DTYPE[s.dtype]})" if s.dtype != "fp32" else ""
        return f"nn.Sequential(OrderedDict([{', '.join(mods)}])){cast}"

    @staticmethod
    def linear4bit(l):
        """`quant=nf4|fp4`: the bitsandbytes Linear4bit session.py::linear4bit builds (an nn.Linear whose
        weight is a Params4bit: it draws its initial weight as nn.Linear does)."""
        dtype = f", compute_dtype={COMPUTE_DTYPE[l.compute_dtype]}" if l.compute_dtype else ""
        return f"bnb.nn.Linear4bit({l.fan_in}, {l.fan_out}{dtype}, quant_type={l.quant!r})"

    def quantize(self, ind):
        """session.py::quantize: the 4-bit weights quantized where they are real (Params4bit.to a device),
        the model marked loaded in 4-bit as transformers marks it: PEFT's LoRA dispatch reads
        `is_loaded_in_4bit` (peft/tuners/lora/model.py::LoraModel._create_new_module) to pick
        lora.bnb.Linear4bit."""
        if not any(l.quant for l in self.scen.layers):
            return
        self.emit(f"{ind}net.is_loaded_in_4bit = True  # as transformers marks a model loaded in 4-bit")
        if self.scen.loading == "ram_efficient" and self.fsdp:
            self.emit(f"{ind}if rank == 0:  # the ranks holding real weights quantize them (Params4bit.to)")
            self.emit(f"{ind}    net.to('cpu')")
        else:
            self.emit(f"{ind}net.to('cpu')  # Params4bit.to quantizes the 4-bit weights")

    def ignored(self, ind):
        """accelerate's fsdp2_prepare_model (accelerate/utils/fsdp_utils.py) leaves a model's frozen
        non-floating Params4bit out of every fully_shard (ignored_params); the upstream backend takes that
        path where prepare.py::blocker names no reason: the script passes the same set there."""
        if not any(l.quant for l in self.scen.layers):
            return ""
        from . import prepare  # imports torch: only a 4-bit export needs it (the op-table test runs without torch)
        if prepare.blocker(SimpleNamespace(prepared=False, scen=self.scen), held=[True]) is not None:
            return ""
        self.emit(f"{ind}ignored = {{p for p in model.parameters() if type(p).__name__ == 'Params4bit' and not "
                  f"p.requires_grad and not p.is_floating_point()}}  # what accelerate leaves out of sharding")
        return ", ignored_params=ignored"

    def shard(self, ind):
        """fully_shard bottom-up as the scenario says (the calls accelerate's fsdp2_prepare_model makes),
        then `shards`, the parameters FSDP registered, and the optimizer."""
        s, e = self.scen, self.emit
        ram = s.loading == "ram_efficient"
        self.checkpoint(ind)
        if ram:  # accelerate's fsdp2_prepare_model with cpu_ram_efficient_loading: shard on meta, then broadcast
            e(f"{ind}full_sd = model.state_dict()")
            e(f"{ind}model.to('meta')")
        ignored = self.ignored(ind)
        for d in s.shards:
            raf = RAF[d.raf]
            if d.is_root and self.sw["root_reshard_rule"] == "force_false":
                raf = "False"
            policy = self.policy(s.policy_keys(d))
            if d.is_root:
                e(f"{ind}fully_shard(model, mesh=mesh, reshard_after_forward={raf}{policy}{ignored})")
            else:
                mods = [self.layer(m) for m in d.modules]
                arg = mods[0] if len(mods) == 1 else "[" + ", ".join(mods) + "]"
                e(f"{ind}fully_shard({arg}, mesh=mesh, reshard_after_forward={raf}{policy}{ignored})")
        if ram:
            e(f"{ind}fsdp2_load_full_state_dict(SimpleNamespace(is_main_process=rank == 0), model, full_sd)")
        e(f"{ind}shards = dict(model.named_parameters())  # the parameters FSDP registered: gradients land here")
        self.optimizer(ind)

    @staticmethod
    def policy(keys):
        """`, mp_policy=MixedPrecisionPolicy(...)` for a call made with policy keys (torch _fsdp_api.py), else ""."""
        if not keys:
            return ""
        args = [f"{k}={DTYPE[v]}" if k != "cast_forward_inputs" else f"{k}={v == 'true'}" for k, v in keys.items()]
        return f", mp_policy=MixedPrecisionPolicy({', '.join(args)})"

    def checkpoint(self, ind):
        """Activation checkpointing of the scenario's layers (before any fully_shard), as accelerate's
        fsdp2_apply_ac wraps them."""
        for name in self.scen.checkpoint:
            self.emit(f"{ind}model.base_model.model.set_submodule({self.name(name)!r}, "
                      f"checkpoint_wrapper({self.layer(name)}, preserve_rng_state=False))")

    def optimizer(self, ind):
        """AdamW over the adapters' parameters (those trainable now under `optimizer trainable`); none when
        there is none to train (an inference_mode adapter alone): torch refuses an empty list."""
        if not self.opt_made:
            self.emit(f"{ind}opt = None  # nothing is trainable")
            return
        sel = "p.requires_grad" if self.scen.optimizer == "trainable" else "'.lora_' in n or 'modules_to_save' in n"
        src = "shards.items()" if self.fsdp else "model.named_parameters()"
        self.emit(f"{ind}opt = torch.optim.AdamW([p for n, p in {src} if {sel}], lr=1e-2)")

    def build(self):
        s, e = self.scen, self.emit
        if self.fsdp:
            timeout = ", timeout=timedelta(seconds=10)" if self.timeout else ""
            e(f'dist.init_process_group("gloo"{timeout})')
            e("rank = dist.get_rank()")
            e('mesh = init_device_mesh("cpu", (dist.get_world_size(),))')
        if any(op.kind == "load_adapter" for op in self.ops):
            e("tmp = tempfile.TemporaryDirectory()  # removed at exit")
        e(f"torch.manual_seed({s.seed})")
        if any(op.kind == "load_adapter" for op in self.ops):
            e("")
            e("")
            e("def base():  # a second base model: the source of the loaded adapter")
            e(f"    return {self.base()}")
            e("")
            e("")
            net = "base()"
        else:
            net = self.base()
        if s.loading == "ram_efficient" and self.fsdp:
            e("with torch.device('meta' if rank > 0 else 'cpu'):  # rank 0 alone loads the weights")
            e(f"    net = {net}")
        else:
            e(f"net = {net}")
        self.quantize("")
        if self.w0:
            e(f"w0 = net.get_submodule({self.name(self.w0)!r}).weight.detach().clone()")
        live = [a for a in s.adapters if not a.deferred]
        name = "" if live[0].name == "default" else f", adapter_name={live[0].name!r}"
        e(f"model = get_peft_model(net, {self.config(live[0])}{name}{self.autocast(live[0])})")
        for a in live[1:]:
            op_table.ROW["add_adapter"].write(self, seqfile.Op("add_adapter", names=[a.name]), "")
        if self.fsdp and not self.prepares:
            self.shard("")
        elif not self.fsdp:
            self.checkpoint("")
            self.optimizer("")
        shift = " + 1000003 * rank" if s.data == "per_rank" and self.fsdp else ""
        cast = f".to({DTYPE[s.dtype]})" if s.dtype != "fp32" else ""
        e(f"x = torch.randn({BATCH}, {s.layers[0].fan_in}, generator=torch.Generator().manual_seed({s.seed + 1}"
          f"{shift})){cast}")

    def step(self, op, ind=""):
        """One op's lines; an op the recorded run saw raise raises here too: the script goes on."""
        if op.rank >= 0:
            self.emit(f"{ind}if rank == {op.rank}:")
            ind += "    "
        if op.error:
            self.emit(f"{ind}try:")
            self.op_body(op, ind + "    ")
            self.emit(f"{ind}except Exception as e:  # it raises here too: the sequence goes on")
            self.emit(f"{ind}    print(f'{op.kind} raised {{type(e).__name__}}: {{e}}')")
        else:
            self.op_body(op, ind)

    def body(self):
        f = self.f
        if not f:
            for op in self.ops:
                self.step(op)
            return
        op = self.ops[f.step - 1]
        if op.rank >= 0 and f.spec in ("S2", "S7"):
            raise ValueError(f"export --python cannot check {f.spec} after a rank-divergent op yet")
        before, wrap, after = repro_asserts.plan(self, f, op)
        for o in self.ops[:f.step - 1]:
            self.step(o)
        for line in before:
            self.emit(line)
        if wrap:
            self.emit("try:")
            ind = "    "
            if op.rank >= 0:
                self.emit(f"    if rank == {op.rank}:")
                ind += "    "
            self.op_body(op, ind)
            self.emit("except Exception as e:")
            self.emit(f"    raise AssertionError(f\"{wrap}, it raised {{type(e).__name__}}: {{e}}\") from e")
        else:
            self.step(op)
        for line in after:
            self.emit(line)

    def imports(self, code):
        e = self.emit
        std = ["from collections import OrderedDict"]
        if "tempfile." in code:
            std.append("import tempfile")
        if "timedelta(" in code:
            std.append("from datetime import timedelta")
        if "SimpleNamespace(" in code:
            std.append("from types import SimpleNamespace")
        for line in sorted(std, key=lambda l: l.split()[1]):
            e(line)
        e("")
        e("import torch")
        if self.fsdp:
            e("import torch.distributed as dist")
        e("import torch.nn as nn")
        if "bnb." in code:
            e("import bitsandbytes as bnb")
        e("from peft import LoraConfig, get_peft_model")
        peft_utils = [n for n in ("get_peft_model_state_dict", "set_peft_model_state_dict") if n + "(" in code]
        if peft_utils:
            e(f"from peft.utils import {', '.join(peft_utils)}")
        if "fsdp2_load_full_state_dict(" in code:
            e("from accelerate.utils.fsdp_utils import fsdp2_load_full_state_dict")
        if "checkpoint_wrapper(" in code:  # the private module accelerate's fsdp2_apply_ac imports it from
            e("from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper")
        if "_state_dict(" in code:
            names = [n for n in ("StateDictOptions", "get_model_state_dict", "get_optimizer_state_dict",
                                 "set_model_state_dict", "set_optimizer_state_dict") if n + "(" in code]
            if names:
                e(f"from torch.distributed.checkpoint.state_dict import {', '.join(names)}")
        if self.fsdp:
            e("from torch.distributed.device_mesh import init_device_mesh")
            e("from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard" if "MixedPrecisionPolicy(" in code
              else "from torch.distributed.fsdp import fully_shard")
        if "DTensor" in code:
            e("from torch.distributed.tensor import DTensor")

    def header(self, run_name):
        s, f = self.scen, self.f
        ops = "; ".join(o.text() for o in self.ops)
        launcher = f"torchrun --nproc_per_node={s.world}" if self.fsdp else "python"
        where = "FSDP2 + PEFT LoRA" if self.fsdp else "PEFT LoRA (no FSDP needed)"
        if f:
            doc = [f"{where}: {ops}", "",
                   f"Expected: {repro_asserts.expectation(f, self.ops[f.step - 1])}."]
        else:
            doc = [f"{where}: {ops}", "", "A sequence with no known bug: it runs every call and exits 0."]
        doc.append(f"Run: {launcher} {run_name}  (exit 1 at the assert while the bug is there, 0 once fixed)")
        if self.applied:
            doc.append(f"The lines marked `# fix` apply a candidate fix: {'; '.join(self.applied)}.")
        for old, new in self.renamed.items():
            doc.append(f"Layer `{old}` is `{new}` here: nn.Module reserves the name.")
        doc += self.accelerate_notes()
        doc.append(f"Written for {versions()}, CPU{', gloo' if self.fsdp else ''}; not run by the export.")
        self.emit('"""' + "\n".join(doc).replace('"""', "'''").replace("\\", "\\\\") + '\n"""')

    def accelerate_notes(self):
        """Where the script makes the calls accelerate makes under FSDP2 (accelerate 1.15 picks FSDP only for
        multi-device distributed types, state.py: not on one CPU), which ones, and the user's launch command."""
        if not self.fsdp:
            return []
        calls = []
        root = next((d for d in self.scen.shards if d.is_root), None)
        if root and root.raf in ("false", "none"):
            calls.append("the root's reshard_after_forward=False is what accelerate's fsdp2_prepare_model gives it "
                         "(it leaves the root's to torch, which resolves it to False)")
        if self.scen.loading == "ram_efficient":
            calls.append("meta weights on ranks > 0, fully_shard, then fsdp2_load_full_state_dict: accelerate's "
                         "cpu_ram_efficient_loading path")
        if any(op.kind in ("save_optimizer", "load_optimizer") for op in self.ops):
            calls.append("get_optimizer_state_dict is the call accelerate's save_fsdp_optimizer makes under FSDP2")
        if not calls:
            return []
        return ["", "accelerate: " + "; ".join(calls) + ". A training script doing the same under "
                "`accelerate launch --use_fsdp --fsdp_version 2 train.py` on GPUs takes this path "
                "(not run on GPU here)."]

    def script(self, run_name):
        missing = unwritten(self.sw, self.scen, self.ops)
        if missing:
            raise ValueError(f"export --python does not write the fix of {missing} yet")
        if not self.fsdp and any((op.kind in op_table.ROW and op_table.ROW[op.kind].needs_fsdp) or op.rank >= 0
                                 for op in self.ops):
            raise ValueError("--plain: the sequence calls FSDP or runs on one rank: it needs torchrun")
        body = Writer(self.scen, self.ops, self.sw, self.f, plain=not self.fsdp, prepares=self.prepares)
        body.body()  # first: the check decides what the build needs (w0, a collective timeout)
        code_ops = body.lines
        body.lines = []
        body.build()
        code = body.lines + code_ops
        if body.fsdp and not any("rank" in l for l in code if l != "rank = dist.get_rank()"):
            code.remove("rank = dist.get_rank()")
        if body.fsdp and any("full(" in l for l in code):
            code = ["def full(t):  # the whole tensor on every rank", "    return t.full_tensor() if isinstance(t, "
                    "DTensor) else t", "", ""] + code
        if any(l.experts for l in self.scen.layers):
            code = EXPERTS.splitlines() + ["", ""] + code
        if body.fsdp and self.scen.world > 1:
            # a rank whose peer tears down while it is still in a collective aborts (SIGABRT), seen on
            # torch 2.13 CPU after a fixed run: torchrun then reports a failure over the clean exit
            code.append("dist.barrier()  # every rank is done with its collectives before any tears down")
        if body.fsdp:
            code.append("dist.destroy_process_group()")
        self.applied = body.applied
        self.renamed = body.renamed
        self.header(run_name)
        self.imports("\n".join(code))
        self.emit("")
        self.lines += code
        return "\n".join(self.lines) + "\n"


EXPERTS = '''class Experts(nn.Module):  # a mixture-of-experts weight (E, in, out), as PEFT's ParamWrapper takes it
    def __init__(self, experts, fan_in, fan_out):
        super().__init__()
        self.weight, self.is_transposed = nn.Parameter(torch.randn(experts, fan_in, fan_out) / fan_in ** 0.5), True

    def forward(self, x):
        return torch.einsum("bi,eio->bo", x, self.weight) / self.weight.shape[0]
'''


def export(text, path="", switches=None, out="", plain=False):
    scen, ops = seqfile.parse(text)
    comments = [l[1:].strip() for l in text.splitlines() if l.startswith("#")]
    finding = repro_checks.parse(comments)
    if finding and finding.spec in ("S2", "S7") and (scen.dtype != "fp32" or scen.loading != "full"
                                                     or any(l.quant for l in scen.layers)):
        raise ValueError(f"export --python checks weight values in fp32 with full loading only, on no 4-bit layer")
    prepares = any(op.kind == "prepare" for op in ops)
    if finding:
        ops = ops[:finding.step]  # what follows the finding's step changes nothing it checks
    sw = profiles.resolve(scen.profile, scen.sets, switches)
    # a finding before `prepare` (a placement at load_adapter) is checked on the model as it is then
    return Writer(scen, ops, sw, finding, plain, prepares).script(os.path.basename(out) if out else "repro.py")


def main():
    import argparse
    import json
    ap = argparse.ArgumentParser(prog="python -m fsdpsim_upstream.export")
    ap.add_argument("path", nargs="?", default="-", help="the .seq file (canonical text), - for stdin")
    ap.add_argument("--switches", help="the effective profile as JSON (fsdpsim sends it)")
    ap.add_argument("--name", help="the file name error messages show")
    ap.add_argument("--out", help="write the script here (default: standard output)")
    ap.add_argument("--plain", action="store_true", help="plain python, no torch.distributed (no FSDP needed)")
    args = ap.parse_args()
    path = args.path
    text = open(path).read() if path != "-" else sys.stdin.read()
    try:
        script = export(text, args.name or (path if path != "-" else ""),
                        json.loads(args.switches) if args.switches else None, args.out or "", args.plain)
    except ValueError as e:
        print(f"{args.name or path or '<stdin>'}: {e}", file=sys.stderr)
        return 3
    if args.out:
        with open(args.out, "w") as out:
            out.write(script)
    else:
        sys.stdout.write(script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
