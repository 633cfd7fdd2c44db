"""Reads one rank's observation off the real objects after an op: which
object each module has registered (the DTensor shard S or the unsharded U),
requires_grad on both, gradients on the shards, placements, the optimizer's
objects that are not registered, and the raw values the coordinator needs to
judge stored weights across ranks."""
import contextlib
import functools

import torch
from torch.distributed.tensor import DTensor

from .collectives import DTYPES, local_of  # noqa: F401 (session.py reads observe.local_of)

ELEM = {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2, torch.uint8: 1}  # uint8: a 4-bit layer's packed Params4bit


# The modules torch and PEFT put between a layer and its parameters: torch's
# CheckpointWrapper (`checkpoint`) and PEFT's LoRA layer (its wrapped base_layer).
WRAPPERS = ("_checkpoint_wrapped_module", "base_layer")


# A `model` scenario's layers are module paths with dots (model_scenario.layers_of), longest first:
# there the layer is the longest of them that the name starts with, not its first part.
DOTTED = []


def set_layers(names):
    """The scenario's layer names, for model_name (its cache holds only while they stay)."""
    dotted = sorted((n for n in names if "." in n), key=len, reverse=True)
    if dotted != DOTTED:
        DOTTED[:] = dotted
        model_name.cache_clear()


@functools.lru_cache(maxsize=4096)  # a pure function of the name, asked for each parameter at each observation
def model_name(peft_name):
    """`base_model.model.lin0.lora_A.default.weight` -> `lin0.lora_A.default`;
    `...lin0.base_layer.weight` -> `lin0.weight`;
    `...lin0._checkpoint_wrapped_module.lora_A.default.weight` -> `lin0.lora_A.default`.
    By position, never by searching the text: the first part is the layer, the wrappers sit
    right after it, and an adapter may be named `base_layer` (`lin0.lora_A.base_layer`)."""
    n = peft_name
    for prefix in ("base_model.model.", "_orig_mod."):
        if n.startswith(prefix):
            n = n[len(prefix):]
    layer = next((d for d in DOTTED if n.startswith(d + ".")), None)
    if layer is not None:
        rest = n[len(layer) + 1:].split(".")
    else:
        layer, *rest = n.split(".")
    while len(rest) > 1 and rest[0] in WRAPPERS:
        rest.pop(0)
    if len(rest) == 3 and rest[0] in ("lora_A", "lora_B", "lora_magnitude_vector") and rest[2] == "weight":
        rest.pop()  # a LoRA Linear's (or DoRA magnitude's) weight is named by its adapter
    return ".".join([layer] + rest)


def owners(sess):
    """The scenario's adapter parameters (seqfile.Scenario.param_owners), cached on the session."""
    o = getattr(sess, "_param_owners", None)
    if o is None:
        o = sess._param_owners = sess.scen.param_owners()
    return o


def owner_of(sess, name):
    """(layer, kind, adapter) of an adapter parameter, None for a base one:
    from the scenario's declarations. kind `modules_to_save`: that adapter's copy of
    the layer (the ModuleDict of peft/utils/other.py::ModulesToSaveWrapper)."""
    return owners(sess).get(name)


def flat(t):
    """A tensor's (local) values for the coordinator: float32 bytes in base64,
    far cheaper to encode than a JSON list; None for a meta tensor."""
    import base64
    t = local_of(t)
    if t.device.type == "meta":
        return None
    # a copy: numpy() on the live storage would make FSDP unable to resize it
    return base64.b64encode(t.detach().float().clone().numpy().tobytes()).decode()


NO_DTENSOR_MATH = ("forward", "eval", "generate", "backward", "train_step", "step", "zero_grad", "gradient_sync")


def funcol_mode(sess, op):
    """Records DTensor's collectives during ops that may do math on shards."""
    import contextlib
    from .collectives import FuncolRecorder
    if op.kind in NO_DTENSOR_MATH or sess.world == 1 or not sess.fsdp_param:
        return contextlib.nullcontext()
    names = {}
    for name, fp in sess.fsdp_param.items():
        t = local_of(fp.sharded_param)
        names[t.untyped_storage().data_ptr()] = (fp._fsdpsim_group, name, t.numel())
    return FuncolRecorder(names)


def grad_marks(sess):
    """Tags every shard's current grad so that after the op we can tell which
    shards received a new or accumulated gradient."""
    from .collectives import REC
    REC.reduced.clear()
    with reading(sess):
        marks = list(shard_objects(sess))
    for name, s in marks:
        g = s.grad
        if g is not None:
            g._fsdpsim_mark = local_of(g)._version


def grads_received(sess):
    """Adapters that received a gradient in this op: a managed shard when FSDP's
    foreach_reduce wrote its gradient (collectives.py), a plain tensor when its grad changed."""
    from .collectives import REC
    out = set()
    for name, s in shard_objects(sess):
        fp = managed(sess, name)
        if fp is not None:
            if id(fp) in REC.reduced:
                out.add(owner_of(sess, name)[2])
            continue
        g = s.grad
        if g is None:
            continue
        if getattr(g, "_fsdpsim_mark", None) != local_of(g)._version:
            out.add(owner_of(sess, name)[2])
    return out


