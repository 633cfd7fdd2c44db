"""The tracer `fsdpsim record` injects (sitecustomize.py): when torch, torch.distributed.fsdp,
peft or accelerate finish importing, it wraps the public entry points a training script calls
and appends one JSON line per call to <dir>/rank-<RANK>.jsonl, with the caller's file:line in
the script. It never changes an argument, a result or an exception: each wrapper calls the
original and only writes down what it saw. Calls made from inside another traced call (PEFT's
own set_adapter under PeftModel.set_adapter, a forward under generate) are not recorded, so
every event is one call the script made."""

import functools
import importlib.abc
import json
import os
import sys
import sysconfig

_S = {"dir": None, "file": None, "depth": 0, "peft": None, "n": 0}
_LIB_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
)
_SELF_DIR = os.path.dirname(os.path.realpath(__file__)) + os.sep


def _caller():
    """file:line of the innermost frame in the user's code (outside the libraries and us)."""
    f = sys._getframe(1)
    while f is not None:
        path = os.path.realpath(f.f_code.co_filename)
        if not path.startswith(_LIB_DIRS + (_SELF_DIR,)) and not f.f_code.co_filename.startswith("<"):
            rel = os.path.relpath(path)
            return f"{rel if not rel.startswith('..') else os.path.basename(path)}:{f.f_lineno}"
        f = f.f_back
    return "?:0"


def _emit(op, at, raised=None, **args):
    if _S["file"] is None:
        rank = os.environ.get("RANK", "0")
        _S["file"] = open(os.path.join(_S["dir"], f"rank-{rank}.jsonl"), "a", buffering=1)
        _S["file"].write(json.dumps({"op": "process", "world": int(os.environ.get("WORLD_SIZE", "1"))}) + "\n")
    ev = {"op": op, "at": at, "args": args}
    if raised is not None:
        ev["raised"] = f"{type(raised).__name__}: {(str(raised).splitlines() or [''])[0][:300]}"
    _S["file"].write(json.dumps(ev, sort_keys=True) + "\n")


def _wrap(owner, name, describe, mine=lambda a: True, always=False):
    """owner.name calls describe(args, kwargs, result) -> (op, dict) after the original ran
    (or raised); nested calls are passed through unrecorded unless `always` (structure)."""
    orig = getattr(owner, name)

    @functools.wraps(orig)
    def wrapper(*a, **k):
        if (_S["depth"] and not always) or not mine(a):
            return orig(*a, **k)
        at = _caller()
        _S["depth"] += 1
        try:
            res = orig(*a, **k)
        except BaseException as e:
            _S["depth"] -= 1
            _record(describe, a, k, None, at, e)
            raise
        _S["depth"] -= 1
        _record(describe, a, k, res, at, None)
        return res

    setattr(owner, name, wrapper)
    return orig


def _record(describe, a, k, res, at, raised):
    """The event of one call; a failure of the tracer itself is written down, never raised
    into the script."""
    try:
        op, args = describe(a, k, res)
        if op:
            _emit(op, at, raised, **args)
    except Exception as e:  # noqa: BLE001 - the script must run as without the tracer
        try:
            _emit("tracer_error", at, None, what=f"{type(e).__name__}: {e}"[:300])
        except Exception:  # noqa: BLE001
            pass


def _dtype(d):
    return None if d is None else str(d).replace("torch.", "")


def _path_of(module):
    """The module's name under the PEFT model's base network, `root` for the PEFT model."""
    peft = _S["peft"]
    if peft is None:
        return f"<{type(module).__name__} before get_peft_model>"
    if module is peft:
        return "root"
    for n, m in peft.named_modules():
        if m is module:
            return n[len("base_model.model."):] if n.startswith("base_model.model.") else n
    return f"<{type(module).__name__} outside the PEFT model>"


def _targets(adapter):
    peft = _S["peft"]
    out = []
    for n, m in peft.named_modules() if peft is not None else ():
        for attr in ("lora_A", "modules_to_save"):
            d = getattr(m, attr, None)
            if hasattr(d, "keys") and adapter in d.keys():
                out.append((attr, n[len("base_model.model."):] if n.startswith("base_model.model.") else n))
    return [n for a, n in out if a == "lora_A"], [n for a, n in out if a == "modules_to_save"]


