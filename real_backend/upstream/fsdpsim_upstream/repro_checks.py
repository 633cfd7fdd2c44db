"""What an exported repro checks at the finding's step: the finding, read off
the minimal sequence's `# signature:` and `# finding:` comments, turned into
one `check(...)` function for the script, with the recorded violation as its
constants. check returns (code, got): 1 when the library shows the recorded
violation, 0 when the spec holds, 2 when it is violated another way. A finding
the plain libraries cannot check raises ValueError (fsdpsim exits 3)."""
import re
from dataclasses import dataclass


@dataclass
class Finding:
    spec: str
    step: int
    rank: int  # -1: not one rank's (S5)
    detail: str  # the sentence after "S1 step 4 rank 0: "
    status: str  # the finding op's status in the signature ("ok", "key_error", ...)
    signature: str


def parse(comments):
    """The finding of a `.seq`'s comments; None when it carries none."""
    found = {k: v for k, v in (c.split(": ", 1) for c in comments if ": " in c)}
    sentence, signature = found.get("finding"), found.get("signature")
    if not sentence or not signature:
        return None
    m = re.match(r"(S\d) step (\d+)(?: rank (\d+))?: (.*)", sentence)
    if not m:
        raise ValueError(f"cannot read the finding sentence: {sentence}")
    status = signature.split(" |", 1)[0].split(":", 1)[1]
    return Finding(m.group(1), int(m.group(2)), int(m.group(3)) if m.group(3) else -1, m.group(4), status, signature)


def layers_of(scen):
    """Each FSDP group's layers (those no child group holds belong to the root)."""
    out = {("root" if d.is_root else d.modules[0]): [] for d in scen.shards}
    for layer in scen.layers:
        d = next((d for d in scen.shards if layer.name in d.modules), None)
        out["root" if d is None else d.modules[0]].append(layer.name)
    return out


def adapters(text):
    """"{a,b}" -> ["a", "b"]."""
    return sorted(n for n in text.strip("{}").split(",") if n)


# Every check gets the op's status and message (status_of in the script), what
# `before(...)` recorded just before the op ran, and `result`: W0 for S2, the saved
# state dicts for S6, the deltas for S7.
NOTHING_BEFORE = '''
def before(model, shards):
    return None
'''

STATUS = NOTHING_BEFORE + '''

def check(model, shards, snap, status, message, result):
    if status == "ok":
        return FIXED, "it ran without an exception"
    code = REPRODUCED if status == RECORDED_STATUS and message.startswith(RECORDED_MESSAGE) else DIFFERENT
    return code, f"{status}: {message}"
'''

S1 = '''
def before(model, shards):
    return {n: None if p.grad is None else local(p.grad).clone() for n, p in adapter_params(model, shards)}


def check(model, shards, snap, status, message, result):
    """The adapters whose LoRA parameters received a gradient during the op."""
    if status != "ok":
        return (REPRODUCED if status == RECORDED_GOT else DIFFERENT), f"{status}: {message}"
    got = sorted({ADAPTER_OF[n] for n, p in adapter_params(model, shards)
                  if p.grad is not None and (snap[n] is None or not torch.equal(local(p.grad), snap[n]))})
    code = FIXED if got == WANT else REPRODUCED if got == RECORDED_GOT else DIFFERENT
    return code, f"gradients on {{{','.join(got)}}}"
'''

S3 = '''
def before(model, shards):
    """requires_grad of each parameter on the unsharded copy the modules hold now."""
    reg = registered(model)
    return {n: reg[n].requires_grad for n, _, _ in FLAGS}


def check(model, shards, snap, status, message, result):
    """The same flags on the shards once the op has resharded."""
    if status not in ("ok", RECORDED_STATUS):
        return DIFFERENT, f"{status}: {message}"
    now = {n: shards[n].requires_grad for n, _, _ in FLAGS}
    got = "shard requires_grad " + ", ".join(f"{n}={now[n]} (unsharded copy: {snap[n]})" for n, _, _ in FLAGS)
    if all(now[n] == snap[n] for n, _, _ in FLAGS):
        return FIXED, got
    recorded = all(snap[n] == u and now[n] == s for n, u, s in FLAGS)
    return (REPRODUCED if recorded else DIFFERENT), got
'''