def shard_objects(sess):
    """(name, S) of every adapter parameter: FSDP's sharded parameter where a
    group manages the module the layer holds now, else the plain registered
    tensor (an adapter deleted and added again is a new module FSDP never saw;
    its old FSDPParam still exists, on the deleted module)."""
    for name, p in sess.named_adapter_params():
        fp = managed(sess, name)
        yield name, (fp.sharded_param if fp is not None else p)


def managed(sess, name):
    """The FSDPParam of `name` if it manages the module the layer holds now
    (memoized while one observation is read: the modules do not change then)."""
    memo = getattr(sess, "managed_memo", None)
    if memo is not None:
        if name not in memo:
            memo[name] = _managed(sess, name)
        return memo[name]
    return _managed(sess, name)


def _managed(sess, name):
    fp = sess.fsdp_param.get(name)
    if fp is None:
        return None
    owner = owner_of(sess, name)
    if owner is not None:
        layer, kind, adapter = owner
        container = getattr(sess.layer(layer), kind, {})
        if adapter not in container or container[adapter] is not fp._module_info.module:
            return None
    return fp


def adapter_order(sess):
    return {a.name: i for i, a in enumerate(sess.scen.adapters)}


def param_sort_key(sess):
    layers = {l.name: i for i, l in enumerate(sess.scen.layers)}
    ad = adapter_order(sess)

    def key(name):
        layer, kind, adapter = owner_of(sess, name)
        # a copy's weight before its bias (named_parameters order of the copied Linear)
        return (layers[layer], kind, ad.get(adapter, 99), name.endswith(".bias"))

    return key


def registered(fp):
    info = fp._module_info
    return info.module._parameters.get(info.param_name)


@contextlib.contextmanager
def reading(sess):
    """While one observation is read the modules do not change: the model's named_parameters(),
    which FSDPParam manages each name (managed) and each layer's module (Session.layer: a
    get_submodule walk per call, a few per parameter) are read once. Nested: the outermost sets them."""
    if getattr(sess, "named_cache", None) is not None:
        yield
        return
    sess.named_cache = list(sess.pm.named_parameters())
    sess.managed_memo, sess.layer_memo = {}, {}
    try:
        yield
    finally:
        sess.named_cache = sess.managed_memo = sess.layer_memo = None


def local(sess, op, step, grads):
    """The observation fields one rank can read alone, plus `values` for the
    coordinator's judgement of stored weights."""
    with reading(sess):
        return _local(sess, op, step, grads)