def _config(cfg):
    keys = ("r", "lora_alpha", "init_lora_weights", "use_dora", "modules_to_save", "inference_mode",
            "lora_dropout", "use_rslora", "bias", "target_parameters", "peft_type", "target_modules")
    out = {}
    for k in keys:
        v = getattr(cfg, k, None)
        out[k] = v if isinstance(v, (bool, int, float, str, type(None))) else (list(v) if isinstance(v, (list, tuple, set)) else str(v))
    for k in ("modules_to_save", "target_modules"):  # PEFT keeps target_modules as a set: sorted for one order
        if isinstance(out.get(k), list):
            out[k] = sorted(out[k])
    return out


def _tree(model):
    """Leaf modules in registration order with what a `layer` line needs."""
    rows = []
    for n, m in model.named_modules():
        if n and not list(m.children()):
            w = getattr(m, "weight", None)
            rows.append({"name": n, "cls": type(m).__name__, "in": getattr(m, "in_features", None),
                         "out": getattr(m, "out_features", None), "bias": getattr(m, "bias", None) is not None,
                         "dtype": _dtype(getattr(w, "dtype", None)),
                         "params": sum(1 for _ in m.parameters(recurse=False))})
    cfg = getattr(model, "config", None)
    cfg = cfg if cfg is not None and hasattr(cfg, "to_dict") else None
    return {"layers": rows, "cls": type(model).__name__,
            "model_type": getattr(cfg, "model_type", None) if cfg is not None else None,
            "config": _model_config(cfg) if cfg is not None else None}


# The transformers config attributes a `model` line is made of (each family's names: gpt2 has its own).
_CONFIG_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "tie_word_embeddings", "num_experts",
                "num_experts_per_tok", "n_embd", "n_inner", "n_layer", "n_head", "max_position_embeddings")


def _model_config(cfg):
    out = {}
    for k in _CONFIG_KEYS:
        v = getattr(cfg, k, None)
        if isinstance(v, (bool, int)):
            out[k] = v
    return out


