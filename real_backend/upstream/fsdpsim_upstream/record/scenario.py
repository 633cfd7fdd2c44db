"""The scenario half of a recorded `.seq`: world, layers, adapters, the fully_shard plan, dtype,
mixed precision and the optimizer, from one rank's structural events (the tracer's
get_peft_model module tree, its LoraConfigs, its fully_shard calls)."""

_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}
_MP_KEYS = ("param_dtype", "reduce_dtype", "output_dtype")


def seq_name(path):
    """A module path as a `.seq` name (names hold no dots: docs/guide/seq-format.md)."""
    return path.replace(".", "_")


class Scenario:
    def __init__(self):
        self.lines = []
        self.layers = set()          # seq names of the layer lines
        self.initial = set()         # adapters in the model before fully_shard (no op)
        self.deferred = set()        # adapters that enter through add_adapter / load_adapter ops
        self.first_optimizer = None  # the index of the optimizer event the `optimizer` line is


def _adapter_line(name, args, deferred, notes, autocast_default):
    cfg = args.get("config") or {}
    targets = [seq_name(t) for t in args.get("targets", [])]
    if not targets:
        notes.append(f"adapter {name}: no Linear layer holds it (target_modules matched nothing the model records)")
        return None
    init = cfg.get("init_lora_weights", True)
    if init not in (True, False, "gaussian"):
        notes.append(f"adapter {name}: init_lora_weights={init!r} (recorded as PEFT's default, B zero)")
    for key, default in (("lora_dropout", 0.0), ("use_rslora", False), ("bias", "none"), ("target_parameters", None)):
        if cfg.get(key, default) not in (default, [], None if default is None else default):
            notes.append(f"adapter {name}: {key}={cfg[key]!r}")
    line = f"adapter {name} r={cfg.get('r', 8)} alpha={cfg.get('lora_alpha', 8)} targets={','.join(targets)}"
    line += " init=random" if init is False else " init=zero"
    if args.get("autocast", True) != autocast_default:
        line += f" autocast={'true' if args.get('autocast', True) else 'false'}"
    if cfg.get("inference_mode"):
        line += " inference_mode"
    if deferred:
        line += " deferred"
    if args.get("saved"):
        line += " modules_to_save=" + ",".join(seq_name(s) for s in args["saved"])
    if cfg.get("use_dora"):
        line += " use_dora"
    return line


def _layer_lines(tree, notes):
    lines, dtypes = [], set()
    between = [r["name"] for r in tree["layers"] if r["params"] == 0]
    if between:
        notes.append("modules without parameters between the layers: " + ", ".join(
            f"{n} ({r['cls']})" for n, r in ((r["name"], r) for r in tree["layers"] if r["params"] == 0))
            + " (the model's layers feed each other directly)")
    for r in tree["layers"]:
        if r["params"] == 0:
            continue
        if r["cls"] != "Linear" or r["in"] is None:
            notes.append(f"layer {r['name']} ({r['cls']}): only nn.Linear layers are recorded")
            continue
        if not r["bias"]:
            notes.append(f"layer {r['name']}: bias=False (a recorded layer has a bias)")
        lines.append((seq_name(r["name"]), f"layer {seq_name(r['name'])} {r['in']} {r['out']}"))
        dtypes.add(r["dtype"])
    if tree.get("model_type"):
        notes.append(f"the transformers {tree['cls']} (model_type {tree['model_type']}) is recorded as its Linear layers, not as a `model` line")
    return lines, dtypes