S2 = NOTHING_BEFORE + '''


def check(model, shards, snap, status, message, result):
    """The weight the layer holds now against W0 + the deltas of its merged adapters."""
    if status not in ("ok", RECORDED_STATUS):
        return DIFFERENT, f"{status}: {message}"
    layer = getattr(model.base_model.model, LAYER)
    weight = full(layer.get_base_layer().weight).detach()
    deltas = {a: (full(layer.lora_B[a].weight) @ full(layer.lora_A[a].weight)).detach() * layer.scaling[a]
              for a in layer.lora_A}
    merged = set(layer.merged_adapters)

    def close(subset):
        want = result[LAYER] + sum((deltas[a] for a in subset), torch.zeros_like(weight))
        return torch.allclose(weight, want, rtol=1e-4, atol=1e-5)

    others = [a for a in deltas if a not in merged]
    got = ("exact" if close(merged) else
           "missing_delta" if any(close(merged - {a}) for a in merged) else
           "extra_delta" if any(close(merged | {a}) for a in others) else "corrupt")
    code = FIXED if got == "exact" else REPRODUCED if got == RECORDED_GOT else DIFFERENT
    return code, f"{LAYER}.weight is {got} (merged_adapters={sorted(merged)})"
'''

S4 = STATUS

S5_DISAGREE = NOTHING_BEFORE + '''

def field(model, shards):
    """This rank's value of the field the ranks disagreed on."""
    if FIELD_KIND == "active":
        return sorted(model.base_model.active_adapters)
    if FIELD_KIND == "merged":
        return sorted(getattr(model.base_model.model, FIELD_OF).merged_adapters)
    p = shards.get(FIELD_OF, registered(model).get(FIELD_OF))
    if FIELD_KIND == "values":  # a plain (unsharded) tensor every rank should hold alike
        return [round(v, 6) for v in p.detach().float().flatten().tolist()]
    return str(p.dtype) if FIELD_KIND == "dtype" else p.requires_grad


def check(model, shards, snap, status, message, result):
    if status not in ("ok", RECORDED_STATUS):
        return DIFFERENT, f"{status}: {message}"
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, field(model, shards))
    got = ", ".join(f"rank {r} {v if FIELD_KIND != 'values' else 'values ' + str(v[:3])[:-1] + ', ...]'}"
                    for r, v in enumerate(values))
    return (FIXED if all(v == values[0] for v in values) else REPRODUCED), got
'''

S5_STUCK = NOTHING_BEFORE + '''

def check(model, shards, snap, status, message, result):
    """A collective that times out (gloo's timeout, set short) or fails on mismatched ranks."""
    if status == "ok":
        return FIXED, "it ran without an exception"
    return REPRODUCED, f"{status}: {message}"
'''