def _patch_peft(peft):
    from peft import PeftModel
    from peft.tuners.tuners_utils import BaseTuner

    def get_peft_model_desc(a, k, res):
        name = k.get("adapter_name", a[2] if len(a) > 2 else "default")
        if res is None:
            return "get_peft_model", {"adapter": name}
        if _S["peft"] is not None:
            return "second_model", {}
        _S["peft"] = res
        res.register_forward_pre_hook(_forward_hook, with_kwargs=True)
        lora, saved = _targets(name)
        return "get_peft_model", {"adapter": name, "config": _config(k.get("peft_config", a[1] if len(a) > 1 else None)),
                                  "tree": _S.pop("tree", None), "targets": lora, "saved": saved,
                                  "autocast": k.get("autocast_adapter_dtype", True)}

    def snapshot_then(orig):
        @functools.wraps(orig)
        def f(*a, **k):
            if not _S["depth"]:
                _S["tree"] = _tree(k.get("model", a[0] if a else None))
            return orig(*a, **k)
        return f

    mine = lambda a: a and a[0] is _S["peft"]
    mine_tuner = lambda a: a and _S["peft"] is not None and a[0] is _S["peft"].base_model
    for mod in {sys.modules.get(m) for m in ("peft", "peft.mapping_func", "peft.mapping")} - {None}:
        if hasattr(mod, "get_peft_model"):
            _wrap(mod, "get_peft_model", get_peft_model_desc)
            mod.get_peft_model = snapshot_then(mod.get_peft_model)

    def adapter_desc(op, name_at, trainable_at=None):
        def d(a, k, res):
            name = k.get("adapter_name", a[name_at] if len(a) > name_at else "default")
            args = {"adapter": name}
            if op == "add_adapter":
                args["config"] = _config(k.get("peft_config", a[2] if len(a) > 2 else None))
                args["autocast"] = k.get("autocast_adapter_dtype", True)
            if trainable_at is not None:
                args["trainable"] = bool(k.get("is_trainable", a[trainable_at] if len(a) > trainable_at else False))
                args["source"] = str(k.get("model_id", a[1] if len(a) > 1 else ""))
            args["targets"], args["saved"] = _targets(name)
            cfg = getattr(_S["peft"], "peft_config", {}).get(name)
            if cfg is not None:
                args["config"] = _config(cfg)
            return op, args
        return d

    _wrap(PeftModel, "add_adapter", adapter_desc("add_adapter", 1), mine)
    _wrap(PeftModel, "load_adapter", adapter_desc("load_adapter", 2, 3), mine)
    _wrap(PeftModel, "set_adapter", lambda a, k, r: ("set_adapter", {"adapter": k.get("adapter_name", a[1])}), mine)
    _wrap(PeftModel, "delete_adapter", lambda a, k, r: ("delete_adapter", {"adapter": k.get("adapter_name", a[1])}), mine)
    names = lambda a, k, key, i: (lambda v: [v] if isinstance(v, str) else (list(v) if v is not None else None))(k.get(key, a[i] if len(a) > i else None))
    def generate_desc(a, k, res):
        """The tokens the decode added: one forward each (transformers generation/utils.py::
        GenerationMixin._sample, one model call per new token), whatever stopped it."""
        ids = k.get("input_ids", a[1] if len(a) > 1 else None)
        out = getattr(res, "sequences", res)
        shape = lambda t: getattr(t, "shape", None)
        if shape(ids) is not None and shape(out) is not None and len(shape(ids)) == 2 and len(shape(out)) == 2:
            return "generate", {"new_tokens": int(shape(out)[1] - shape(ids)[1])}
        return "generate", {"new_tokens": None, "max_new_tokens": k.get("max_new_tokens")}

    _wrap(BaseTuner, "set_adapter", lambda a, k, r: ("set_adapter_list", {"adapters": names(a, k, "adapter_name", 1)}), mine_tuner)
    _wrap(BaseTuner, "delete_adapter", lambda a, k, r: ("delete_adapter", {"adapter": k.get("adapter_name", a[1])}), mine_tuner)
    _wrap(BaseTuner, "merge_adapter", lambda a, k, r: ("merge", {"adapters": names(a, k, "adapter_names", 1)}), mine_tuner)
    _wrap(BaseTuner, "unmerge_adapter", lambda a, k, r: ("unmerge", {}), mine_tuner)
    _wrap(BaseTuner, "merge_and_unload", lambda a, k, r: ("merge_and_unload", {}), mine_tuner)
    _wrap(PeftModel, "save_pretrained", lambda a, k, r: ("save_adapters", {"adapters": names(a, k, "selected_adapters", 3)}), mine)
    _wrap(PeftModel, "generate", generate_desc, mine)
    for mod in {sys.modules.get(m) for m in ("peft", "peft.utils", "peft.utils.save_and_load")} - {None}:
        for fn in ("get_peft_model_state_dict", "set_peft_model_state_dict"):
            if hasattr(mod, fn) and not hasattr(getattr(mod, fn), "__wrapped__"):
                _wrap(mod, fn, lambda a, k, r, fn=fn: (fn, {}), lambda a: _S["peft"] is not None)

    orig_disable = PeftModel.disable_adapter

    class _Disable:
        def __init__(self, cm):
            self.cm = cm

        def __enter__(self):
            return self._run(self.cm.__enter__, "disable_enter")

        def __exit__(self, *exc):
            return self._run(lambda: self.cm.__exit__(*exc), "disable_exit")

        def _run(self, fn, op):
            at, top = _caller(), _S["depth"] == 0
            _S["depth"] += 1
            try:
                res = fn()
            except BaseException as e:
                _S["depth"] -= 1
                if top:
                    _record(lambda *_: (op, {}), (), {}, None, at, e)
                raise
            _S["depth"] -= 1
            if top:
                _record(lambda *_: (op, {}), (), {}, None, at, None)
            return res

    @functools.wraps(orig_disable)
    def disable_adapter(self, *a, **k):
        cm = orig_disable(self, *a, **k)
        return _Disable(cm) if self is _S["peft"] else cm

    PeftModel.disable_adapter = disable_adapter


def _forward_hook(module, args, kwargs):
    if not _S["depth"]:
        import torch

        ids = kwargs.get("input_ids", args[0] if args else None)
        desc = {"grad": torch.is_grad_enabled()}
        # Token ids (batch, length): a transformers model's batch; the length is the `model` line's seq_len.
        if isinstance(ids, torch.Tensor) and ids.dim() == 2 and not ids.is_floating_point():
            desc["tokens"] = int(ids.shape[1])
        _record(lambda *_: ("forward", desc), (), {}, None, _caller(), None)