def _local(sess, op, step, grads):
    o = {"step": step, "rank": sess.rank, "op": op.text(), "status": "ok"}
    ad = adapter_order(sess)
    if grads is not None:
        o["grads"] = sorted(grads, key=lambda a: ad.get(a, 99))
    active = sess.pm.base_model.active_adapters
    active = [active] if isinstance(active, str) else list(active)
    o["active"] = sorted(active, key=lambda a: ad.get(a, 99))
    lora = sess.lora_layers()
    o["disabled"] = bool(lora) and any(getattr(m, "disable_adapters", False) for m in lora)
    reg_ids = {id(p) for _, p in sess.named_cache}
    unreg = [n for n, p in zip(sess.opt_names, sess.opt.param_groups[0]["params"]) if id(p) not in reg_ids] if sess.opt else []
    o["optimizer"] = {"missing": len(unreg), "total": len(sess.opt_names), "unregistered": unreg}
    groups = []
    for gname, _ in (sess.fsdp_modules if sess.prepared else []):
        fps = [fp for fp in sess.fsdp_param.values() if fp._fsdpsim_group == gname]
        u = any(registered(fp) is not fp.sharded_param for fp in fps)
        groups.append({"name": gname, "state": "UNSHARDED" if u else "SHARDED", "registered": "U" if u else "S"})
    o["groups"] = groups
    params = []
    by_param = param_sort_key(sess)
    for name, s in sorted(shard_objects(sess), key=lambda x: by_param(x[0])):
        fp = managed(sess, name)
        rg_u = None
        if fp is not None and hasattr(fp, "_unsharded_param"):
            rg_u = bool(fp._unsharded_param.requires_grad)
        t = local_of(s)
        params.append({"name": name, "group": getattr(fp, "_fsdpsim_group", "") if fp else "",
                       "S.requires_grad": bool(s.requires_grad), "U.requires_grad": rg_u,
                       "device": t.device.type, "dtype": DTYPES.get(t.dtype, str(t.dtype))})
    o["params"] = params
    layers = []
    values = {"s": {}, "u": {}}
    for l in sess.scen.layers:
        m = sess.layer(l.name)
        fp = sess.fsdp_param.get(sess.scen.base_name(l.name))
        layers.append({"name": l.name, "group": getattr(fp, "_fsdpsim_group", "") if fp else "",
                       "merged": list(getattr(m, "merged_adapters", [])),
                       "stored": "unjudged", "registered": "unjudged"})  # judge.py reads the values
    for name, fp in sess.fsdp_param.items():
        if name.endswith(".bias"):
            continue  # deleted adapters' rows stay: a delta they left behind is an extra one
        values["s"][name] = flat(fp.sharded_param)
        reg = registered(fp)
        if reg is not fp.sharded_param and reg is not None:
            values["u"][name] = flat(reg)
            if reg.dtype != fp.sharded_param.dtype:  # a MixedPrecisionPolicy's param_dtype copy (judge.py)
                values.setdefault("u_cast", []).append(name)
    for name, p in sess.named_adapter_params():
        if managed(sess, name) is None:  # unmanaged, or re-added over a deleted managed one
            values["s"][name] = flat(p)
            values["u"].pop(name, None)
            values.setdefault("steps", {})[name] = adam_steps(sess, p)  # judge.py's replica_coincident
    bases = {sess.scen.base_name(l.name) for l in sess.scen.layers} - set(sess.fsdp_param)
    for n, p in (sess.named_cache if bases else ()):
        if model_name(n) in bases:  # a base weight no group manages (before prepare): held whole
            values["s"][model_name(n)] = flat(p)
    o["layers"] = layers
    o["collectives"] = []
    if op.kind == "delta_weight" and getattr(sess, "deltas", None) is not None:
        values["delta_layer"] = op.names[0]
        values["deltas"] = {}
        for a, d in sess.deltas.items():
            dim = next((p.dim for p in d.placements if p.is_shard()), None) if isinstance(d, DTensor) else None
            partial = isinstance(d, DTensor) and any(p.is_partial() for p in d.placements)
            values["deltas"][a] = {"shard_dim": dim, "partial": partial, "shape": list(d.shape), "v": flat(d)}
        o["deltas"] = {a: "unjudged" for a in sess.deltas}  # judge.py reads the values
        sess.deltas = None
    if op.kind == "save_adapters" and getattr(sess, "saved_obs", None) is not None:
        o["saved"] = sess.saved_obs
        sess.saved_obs = None
    if op.kind == "load_adapters" and getattr(sess, "reload_expect", None) is not None:
        diff, coincident = reload_diff(sess)
        if diff:  # printed only when something differs, as fsdpsim prints it
            o["reload_diff"] = diff
        if coincident:
            o["reload_coincident"] = coincident
        sess.reload_expect = None
    owners = {}
    for name, fp in sess.fsdp_param.items():
        lora = owner_of(sess, name)
        if lora is not None and managed(sess, name) is None:
            continue
        owner = lora[2] if lora is not None else "base"
        t = local_of(fp.sharded_param)
        b = 0 if t.device.type == "meta" else fp.padded_sharded_param_size.numel() * ELEM.get(t.dtype, 4)
        owners[owner] = owners.get(owner, 0) + b
    for n, p in sess.named_cache:
        name = model_name(n)
        if managed(sess, name) is not None:
            continue
        # not managed by FSDP (everything before prepare, adapters added later): held whole
        lora = owner_of(sess, name)
        owner = lora[2] if lora is not None else "base"
        b = 0 if p.device.type == "meta" else p.numel() * ELEM.get(p.dtype, 4)
        owners[owner] = owners.get(owner, 0) + b
    o["sharded_bytes"] = {k: owners[k] for k in sorted(owners, key=lambda a: (a == "base", ad.get(a, 99)))
                          if owners[k]}
    o["peak_unsharded_bytes"] = {}
    return o, values


def adam_steps(sess, s):
    """The steps torch.optim.AdamW has taken on the object S (its state's
    `step`; 0 without state or optimizer)."""
    opt = getattr(sess, "opt", None)
    st = opt.state.get(s, {}) if opt is not None else {}
    step = st.get("step", 0)
    return int(step.item()) if torch.is_tensor(step) else int(step)


def reload_diff(sess):
    """The adapter parameters whose values differ, after the reload, from
    what this rank held when the adapters were saved; and those that took in
    rank 0's rows, or that an optimizer step moved since the save, and happen
    to equal this rank's own then (the values cannot show either)."""
    out, same = [], []
    for name, s in shard_objects(sess):
        want = sess.reload_expect.get(name)
        if want is None:
            continue
        mine = local_of(s).detach().float()
        if want.shape != mine.shape or not torch.allclose(want.float(), mine, atol=1e-6):
            out.append(name)
        elif name in getattr(sess, "reload_foreign", ()):
            same.append(name)
        elif adam_steps(sess, s) != getattr(sess, "saved_steps", {}).get(name, adam_steps(sess, s)):
            same.append(name)  # stepped since the save, yet equal to what was saved
    return sorted(out, key=param_sort_key(sess)), sorted(same, key=param_sort_key(sess))