def _fully_shard_lines(shards, notes):
    out, mp_line = [], None
    root = [s for s in shards if s["args"]["modules"] == ["root"]]
    if not root:
        return None, None
    base = root[-1]["args"].get("mp") or {}
    if any(base.get(k) for k in _MP_KEYS) or base.get("cast_forward_inputs") is False:
        mp_line = "mixed_precision " + " ".join(f"{k}={_DTYPES.get(base[k], base[k])}" for k in _MP_KEYS if base.get(k))
        if base.get("cast_forward_inputs") is False:
            mp_line += " cast_forward_inputs=false"
    for s in shards:
        a = s["args"]
        mods = a["modules"]
        if any(m.startswith("<") for m in mods):
            notes.append(f"fully_shard of {', '.join(mods)} at {s['at']}")
            continue
        raf = a.get("reshard_after_forward")
        text = "none" if raf is None else ("true" if raf is True else "false" if raf is False else None)
        if text is None:
            notes.append(f"fully_shard {','.join(mods)} reshard_after_forward={raf} (an int) at {s['at']}; recorded as true")
            text = "true"
        line = f"fully_shard {','.join(seq_name(m) for m in mods)} reshard_after_forward={text}"
        mp = a.get("mp") or {}
        over = [f"{k}={_DTYPES.get(mp[k], mp[k])}" for k in _MP_KEYS if mp.get(k) and mp.get(k) != base.get(k)]
        if any(base.get(k) and not mp.get(k) for k in _MP_KEYS):
            notes.append(f"fully_shard {','.join(mods)} at {s['at']} drops a key of the root's MixedPrecisionPolicy")
        if s is not root[-1] and over:
            line += " " + " ".join(over)
        if mods != ["root"]:
            out.append(line)
    return out + [line_of_root(root[-1])], mp_line


def line_of_root(ev):
    raf = ev["args"].get("reshard_after_forward")
    return f"fully_shard root reshard_after_forward={'none' if raf is None else 'false' if raf is False else 'true'}"


def scenario_lines(events, world, notes):
    """(Scenario, None), or (None, why nothing useful remains)."""
    s = Scenario()
    gpm = next((e for e in events if e["op"] == "get_peft_model" and e["args"].get("tree")), None)
    if gpm is None:
        return None, "no get_peft_model call (the .seq models a PEFT LoRA model)"
    a = gpm["args"]
    layers, dtypes = _layer_lines(a["tree"], notes)
    s.layers = {n for n, _ in layers}
    if not layers:
        return None, "no nn.Linear layer in the model"
    shards = [e for e in events if e["op"] == "fully_shard"]
    plan, mp_line = _fully_shard_lines(shards, notes)
    if plan is None:
        return None, "no fully_shard of the PEFT model itself (the root group)"
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
    if len(dtypes) > 1 or _DTYPES.get(dtype) is None:
        notes.append(f"layer dtypes {sorted(str(d) for d in dtypes)} (recorded as fp32)")
        dtype = "float32"
    autocast_default = a.get("autocast", True)
    adapters = [_adapter_line(a["adapter"], a, False, notes, autocast_default)]
    s.initial.add(a["adapter"])
    first_shard = events.index(shards[0]) if shards else len(events)
    ops_seen = False
    for i, e in enumerate(events):
        if e["op"] in ("add_adapter", "load_adapter") and "raised" not in e:
            name = e["args"]["adapter"]
            if name in s.initial | s.deferred:
                continue
            initial = e["op"] == "add_adapter" and i < first_shard and not ops_seen
            (s.initial if initial else s.deferred).add(name)
            adapters.append(_adapter_line(name, e["args"], not initial, notes, autocast_default))
        elif e["op"] not in ("fully_shard", "optimizer", "get_peft_model"):
            ops_seen = True
    opt = next((e for e in events if e["op"] == "optimizer"), None)
    s.lines = [f"world {world}", "seed 0", "profile upstream"]
    if dtype == "bfloat16":
        s.lines.append("dtype bf16" + ("" if autocast_default else " autocast_adapter_dtype=false"))
    if mp_line:
        s.lines.append(mp_line)
    s.lines += [l for _, l in layers] + [l for l in adapters if l] + plan
    if opt is not None:
        s.first_optimizer = events.index(opt)
        if opt["args"]["cls"] != "AdamW":
            notes.append(f"optimizer {opt['args']['cls']} at {opt['at']} (the model's optimizer is AdamW)")
        s.lines.append("optimizer all" if opt["args"].get("holds_frozen") else "optimizer trainable")
    return s, None