S5_BROADCAST = '''
def before(model, shards):
    """torch.distributed.broadcast wrapped for the op to note each call's size and dtype on this rank
    (accelerate's fsdp2_load_full_state_dict issues one per state-dict entry): gloo pairs calls by
    order, not by name or size, so a pair that differs is a mismatch whatever it then does."""
    calls, real = [], dist.broadcast

    def noting(tensor, *args, **kwargs):
        calls.append(f"{tensor.numel()} {DTYPES.get(str(tensor.dtype), str(tensor.dtype))}")
        return real(tensor, *args, **kwargs)

    dist.broadcast = noting
    return calls, real


def check(model, shards, snap, status, message, result):
    """The i-th broadcast of every rank against the others' (over a fresh group: the default one may
    be stuck after a timed-out collective)."""
    calls, dist.broadcast = snap
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, (status, message, calls), group=dist.new_group(backend="gloo"))
    failed = [f"rank {r} {s}: {m}" for r, (s, m, _) in enumerate(every) if s != "ok"]
    n = max(len(c) for _, _, c in every)
    first = next((i for i in range(n) if len({c[i] if i < len(c) else "none" for _, _, c in every}) > 1), None)
    if first is None and not failed:
        return FIXED, f"every rank issued the same {n} broadcasts"
    if first is None:
        return REPRODUCED, "; ".join(failed)
    name = short(list(model.state_dict())[first])
    got = f"broadcast({name}): " + ", ".join(f"rank {r} {c[first] if first < len(c) else 'none'}"
                                                for r, (_, _, c) in enumerate(every))
    return (REPRODUCED if (name, [c[first] for _, _, c in every]) == (RECORDED_TENSOR, RECORDED_CALLS)
            else DIFFERENT), got
'''

S6 = NOTHING_BEFORE + '''

def check(model, shards, snap, status, message, result):
    """The rows each tensor of the adapters' state dict holds (what a checkpoint writer gets)."""
    if status not in ("ok", RECORDED_STATUS):
        return DIFFERENT, f"{status}: {message}"
    rows = {}
    for a, sd in result.items():
        for k, v in sd.items():
            name = short(k).replace(".lora_A", f".lora_A.{a}").replace(".lora_B", f".lora_B.{a}")
            rows[name] = (local(v).shape[0], v.shape[0], isinstance(v, DTensor))
    got = "; ".join(f"{n}: {'a DTensor holding ' if d else ''}{r} of {f} rows" for n, (r, f, d) in rows.items()
                    if n == TENSOR or (r, d) != (f, False))
    if all(r == f and not d for r, f, d in rows.values()):
        return FIXED, f"every tensor holds all its rows ({len(rows)} tensors)"
    return (REPRODUCED if rows.get(TENSOR, (0, 0))[:2] == (RECORDED_ROWS, FULL_ROWS) else DIFFERENT), got
'''

S6_SELECTED = NOTHING_BEFORE + '''

def check(model, shards, snap, status, message, result):
    """Which of the adapters the save selected have tensors in their state dict (an adapter with none
    is not in what save_pretrained writes)."""
    if status not in ("ok", RECORDED_STATUS):
        return DIFFERENT, f"{status}: {message}"
    selected = SELECTED or sorted(model.peft_config)
    saved = sorted(a for a, sd in result.items() if sd)
    missing = [a for a in selected if a not in saved]
    if not missing:
        return FIXED, f"every selected adapter has tensors in its state dict: {{{','.join(saved)}}}"
    got = f"adapters {{{','.join(missing)}}} were not saved (saved: {{{','.join(saved)}}})"
    return (REPRODUCED if (missing, saved) == (RECORDED_MISSING, RECORDED_SAVED) else DIFFERENT), got
'''

S7 = NOTHING_BEFORE + '''


def check(model, shards, snap, status, message, result):
    """Each delta get_delta_weight returned against B @ A * scaling of the full shards (what the optimizer
    steps; while a group is unsharded the module registers a copy that a step does not update)."""
    if status != "ok":
        code = REPRODUCED if status == RECORDED_STATUS and message.startswith(RECORDED_MESSAGE) else DIFFERENT
        return code, f"{status}: {message}"
    layer = getattr(model.base_model.model, LAYER)

    wrong = []
    for a, d in result.items():
        A, B = (full(shards.get(f"{LAYER}.{k}.{a}", getattr(layer, k)[a].weight)).detach()
                for k in ("lora_A", "lora_B"))
        w = layer.get_base_layer().weight if hasattr(layer, "get_base_layer") else None
        shape = tuple(w.shape) if w is not None else ()
        if EXPERTS:
            E, fan_in, fan_out = EXPERTS
            want = torch.einsum("ore,eri->eio", B.reshape(fan_out, -1, E), A.reshape(E, -1, fan_in))
        else:
            want = B @ A
        want = want * layer.scaling[a]
        d = full(d).detach()
        if d.shape != want.shape or not torch.allclose(d, want, rtol=1e-4, atol=1e-5):
            wrong.append(f"delta of {a} has shape {tuple(d.shape)} and differs from B @ A * scaling "
                         f"{tuple(want.shape)} (weight {shape})")
    if not wrong:
        return FIXED, "every delta equals B @ A * scaling"
    return (REPRODUCED if RECORDED_STATUS == "ok" else DIFFERENT), "; ".join(wrong)
'''