def _patch_torch(torch):
    import torch.optim.optimizer as optim

    def backward_desc(a, k, r):
        return ("backward", {}) if _S["peft"] is not None else (None, {})

    _wrap(torch.Tensor, "backward", backward_desc)

    def init_desc(a, k, r):
        if _S["peft"] is None or type(a[0]).__name__ == "AcceleratedOptimizer":
            return None, {}
        held = {id(p) for g in a[0].param_groups for p in g["params"]}
        params = list(_S["peft"].parameters())
        return "optimizer", {"cls": type(a[0]).__name__, "held": len(held),
                             "all": len(params), "trainable": sum(1 for p in params if p.requires_grad),
                             "holds_frozen": any(id(p) in held and not p.requires_grad for p in params)}

    _wrap(torch.nn.Module, "load_state_dict",
          lambda a, k, r: ("load_model", {"plain": True, "keys": _keys(k.get("state_dict", a[1] if len(a) > 1 else None))}),
          lambda a: a and _S["peft"] is not None and a[0] is _S["peft"])
    _wrap(optim.Optimizer, "__init__", init_desc)
    _wrap(optim.Optimizer, "zero_grad", lambda a, k, r: ("zero_grad", {}) if _S["peft"] is not None else (None, {}))

    def step_hook(opt, args, kwargs):
        if _S["peft"] is not None and not _S["depth"] and type(opt).__name__ != "AcceleratedOptimizer":
            _record(lambda *_: ("step", {}), (), {}, None, _caller(), None)

    optim.register_optimizer_step_pre_hook(step_hook)


def _patch_fsdp(fsdp):
    import torch.distributed.fsdp._fully_shard._fully_shard as impl

    def shard_desc(a, k, r):
        mod = k.get("module", a[0] if a else None)
        mods = list(mod) if isinstance(mod, (list, tuple)) else [mod]
        mp = k.get("mp_policy")
        mesh = k.get("mesh")
        return "fully_shard", {
            "modules": [_path_of(m) for m in mods],
            "reshard_after_forward": k.get("reshard_after_forward"),
            "mp": None if mp is None else {"param_dtype": _dtype(mp.param_dtype), "reduce_dtype": _dtype(mp.reduce_dtype),
                                           "output_dtype": _dtype(mp.output_dtype), "cast_forward_inputs": mp.cast_forward_inputs},
            "mesh": None if mesh is None else int(mesh.size())}

    for mod in (fsdp, impl):
        _wrap(mod, "fully_shard", shard_desc, always=True)
    sync = lambda a, k, r: ("gradient_sync", {"module": _path_of(a[0]), "on": bool(k.get("requires_gradient_sync", a[1] if len(a) > 1 else None))})
    _wrap(impl.FSDPModule, "set_requires_gradient_sync", sync, lambda a: _S["peft"] is not None)


def _keys(sd):
    """A state dict's keys as one short digest: a load is the `.seq`'s `load_model` only of a dict
    with a recorded save's keys."""
    import hashlib

    return hashlib.sha1("\n".join(sorted(map(str, sd.keys()))).encode()).hexdigest()[:12] if hasattr(sd, "keys") else None


def _patch_dcp(dcp):
    mine = lambda a: a and _S["peft"] is not None and a[0] is _S["peft"]
    full = lambda k: bool(getattr(k.get("options"), "full_state_dict", False))
    _wrap(dcp, "get_model_state_dict", lambda a, k, r: ("save_model", {"full": full(k), "keys": _keys(r)}), mine)
    _wrap(dcp, "set_model_state_dict",
          lambda a, k, r: ("load_model", {"full": full(k), "keys": _keys(k.get("model_state_dict", a[1] if len(a) > 1 else None))}),
          mine)


def _patch_accelerate(accelerate):
    from accelerate import Accelerator

    def prepare_desc(a, k, r):
        return "prepare", {"model": any(x is _S["peft"] for x in a[1:]) if _S["peft"] is not None else False,
                           "objects": [type(x).__name__ for x in a[1:]]}

    _wrap(Accelerator, "prepare", prepare_desc)


_PATCHES = {"torch": _patch_torch, "torch.distributed.fsdp": _patch_fsdp, "peft": _patch_peft, "accelerate": _patch_accelerate,
            "torch.distributed.checkpoint.state_dict": _patch_dcp}


class _Finder(importlib.abc.MetaPathFinder):
    """Runs the patch of a watched package right after the package's own code has run."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                orig = spec.loader.exec_module

                def exec_module(module, orig=orig):
                    orig(module)
                    _PATCHES[name](module)

                spec.loader.exec_module = exec_module
                return spec
            if spec is not None:
                return spec
        return None


def install(directory):
    _S["dir"] = directory
    sys.meta_path.insert(0, _Finder())
