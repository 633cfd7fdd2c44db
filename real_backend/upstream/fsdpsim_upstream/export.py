"""`fsdpsim export FILE.seq --python`: the sequence as a short, self-contained
torchrun script on the real libraries, the same calls session.py makes, that
a maintainer can paste into an upstream issue. Run with
`torchrun --nproc_per_node=W script.py`; every rank prints one JSON line per
op it ran (step, rank, op, status, message, grads, groups, requires_grad)."""
import inspect
import sys

from . import profiles, seqfile, session

UNSUPPORTED = {"save_adapters", "load_adapters", "new_optimizer"}

OBSERVE = '''
def fsdp_params():
    for _, m in FSDP_MODULES:
        for group in m._get_fsdp_state()._fsdp_param_groups:
            yield from group.fsdp_params


def shard_of(name):
    # name: "lin0.lora_A.default" -> the shard FSDP keeps for it (or the plain parameter);
    # "lin1.modules_to_save.default.bias": the bias of that adapter's copy of lin1
    layer, kind, adapter = OWNERS[name]
    mod = getattr(getattr(model.base_model.model, layer), kind)[adapter]
    leaf = "bias" if kind == "modules_to_save" and name.endswith(".bias") else "weight"
    for fp in fsdp_params():
        if fp._module_info.module is mod and fp._module_info.param_name == leaf:
            return fp
    return None


def model_name(n):
    # a layer under checkpoint_wrapper has `_checkpoint_wrapped_module.` in its parameters' names
    n = n.replace("base_model.model.", "").replace("_checkpoint_wrapped_module.", "")
    return n.removesuffix(".weight") if ".lora_" in n else n


def adapter_params():
    out = []
    for n, p in model.named_parameters():
        name = model_name(n)
        if name in OWNERS:
            out.append(name)
    return out


def observe(step, op, status="ok", message="", training=False, marks=None):
    groups = []
    for gname, m in FSDP_MODULES:
        fps = [fp for g in m._get_fsdp_state()._fsdp_param_groups for fp in g.fsdp_params]
        u = any(fp._module_info.module._parameters[fp._module_info.param_name] is not fp.sharded_param for fp in fps)
        groups.append({"name": gname, "state": "UNSHARDED" if u else "SHARDED"})
    rg_s, rg_u, grads = [], [], set()
    for name in adapter_params():
        fp = shard_of(name)
        s = fp.sharded_param if fp is not None else {model_name(n): p for n, p in model.named_parameters()}[name]
        if s.requires_grad:
            rg_s.append(name)
        if fp is not None and hasattr(fp, "_unsharded_param") and fp._unsharded_param.requires_grad:
            rg_u.append(name)
        g = s.grad
        if training and g is not None and (marks or {}).get(name) != getattr(g, "_local_tensor", g)._version:
            grads.add(OWNERS[name][2])
    o = {"step": step, "rank": rank, "op": op, "status": status}
    if message:
        o["message"] = message
    if training:
        o["grads"] = sorted(grads)
    o.update({"groups": groups, "S.requires_grad": rg_s, "U.requires_grad": rg_u})
    os.write(1, (json.dumps(o) + "\\n").encode())  # one write: ranks share stdout


def grad_marks():
    marks = {}
    for name in adapter_params():
        fp = shard_of(name)
        s = fp.sharded_param if fp is not None else None
        if s is not None and s.grad is not None:
            marks[name] = s.grad._local_tensor._version
    return marks


def run(step, op, fn, training=False):
    marks = grad_marks()
    try:
        fn()
        observe(step, op, training=training, marks=marks)
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        status = ("no_grad_fn" if "does not require grad" in text else "key_error" if isinstance(e, KeyError)
                  else "value_error" if isinstance(e, ValueError)
                  else "exception" if type(e).__name__ == "CheckpointError"  # a RuntimeError, torch.utils.checkpoint's
                  else "shape_error" if isinstance(e, RuntimeError) else "exception")
        observe(step, op, status, f"{type(e).__name__}: {text}" if status in ("key_error", "exception") else text,
                training=training, marks=marks)
'''


