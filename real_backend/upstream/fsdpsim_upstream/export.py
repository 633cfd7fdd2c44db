"""`fsdpsim export FILE.seq --python`: a finding as a short, self-contained torchrun
script on the real libraries that a maintainer can paste into an upstream issue.
The script builds the scenario with public APIs, runs the (triaged, minimal)
sequence, checks the finding's spec at the finding's step, prints `expected:`
and `got:` and exits 1 when the bug reproduces, 0 when it does not and 2 when it
fails differently. A file without a finding is a script that runs its ops and
exits 0 (2 when one raises what the recorded run did not)."""
import platform
import sys
from importlib import metadata

from . import profiles, repro_checks, seqfile, session

# ops a script cannot run with public APIs alone (yet): fsdpsim exits 3 naming them
UNSUPPORTED = {"load_adapters"}
# switch values whose fix the script does not write yet
UNWRITTEN = {("enable_inference_mode", "respect"), ("adapter_meta_check", "per_adapter"),
             ("delta_weight_gather", "on"), ("adapter_save_selection", "active")}
RAF = {"true": "True", "false": "False", "none": "None"}


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


def versions():
    """The versions this export ran against (the .venv fsdpsim's upstream backend uses)."""
    def v(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"
    return (f"torch {v('torch')}, peft {v('peft')}, accelerate {v('accelerate')}, "
            f"transformers {v('transformers')}, Python {platform.python_version()}")


HELPERS = '''
def short(name):
    """fsdpsim's name of a parameter: lin0.lora_A.default for base_model.model.lin0.lora_A.default.weight."""
    name = name.replace("base_model.model.", "").replace("_checkpoint_wrapped_module.", "")
    return name.removesuffix(".weight") if ".lora_" in name else name


def registered(model):
    """What the modules hold now: the unsharded copies while a group is unsharded, else the shards."""
    return {short(n): p for n, p in model.named_parameters()}


def adapter_params(model, shards):
    """Each adapter parameter still in the model, as the object its gradient lands on:
    the shard FSDP registered at fully_shard, or the plain parameter of a layer FSDP does not manage."""
    return [(n, shards.get(n, p)) for n, p in registered(model).items() if n in ADAPTER_OF]


def local(t):
    return t.to_local() if isinstance(t, DTensor) else t


def full(t):
    """The whole tensor on every rank (a collective when t is a DTensor)."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def status_of(e):
    """The class fsdpsim records for an exception, and its first line."""
    text = (str(e).strip().splitlines() or [""])[0]
    if isinstance(e, KeyError):
        return "key_error", text
    if isinstance(e, RuntimeError) and "does not require grad and does not have a grad_fn" in text:
        return "no_grad_fn", text
    if isinstance(e, RuntimeError) and any(k in text for k in ("shape", "size mismatch", "must match the size",
                                                               "einsum", "size of tensor")):
        return "shape_error", text
    if isinstance(e, (ValueError, AssertionError)):
        return ("value_error" if isinstance(e, ValueError) else "assertion_error"), text
    return "exception", f"{type(e).__name__}: {text}"


def expect_status(e, status):
    """An op the recorded run saw raise: the same class again, or the script fails differently."""
    if status_of(e)[0] != status:
        raise e
'''


def used_helpers(code):
    """The HELPERS functions the script calls (and those they call), in their order."""
    chunks = ["def " + c for c in HELPERS.split("\ndef ")[1:]]
    names = [c[4:c.index("(")] for c in chunks]
    keep, text = set(), code
    while True:
        more = {n for n in names if n not in keep and f"{n}(" in text}
        if not more:
            break
        keep |= more
        text = "\n".join(c for c, n in zip(chunks, names) if n in more)
    return "\n\n\n".join(c.strip("\n") for c, n in zip(chunks, names) if n in keep).splitlines()


class Writer:
    def __init__(self, scen, ops, sw, finding):
        self.scen, self.ops, self.sw, self.f = scen, ops, sw, finding
        self.lines = []
        self.uses = {op.kind for op in ops}

    def emit(self, text=""):
        self.lines.append(text)

    def fix(self, ind, text):
        self.emit(f"{ind}# fix ({text})")

    def reshard_all(self, ind):
        self.emit(f"{ind}for m in groups(model).values():")
        self.emit(f"{ind}    m.reshard()")

    def unmerge_and_reshard_all(self, ind, why):
        self.fix(ind, why)
        self.emit(f"{ind}model.base_model.unmerge_adapter()")
        self.reshard_all(ind)

    def op_body(self, op, ind):
        k, e, sw = op.kind, self.emit, self.sw
        if k in ("forward", "eval"):
            if k == "eval":
                e(f"{ind}with torch.no_grad():")
                e(f"{ind}    loss = model(x).float().sum()")
            else:
                e(f"{ind}loss = model(x).float().sum()")
        elif k == "backward":
            e(f"{ind}loss.backward()")
        elif k == "step":
            e(f"{ind}opt.step()")
        elif k == "zero_grad":
            e(f"{ind}zero_grad(model, opt, shards)")
        elif k == "train_step":
            e(f"{ind}train_step(model, opt, shards, x)")
        elif k == "merge":
            e(f"{ind}model.base_model.merge_adapter({list(op.names) if op.names else None!r})")
        elif k == "unmerge":
            e(f"{ind}model.base_model.unmerge_adapter()")
        elif k == "set_adapter" and op.list_form:
            e(f"{ind}model.base_model.set_adapter({list(op.names)!r})")
        elif k == "set_adapter":
            if sw["set_adapter_reshard"] == "unmerge_first":
                self.unmerge_and_reshard_all(ind, "peft#3895: unmerge, reshard every FSDP module, then set_adapter")
            elif sw["set_adapter_reshard"] == "skip_merged":
                self.fix(ind, "PEFT main per peft#3872: reshard each FSDP module holding no merged layer")
                e(f"{ind}for name, m in groups(model).items():")
                e(f"{ind}    if not any(getattr(model.base_model.model, l).merged for l in LAYERS_OF[name]):")
                e(f"{ind}        m.reshard()")
            e(f"{ind}model.set_adapter({op.names[0]!r})")
        elif k == "disable_enter":
            e(f"{ind}ctx = model.disable_adapter()")
            e(f"{ind}ctx.__enter__()")
        elif k == "disable_exit":
            if sw["disable_exit_reshard"] == "on":
                self.unmerge_and_reshard_all(ind, "peft#3800: unmerge and reshard before the exit re-enables adapters")
            e(f"{ind}ctx.__exit__(None, None, None)")
        elif k == "add_adapter":
            a = self.scen.adapter(op.names[0])
            e(f"{ind}model.add_adapter({a.name!r}, {lora_config_text(a, self.scen.layers)})")
        elif k == "load_adapter":
            self.load_adapter(op, ind)
        elif k == "delete_adapter":
            e(f"{ind}model.delete_adapter({op.names[0]!r})")
        elif k == "gradient_sync":
            e(f"{ind}model.set_requires_gradient_sync({op.names[0] == 'on'})")
        elif k in ("reshard", "unshard"):
            target = f"[groups(model)[{op.names[0]!r}]]" if op.names else "groups(model).values()"
            e(f"{ind}for m in {target}:")
            e(f"{ind}    m.{k}()")
        elif k == "state_dict":
            e(f"{ind}model.state_dict()")
        elif k in ("save_optimizer", "load_optimizer"):
            if sw["optimizer_ckpt_reshard"] == "on":
                self.fix(ind, "accelerate: reshard every FSDP module before the optimizer checkpoint")
                self.reshard_all(ind)
            e(f"{ind}ckpt = get_optimizer_state_dict(model, opt)" if k == "save_optimizer"
              else f"{ind}set_optimizer_state_dict(model, opt, ckpt)")
        elif k == "save_adapters":
            names = list(op.names) if op.names else None
            e(f"{ind}saved = {{a: get_peft_model_state_dict(model, adapter_name=a) for a in {names or 'model.peft_config'}}}")
            if sw["adapter_save_gather"] == "on":
                self.fix(ind, "gather every DTensor the adapters' state dict holds before it is written")
                e(f"{ind}saved = {{a: {{k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in sd.items()}}"
                  f" for a, sd in saved.items()}}")
        elif k == "delta_weight":
            e(f"{ind}layer = model.base_model.model.{op.names[0]}")
            e(f"{ind}deltas = {{a: layer.get_delta_weight(a) for a in model.base_model.active_adapters "
              f"if a in getattr(layer, 'lora_A', {{}})}}")
        elif k == "prepare":
            e(f"{ind}shards, opt = shard(model, mesh)")
        elif k == "new_optimizer":
            e(f"{ind}opt = make_optimizer(model, shards)")
        else:
            raise ValueError(f"export --python does not support `{k}` yet")

    def load_adapter(self, op, ind):
        a = self.scen.adapter(op.names[0])
        sub = "" if a.name == "default" else "/" + a.name
        self.emit(f"{ind}torch.manual_seed({self.scen.seed + 7 + self.scen.adapters.index(a)})")
        self.emit(f"{ind}src = get_peft_model(Net(), {lora_config_text(a, self.scen.layers)}, adapter_name={a.name!r})")
        self.emit(f"{ind}src.save_pretrained(f'{{tmp}}/src{{rank}}', selected_adapters=[{a.name!r}])")
        self.emit(f"{ind}model.load_adapter(f'{{tmp}}/src{{rank}}{sub}', adapter_name={a.name!r}, "
                  f"is_trainable={op.trainable})")

    def net(self):
        s, e = self.scen, self.emit
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

    def shard_fn(self):
        s, e = self.scen, self.emit
        e("")
        e("def shard(model, mesh):")
        e('    """fully_shard bottom-up; the shards it registers (the objects gradients land on) and the optimizer."""')
        for name in s.checkpoint:
            e(f"    model.set_submodule('base_model.model.{name}', "
              f"checkpoint_wrapper(model.base_model.model.{name}, preserve_rng_state=False))")
        for d in s.shards:
            raf = RAF[d.raf]
            if d.is_root:
                raf = "False" if self.sw["root_reshard_rule"] == "force_false" else raf
                e(f"    fully_shard(model, mesh=mesh, reshard_after_forward={raf})")
            else:
                mods = [f"model.base_model.model.{m}" for m in d.modules]
                arg = mods[0] if len(mods) == 1 else "[" + ", ".join(mods) + "]"
                e(f"    fully_shard({arg}, mesh=mesh, reshard_after_forward={raf})")
        e("    shards = registered(model)")
        e("    return shards, make_optimizer(model, shards)")
        e("")
        e("")
        e("def make_optimizer(model, shards):")
        sel = "p.requires_grad" if s.optimizer == "trainable" else "True"
        e("    params = [p for n, p in adapter_params(model, shards) if " + sel + "]")
        e("    return torch.optim.AdamW(params, lr=1e-2) if params else None")
        e("")
        e("")
        e("def groups(model):")
        e('    """The FSDP modules by fsdpsim\'s group name."""')
        groups = ", ".join(f"{'root' if d.is_root else d.modules[0]!r}: "
                           f"{'model' if d.is_root else 'model.base_model.model.' + d.modules[0]}" for d in s.shards)
        e(f"    return {{{groups}}}")
        if self.uses & {"zero_grad", "train_step"}:
            e("")
            e("")
            e("def zero_grad(model, opt, shards):")
            e("    if opt is not None:")
            e("        opt.zero_grad(set_to_none=True)")
            e("    model.zero_grad(set_to_none=True)")
            e("    for p in shards.values():")
            e("        p.grad = None")
        if "train_step" in self.uses:
            e("")
            e("")
            e("def train_step(model, opt, shards, x):")
            e("    zero_grad(model, opt, shards)")
            e("    model(x).float().sum().backward()")
            e("    if opt is not None:")
            e("        opt.step()")

    def imports(self, code):
        e = self.emit
        e("import sys")
        if "tempfile." in code:
            e("import tempfile")
        if "timedelta(" in code:
            e("from datetime import timedelta")
        e("from importlib.metadata import version")
        e("")
        e("import torch")
        e("import torch.distributed as dist")
        e("import torch.nn as nn")
        e("from peft import LoraConfig, get_peft_model")
        if "get_peft_model_state_dict" in code:
            e("from peft.utils import get_peft_model_state_dict")
        if self.scen.checkpoint:
            e("from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper")
        if "optimizer_state_dict" in code:
            names = [n for n in ("get_optimizer_state_dict", "set_optimizer_state_dict") if n in code]
            e(f"from torch.distributed.checkpoint.state_dict import {', '.join(names)}")
        e("from torch.distributed.device_mesh import init_device_mesh")
        e("from torch.distributed.fsdp import fully_shard")
        if "DTensor" in code:
            e("from torch.distributed.tensor import DTensor")

    def header(self, path, expected, versions_text):
        s, f, n = self.scen, self.f, len(self.ops)
        doc = []
        if f:
            doc += [f"{f.spec} under FSDP2 + PEFT LoRA at step {f.step} ({self.ops[f.step - 1].text()}): "
                    f"{f.detail.split(';')[0]}", "",
                    f"fsdpsim finding: {f.spec} step {f.step}{'' if f.rank < 0 else f' rank {f.rank}'}: {f.detail}",
                    f"Class signature: {f.signature}"]
            for key in ("root-cause", "verdict", "blame"):
                if self.klass.get(key):
                    doc.append(f"{key.capitalize().replace('-', ' ')}: {self.klass[key]}")
            doc += [f"Expected: {expected}"]
        else:
            doc += ["FSDP2 + PEFT LoRA sequence with no recorded finding (fsdpsim's model runs it clean)."]
        fixes = [f"{k}={v}" for k, v in self.sw.items() if profiles.NATIVE[k] != v]
        doc += ["", f"Sequence: {n} ops at world {s.world} (CPU, gloo): " + "; ".join(op.text() for op in self.ops)]
        if fixes:
            doc.append(f"Fix applied in this script (fsdpsim switch {', '.join(fixes)}): the lines marked `# fix`.")
        doc += [f"Confirmed on: {versions_text}; CPU, gloo, world {s.world}.",
                f"Run: torchrun --nproc_per_node={s.world} repro.py",
                "Exit: 1 the bug reproduces, 0 it does not (fixed), 2 it fails differently (an unexpected",
                "exception, or the check violated another way); every rank exits with the same code, and",
                "torchrun reports a rank's non-zero code as its own exit 1 (the code is in its summary).",
                f"Exported by fsdpsim export --python from {path or '<stdin>'}."]
        self.emit('"""' + "\n".join(doc).replace('"""', "'''").replace("\\", "\\\\") + '\n"""')

    def main_fn(self):
        s, e, f = self.scen, self.emit, self.f
        k = f.step if f else len(self.ops)
        e("")
        e("")
        e("def main():")
        timeout = ", timeout=timedelta(seconds=10)" if f and f.spec == "S5" and f.status in ("hang", "mismatch") else ""
        e(f'    dist.init_process_group("gloo"{timeout})')
        e("    rank = dist.get_rank()")
        e("    if rank == 0:")
        e('        print(", ".join(f"{p} {version(p)}" for p in ("torch", "peft", "accelerate", "transformers")) +')
        e('              f", Python {sys.version.split()[0]}", flush=True)')
        e('    mesh = init_device_mesh("cpu", (dist.get_world_size(),))')
        if any(op.kind == "load_adapter" for op in self.ops):
            e("    tmp = tempfile.mkdtemp()")
        e(f"    torch.manual_seed({s.seed})")
        if f and f.spec == "S2":
            e("    net = Net()")
            e("    W0 = {name: m.weight.detach().clone() for name, m in net.named_children()}  # noqa: N806")
        live = [a for a in s.adapters if not a.deferred]
        e(f"    model = get_peft_model({'net' if f and f.spec == 'S2' else 'Net()'}, "
          f"{lora_config_text(live[0], s.layers)}, adapter_name={live[0].name!r})")
        for a in live[1:]:
            e(f"    model.add_adapter({a.name!r}, {lora_config_text(a, s.layers)})")
        shift = " + 1000003 * rank" if s.data == "per_rank" else ""  # data per_rank: each rank its own batch
        e(f"    x = torch.randn({session.BATCH}, {s.layers[0].fan_in}, "
          f"generator=torch.Generator().manual_seed({s.seed + 1}{shift}))")
        if not any(op.kind == "prepare" for op in self.ops):
            e("    shards, opt = shard(model, mesh)")
        else:
            e("    shards, opt = {}, None")
        e("    at = None")
        e("    try:")
        for i, op in enumerate(self.ops[:k - 1]):
            self.step(i + 1, op, "        ")
        if f:
            op = self.ops[k - 1]
            e(f"        at = None  # step {k}, where the finding shows: checked below")
            e(f"        runs = rank == {op.rank}" if op.rank >= 0 else "        runs = True")
            e("        snap = before(model, shards) if runs else None")
            e('        status, message = "ok", ""')
            if f.spec in ("S6", "S7"):
                e("        saved = deltas = None")
            e("        try:")
            e("            if runs:")
            self.op_body(op, "                ")
            e("        except Exception as e:")
            e("            status, message = status_of(e)")
            result = {"S2": "W0", "S6": "saved", "S7": "deltas"}.get(f.spec, "None")
            if f.spec == "S5":
                e(f"        code, got = check(model, shards, snap, status, message, {result})")
            else:
                e(f"        code, got = check(model, shards, snap, status, message, {result}) if runs else "
                  f"(FIXED, \"(not run on this rank)\")")
        else:
            e("        code, got = FIXED, \"every op ran as recorded\"")
        e("    except Exception as e:")
        e('        code, got = DIFFERENT, f"{at} raised {type(e).__name__}: {e}"')
        e("    finish(code, got)")

    def step(self, i, op, ind):
        e = self.emit
        e(f"{ind}at = {f'step {i} ({op.text()})'!r}")
        if op.rank >= 0:
            e(f"{ind}if rank == {op.rank}:")
            ind += "    "
        if op.error:
            e(f"{ind}try:  # the recorded run saw this op raise {op.error} too")
            self.op_body(op, ind + "    ")
            e(f"{ind}except Exception as e:")
            e(f"{ind}    expect_status(e, {op.error!r})")
        else:
            self.op_body(op, ind)

    def finish_fn(self, expected):
        e, f = self.emit, self.f
        stuck = f and f.spec == "S5" and f.status in ("hang", "mismatch")
        reporter = 0 if not f or f.rank < 0 else f.rank
        e("")
        e("")
        e("def finish(code, got):")
        if stuck:
            e('    """After a timed-out collective the ranks cannot agree on a code: each reports its own."""')
            e('    r = dist.get_rank()')
            e('    print(f"rank {r} expected: {EXPECTED}\\nrank {r} got: {got}\\nrank {r} result: {RESULT[code]} (exit {code})", flush=True)')
            e("    sys.exit(code)")
            return
        e('    """Every rank exits with the same code: 2 if any rank failed differently, else the finding rank\'s."""')
        e("    results = [None] * dist.get_world_size()")
        e("    dist.all_gather_object(results, (code, got))")
        e("    codes = [c for c, _ in results]")
        pick = "max(codes)" if f is not None and f.rank < 0 else f"results[{reporter}][0]"
        e(f"    code = DIFFERENT if DIFFERENT in codes else {pick}")
        e(f"    if dist.get_rank() == 0:")
        e(f"        shown = next((g for c, g in results if c == code), results[{reporter}][1])")
        e('        print(f"expected: {EXPECTED}", flush=True)')
        e('        print(f"got: {shown}", flush=True)')
        e('        print(f"result: {RESULT[code]} (exit {code})", flush=True)')
        e("    dist.destroy_process_group()")
        e("    sys.exit(code)")

    def script(self, path, versions_text, klass=None):
        self.klass = klass or {}
        s, f = self.scen, self.f
        for op in self.ops:
            if op.kind in UNSUPPORTED:
                raise ValueError(f"export --python does not support `{op.kind}` yet")
        for k, v in self.sw.items():
            if (k, v) in UNWRITTEN:
                raise ValueError(f"export --python does not write the fix of {k}={v} yet")
        if f:
            op = self.ops[f.step - 1]
            if op.rank >= 0 and f.spec in ("S2", "S7"):
                raise ValueError(f"export --python cannot check {f.spec} after a rank-divergent op yet")
            check, consts, expected = repro_checks.plan(f, s, op)
        else:
            check, consts, expected = "", {}, "every op runs as the recorded (clean) run ran it"
        body = Writer(s, self.ops, self.sw, f)
        body.net()
        body.shard_fn()
        body.main_fn()
        body.finish_fn(expected)
        code = check + "\n".join(body.lines)
        self.header(path, expected, versions_text)
        self.imports(code + HELPERS)
        self.emit("")
        self.emit("REPRODUCED, FIXED, DIFFERENT = 1, 0, 2")
        self.emit('RESULT = {1: "the bug reproduces", 0: "it does not reproduce", 2: "it fails differently"}')
        self.emit(f"EXPECTED = {expected!r}")
        self.emit("# each adapter parameter (fsdpsim's name) -> its adapter, from the scenario's declarations")
        self.emit(f"ADAPTER_OF = {dict((n, o[2]) for n, o in s.param_owners().items())!r}")
        if "LAYERS_OF" in code:
            self.emit(f"LAYERS_OF = {repro_checks.layers_of(s)!r}")
        for name, value in consts.items():
            self.emit(f"{name} = {value!r}")
        self.emit("")
        self.emit("")
        cut = body.lines.index("def shard(model, mesh):")
        parts = ["\n".join(body.lines[:cut]), "\n".join(used_helpers(code)), check, "\n".join(body.lines[cut:])]
        self.lines += "\n\n\n".join(p.strip("\n") for p in parts if p.strip()).splitlines()
        self.emit("")
        self.emit("")
        self.emit('if __name__ == "__main__":')
        self.emit("    main()")
        return "\n".join(self.lines) + "\n"


def export(text, path="", switches=None):
    scen, ops = seqfile.parse(text)
    if scen.loading != "full" or scen.dtype != "fp32":
        raise ValueError("export --python supports full loading in fp32 only (ram-efficient loading: not yet)")
    comments = [l[1:].strip() for l in text.splitlines() if l.startswith("#")]
    finding = repro_checks.parse(comments)
    # triage's comments: the root cause, its verdict and the blamed transitions (sim/triage.cpp)
    klass = {k: c.split(": ", 1)[1] for c in comments for k in ("root-cause", "verdict", "blame") if c.startswith(k + ": ")}
    if finding:
        ops = ops[:finding.step]  # what follows the finding's step changes nothing it checks
    sw = profiles.resolve(scen.profile, scen.sets, switches)
    return Writer(scen, ops, sw, finding).script(path, versions(), klass)


def main():
    import argparse
    import json
    ap = argparse.ArgumentParser(prog="python -m fsdpsim_upstream.export")
    ap.add_argument("path", nargs="?", default="-", help="the .seq file (canonical text), - for stdin")
    ap.add_argument("--switches", help="the effective profile as JSON (fsdpsim sends it)")
    ap.add_argument("--name", help="the file name the script's header shows")
    ap.add_argument("--out", help="write the script here (default: standard output)")
    args = ap.parse_args()
    path = args.path
    text = open(path).read() if path != "-" else sys.stdin.read()
    try:
        script = export(text, args.name or (path if path != "-" else ""),
                        json.loads(args.switches) if args.switches else None)
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