def plan(f, scen, op):
    """(check code, constants, expected sentence) for finding f at op `op`."""
    d, rec = f.detail, {"RECORDED_STATUS": f.status}
    what = f"step {f.step} ({op.text()})"
    if f.spec == "S1":
        m = re.match(r"expected (?:gradients on (\{[^}]*\})|no gradients), got (\{[^}]*\}|\w+)", d)
        if not m:
            raise ValueError(f"cannot read the S1 finding: {d}")
        want = adapters(m.group(1) or "{}")
        got = adapters(m.group(2)) if m.group(2).startswith("{") else m.group(2)
        rec.update(WANT=want, RECORDED_GOT=got)
        who = "{" + ",".join(want) + "}"
        return S1, rec, (f"{what} puts gradients on the LoRA parameters of {who} and of no other adapter"
                         if want else f"{what} puts gradients on no adapter's LoRA parameters")
    if f.spec == "S3":
        flags = []
        for clause in re.split(r"; (?=group )", d.split(": ", 1)[1]):
            group, lost = clause[len("group "):].split(": ", 1)
            for owner, u, s in re.findall(r"(\S+)\.requires_grad U=(true|false) S=(true|false)", lost):
                flags += [(n, u == "true", s == "true") for n, o in scen.param_owners().items()
                          if o[2] == owner and o[0] in layers_of(scen)[group]]
        if not flags:
            raise ValueError(f"cannot check this S3 finding with the libraries yet (only lost requires_grad flags): {d}")
        rec["FLAGS"] = flags
        names = ", ".join(n for n, _, _ in flags)
        return S3, rec, (f"after {what} resharded, each shard has the requires_grad its unsharded copy had "
                         f"just before ({names})")
    if f.spec == "S2":
        m = re.match(r"layer (\S+) merged=\[[^\]]*\] but its (?:shard|unsharded copy) is (\w+)", d)
        if not m or scen.layer(m.group(1)).experts:
            raise ValueError(f"cannot check this S2 finding with the libraries yet (Linear layers only): {d}")
        rec.update(LAYER=m.group(1), RECORDED_GOT=m.group(2))
        return S2, rec, (f"after {what}, {m.group(1)}.weight (DTensor.full_tensor() when sharded) equals "
                         f"W0 + the delta B @ A * scaling of each adapter in merged_adapters")
    if f.spec == "S4":
        m = re.match(r"\w+ raised (.*?) \(\d+/\d+ optimizer", d)
        rec["RECORDED_MESSAGE"] = m.group(1).split(": ", 1)[-1] if m else ""
        return STATUS, rec, f"{what} runs without an exception"
    if f.spec == "S5":
        return s5(f, rec, what)
    if f.spec == "S6" and op.kind == "load_adapters":
        m = re.match(r"load_adapters raised \w+: (.*)", d)
        if not m:
            raise ValueError(f"cannot check this S6 finding with the libraries yet (a reload raising only): {d}")
        rec["RECORDED_MESSAGE"] = re.sub(r"^KeyError: ", "", m.group(1))  # the script's status_of drops it
        return STATUS, rec, (f"{what}: set_peft_model_state_dict of each saved adapter's state dict "
                             f"runs without an exception")
    m = re.match(r"adapters (\{[^}]*\}) were not saved \(saved: (\{[^}]*\})\)", d)
    if f.spec == "S6" and m and op.kind == "save_adapters":
        rec.update(SELECTED=list(op.names), RECORDED_MISSING=adapters(m.group(1)), RECORDED_SAVED=adapters(m.group(2)))
        who = "{" + ",".join(op.names) + "}" if op.names else "every adapter in peft_config"
        return S6_SELECTED, rec, (f"{what}: get_peft_model_state_dict of {who} (what save_pretrained writes "
                                  f"by default) holds each one's tensors")
    if f.spec == "S6":
        m = re.search(r"(\S+) saved (\d+) of (\d+) rows", d)
        if not m or op.kind != "save_adapters":
            raise ValueError(f"cannot check this S6 finding with the libraries yet (rows of a save only): {d}")
        rec.update(TENSOR=m.group(1), RECORDED_ROWS=int(m.group(2)), FULL_ROWS=int(m.group(3)))
        return S6, rec, (f"{what}: every tensor get_peft_model_state_dict returns (what save_pretrained writes) "
                         f"holds all its rows, {m.group(1)}: {m.group(3)} rows")
    if f.spec == "S7" and op.kind != "delta_weight":  # a forward or merge raising: the status says it
        rec["RECORDED_MESSAGE"] = re.sub(r"^get_delta_weight raised: ", "", d)[:60]
        return STATUS, rec, f"{what} runs without an exception"
    if f.spec == "S7":
        layer = scen.layer(op.names[0])
        m = re.match(r"get_delta_weight raised: (.*)", d)
        rec.update(LAYER=layer.name, RECORDED_MESSAGE=(m.group(1)[:60] if m else ""),
                   EXPERTS=(layer.experts, layer.fan_in, layer.fan_out) if layer.experts else ())
        return S7, rec, (f"{what}: get_delta_weight(a) of each active adapter equals B @ A * scaling "
                         f"of the full A and B shards")
    raise ValueError(f"cannot check {f.spec} findings with the libraries yet: {d}")