def lora_config_text(a, layers, inference_mode=None):
    experts = {l.name for l in layers if l.experts}
    mods = [t for t in a.targets if t not in experts]
    params = [f"{t}.weight" for t in a.targets if t in experts]
    im = a.inference_mode if inference_mode is None else inference_mode
    out = f"LoraConfig(r={a.r}, lora_alpha={a.alpha}"
    if mods:
        out += f", target_modules={mods!r}"
    if params:
        out += f", target_parameters={params!r}"
    if a.init != "zero":
        out += ", init_lora_weights=False"
    if a.modules_to_save:
        out += f", modules_to_save={list(a.modules_to_save)!r}"
    if im:
        out += ", inference_mode=True"
    return out + ")"


class Writer:
    def __init__(self, scen, ops, sw):
        self.scen, self.ops, self.sw = scen, ops, sw
        self.lines = []

    def emit(self, text=""):
        self.lines.append(text)

    def reshard_all(self, ind):
        self.emit(f"{ind}for _, m in FSDP_MODULES:")
        self.emit(f"{ind}    m.reshard()")

    def unmerge_and_reshard_all(self, ind, why):
        self.emit(f"{ind}# {why}")
        self.emit(f"{ind}model.base_model.unmerge_adapter()")
        self.reshard_all(ind)

    def op_body(self, op, ind):
        k, e = op.kind, self.emit
        zero = [f"{ind}opt.zero_grad(set_to_none=True)", f"{ind}model.zero_grad(set_to_none=True)",
                f"{ind}for fp in fsdp_params():", f"{ind}    fp.sharded_param.grad = None"]
        if k in ("forward", "eval"):
            e(f"{ind}global loss")
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
            self.lines += zero
        elif k == "train_step":
            self.lines += zero
            e(f"{ind}model(x).float().sum().backward()")
            e(f"{ind}opt.step()")
        elif k == "merge":
            e(f"{ind}model.base_model.merge_adapter({list(op.names) if op.names else None!r})")
        elif k == "unmerge":
            e(f"{ind}model.base_model.unmerge_adapter()")
        elif k == "set_adapter" and op.list_form:
            e(f"{ind}model.base_model.set_adapter({list(op.names)!r})")
        elif k == "set_adapter":
            if self.sw["set_adapter_reshard"] == "unmerge_first":
                self.unmerge_and_reshard_all(ind, "the fix of peft#3895: unmerge, reshard every FSDP module, then set_adapter")
            e(f"{ind}model.set_adapter({op.names[0]!r})")
        elif k == "disable_enter":
            e(f"{ind}global ctx")
            e(f"{ind}ctx = model.disable_adapter()")
            e(f"{ind}ctx.__enter__()")
        elif k == "disable_exit":
            if self.sw["disable_exit_reshard"] == "on":
                self.unmerge_and_reshard_all(ind, "the fix of peft#3800: unmerge and reshard before the exit re-enables adapters")
            e(f"{ind}ctx.__exit__(None, None, None)")
        elif k == "add_adapter":
            a = self.scen.adapter(op.names[0])
            e(f"{ind}model.add_adapter({a.name!r}, {lora_config_text(a, self.scen.layers)})")
        elif k == "load_adapter":
            a = self.scen.adapter(op.names[0])
            e(f"{ind}src = get_peft_model(Net(LAYERS), {lora_config_text(a, self.scen.layers)}, adapter_name={a.name!r})")
            e(f"{ind}src.save_pretrained(f'/tmp/fsdpsim-export-{{rank}}', selected_adapters=[{a.name!r}])")
            sub = "" if a.name == "default" else "/" + a.name
            e(f"{ind}model.load_adapter(f'/tmp/fsdpsim-export-{{rank}}{sub}', adapter_name={a.name!r}, "
              f"is_trainable={op.trainable})")
        elif k == "delete_adapter":
            e(f"{ind}model.delete_adapter({op.names[0]!r})")
        elif k == "gradient_sync":
            e(f"{ind}model.set_requires_gradient_sync({op.names[0] == 'on'})")
        elif k in ("reshard", "unshard"):
            call = "reshard()" if k == "reshard" else "unshard()"
            if op.names:
                e(f"{ind}dict(FSDP_MODULES)[{op.names[0]!r}].{call}")
            else:
                e(f"{ind}for _, m in FSDP_MODULES:")
                e(f"{ind}    m.{call}")
        elif k == "state_dict":
            e(f"{ind}model.state_dict()")
        elif k == "save_optimizer":
            e(f"{ind}global ckpt")
            if self.sw["optimizer_ckpt_reshard"] == "on":
                self.reshard_all(ind)
            e(f"{ind}ckpt = get_optimizer_state_dict(model, opt)")
        elif k == "load_optimizer":
            if self.sw["optimizer_ckpt_reshard"] == "on":
                self.reshard_all(ind)
            e(f"{ind}set_optimizer_state_dict(model, opt, ckpt)")
        elif k == "delta_weight":
            e(f"{ind}m = model.base_model.model.{op.names[0]}")
            e(f"{ind}for a in model.base_model.active_adapters:")
            e(f"{ind}    if a in getattr(m, 'lora_A', {{}}):  # a layer without LoRA has no delta")
            e(f"{ind}        m.get_delta_weight(a)")
        elif k == "prepare":
            self.prepare(ind)
        else:
            raise ValueError(k)

    def prepare(self, ind):
        raf = {"true": "True", "false": "False", "none": "None"}
        if ind:
            self.emit(f"{ind}global opt, FSDP_MODULES")
        for name in self.scen.checkpoint:
            # accelerate/utils/fsdp_utils.py::fsdp2_apply_ac: each layer wrapped where it sits, before fully_shard
            self.emit(f"{ind}model.set_submodule('base_model.model.{name}', "
                      f"checkpoint_wrapper(model.base_model.model.{name}, preserve_rng_state=False))")
        for d in self.scen.shards:
            if d.is_root:
                self.emit(f"{ind}fully_shard(model, mesh=mesh, reshard_after_forward={raf[d.raf]})")
            else:
                mods = [f"model.base_model.model.{m}" for m in d.modules]
                arg = mods[0] if len(mods) == 1 else "[" + ", ".join(mods) + "]"
                self.emit(f"{ind}fully_shard({arg}, mesh=mesh, reshard_after_forward={raf[d.raf]})")
        order = {l.name: i for i, l in enumerate(self.scen.layers)}  # root first, then module order
        shards = sorted(self.scen.shards, key=lambda d: -1 if d.is_root else order[d.modules[0]])
        mods = ", ".join(f"({d.modules[0] if not d.is_root else 'root'!r}, "
                         f"{'model' if d.is_root else 'model.base_model.model.' + d.modules[0]})"
                         for d in shards)
        self.emit(f"{ind}FSDP_MODULES = [{mods}]")
        sel = "p.requires_grad" if self.scen.optimizer == "trainable" else "'.lora_' in n or '.modules_to_save.' in n"
        self.emit(f"{ind}opt = torch.optim.AdamW([p for n, p in model.named_parameters() if {sel}], lr=1e-2)")

    def script(self, path):
        s, e = self.scen, self.emit
        e("# fsdpsim export" + (f" of {path}" if path else "") +
          f": {len(self.ops)} ops at world {s.world}, profile {s.profile}")
        e(f"# Run: torchrun --nproc_per_node={s.world} THIS_FILE.py")
        e("# Each rank prints one JSON line per op: status, grads, FSDP groups, requires_grad on S and U.")
        e("import json")
        e("import os")
        e("import warnings")
        e("")
        e("import torch")
        e("import torch.distributed as dist")
        e("import torch.nn as nn")
        e("from peft import LoraConfig, get_peft_model")
        if s.checkpoint:
            e("from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper")
        e("from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict")
        e("from torch.distributed.device_mesh import init_device_mesh")
        e("from torch.distributed.fsdp import fully_shard")
        e("")
        e('warnings.filterwarnings("ignore")')
        e("")
        if any(l.experts for l in s.layers):
            e(inspect.getsource(session.Experts))
        e(inspect.getsource(session.Net))
        layers = ", ".join(f"({l.name!r}, {l.fan_in}, {l.fan_out}, {l.experts})" for l in s.layers)
        e("class L:  # one scenario layer")
        e("    def __init__(self, name, fan_in, fan_out, experts):")
        e("        self.name, self.fan_in, self.fan_out, self.experts = name, fan_in, fan_out, experts")
        e("")
        e("")
        e(f"LAYERS = [L(*t) for t in [{layers}]]")
        e("# adapter parameter -> (layer, lora_A|lora_B|modules_to_save, adapter), from the declarations")
        e(f"OWNERS = {s.param_owners()!r}")
        e('dist.init_process_group("gloo")')
        e("rank, world = dist.get_rank(), dist.get_world_size()")
        e('mesh = init_device_mesh("cpu", (world,))')
        e(f"torch.manual_seed({s.seed})")
        live = [a for a in s.adapters if not a.deferred]
        e(f"model = get_peft_model(Net(LAYERS), {lora_config_text(live[0], s.layers)}, adapter_name={live[0].name!r})")
        for a in live[1:]:
            e(f"model.add_adapter({a.name!r}, {lora_config_text(a, s.layers)})")
        shift = " + 1000003 * rank" if s.data == "per_rank" else ""  # data per_rank: each rank its own batch
        e(f"x = torch.randn({session.BATCH}, {s.layers[0].fan_in}, generator=torch.Generator().manual_seed({s.seed + 1}{shift}))")
        e("opt, ckpt, ctx, loss, FSDP_MODULES = None, None, None, None, []")
        if not any(op.kind == "prepare" for op in self.ops):
            self.prepare("")
        self.lines += OBSERVE.splitlines()
        e("")
        for i, op in enumerate(self.ops):
            if op.kind in UNSUPPORTED:
                raise ValueError(f"export --python does not support `{op.kind}` yet")
            e("")
            e(f"def step{i + 1}():  # {op.text()}")
            self.op_body(op, "    ")
        e("")
        e("")
        for i, op in enumerate(self.ops):
            guard = f"if rank == {op.rank}:\n    " if op.rank >= 0 else ""
            e(f"{guard}run({i + 1}, {op.text()!r}, step{i + 1}, training={op.is_training})")
        e("dist.destroy_process_group()")
        return "\n".join(self.lines) + "\n"


def export(text, path="", switches=None):
    scen, ops = seqfile.parse(text)
    if scen.loading != "full" or scen.dtype != "fp32":
        raise ValueError("export --python supports full loading in fp32 only (ram-efficient loading: not yet)")
    sw = profiles.resolve(scen.profile, scen.sets, switches)
    return Writer(scen, ops, sw).script(path)


def main():
    import argparse
    import json
    ap = argparse.ArgumentParser(prog="python -m fsdpsim_upstream.export")
    ap.add_argument("path", nargs="?", default="-", help="the .seq file (canonical text), - for stdin")
    ap.add_argument("--switches", help="the effective profile as JSON (fsdpsim sends it)")
    ap.add_argument("--name", help="the file name the script's header shows")
    args = ap.parse_args()
    path = args.path
    text = open(path).read() if path != "-" else sys.stdin.read()
    try:
        sys.stdout.write(export(text, args.name or (path if path != "-" else ""),
                                json.loads(args.switches) if args.switches else None))
    except ValueError as e:
        print(f"{path or '<stdin>'}: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