def s5(f, rec, what):
    m = re.match(r"ranks disagree on (.+?): rank \d+ ", f.detail)
    if m:
        field = m.group(1)
        kinds = [("active", r"active adapters$"), ("merged", r"(\S+) merged$"),
                 ("requires_grad", r"(\S+) S\.requires_grad$"), ("dtype", r"(\S+) dtype$")]
        for kind, pat in kinds:
            fm = re.match(pat, field)
            if fm and not field.startswith("saved "):
                rec.update(FIELD_KIND=kind, FIELD_OF=fm.group(1) if fm.groups() else "")
                return S5_DISAGREE, rec, f"after {what} every rank holds the same {field}"
    m = re.match(r"ranks hold different values of \{([^,}]+)", f.detail)
    if m:
        rec.update(FIELD_KIND="values", FIELD_OF=m.group(1))
        return S5_DISAGREE, rec, f"after {what} every rank holds the same values of {m.group(1)}"
    calls = re.findall(r"rank (\d+) in broadcast\(([^,]+), (\d+) (\w+)\)", f.detail)
    if f.status == "mismatch" and calls:
        rec.update(RECORDED_TENSOR=calls[0][1], RECORDED_CALLS=[f"{n} {d}" for _, _, n, d in sorted(calls)],
                   DTYPES={"torch.bfloat16": "bf16", "torch.float32": "fp32"})
        return S5_BROADCAST, rec, (f"{what}: every rank issues the same broadcasts (each state-dict entry of one "
                                   f"size and dtype on every rank), {calls[0][1]} included")
    if f.status in ("hang", "mismatch"):
        return S5_STUCK, rec, f"{what} completes on every rank (no collective left waiting or mismatched)"
    raise ValueError(f"cannot check this S5 finding with the libraries yet: {f.detail}")
