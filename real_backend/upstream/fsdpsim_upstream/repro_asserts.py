"""The one check an exported repro (export.py) ends with: the finding's invariant as
a plain `assert` whose message states the expected and the actual value, read off
the minimal sequence's `# finding:` comment. Nothing is matched against a recorded
message: the assert holds once the libraries are fixed (exit 0) and fails while the
bug is there (exit 1). A finding the plain libraries cannot check raises ValueError
(fsdpsim exits 3).

Each plan returns (before, wrap, after): lines just before the checked op, whether
the op's exception is itself the violation (its lines go inside a try that turns it
into an AssertionError), and the lines after it. `w` is the script writer
(export.Writer): w.layer(name) is the script's expression for a layer, w.fsdp whether
the script shards at all."""
import re

from .repro_checks import adapters


def _names(xs):
    return "[" + ", ".join(repr(x) for x in xs) + "]"


def _grads_after(w):
    """The expression for {name: parameter} a gradient lands on: the shards FSDP registered
    at fully_shard (while a group is unsharded the module holds copies), plus what was added later."""
    if not w.fsdp:
        return "model.named_parameters()"
    return "{**dict(model.named_parameters()), **shards}.items()"


def s1(w, f, op):
    m = re.match(r"expected (?:gradients on (\{[^}]*\})|no gradients), got (\{[^}]*\}|\w+)", f.detail)
    if not m:
        raise ValueError(f"cannot read the gradient finding: {f.detail}")
    want = adapters(m.group(1) or "{}")
    # gradients of an earlier step are cleared first (the shards too: while a group is unsharded,
    # zero_grad reaches the copies only); before any backward there are none
    trained = any(o.kind in ("backward", "train_step") for o in w.ops[:f.step - 1])
    before = ([] if not trained else ["for p in shards.values():", "    p.grad = None"] if w.fsdp
              else ["model.zero_grad(set_to_none=True)"])
    after = [f"got = sorted({{n.split('.')[-2] for n, p in {_grads_after(w)} if '.lora_' in n and p.grad is not None}})",
             f"assert got == {_names(want)}, f\"expected {op.text()} to put gradients on the LoRA weights of "
             f"{_names(want)} only, got {{got}}\""]
    return before, None, after


def s2(w, f, op):
    m = re.match(r"layer (\S+) merged=\[[^\]]*\] but its (?:shard|unsharded copy) is (\w+)", f.detail)
    if not m or w.scen.layer(m.group(1)).experts:
        raise ValueError(f"cannot check this merged-weight finding with the libraries yet (Linear layers only): "
                         f"{f.detail}")
    w.w0 = m.group(1)
    full = "full" if w.fsdp else ""
    after = [f"layer = {w.layer(m.group(1))}",
             f"delta = sum(({full}(layer.lora_B[a].weight) @ {full}(layer.lora_A[a].weight) * layer.scaling[a] "
             f"for a in layer.merged_adapters), torch.zeros_like(w0))",
             f"error = ({full}(layer.get_base_layer().weight).detach() - w0 - delta).abs().max().item()",
             f"assert error < 1e-4, f\"expected {m.group(1)}.weight == its initial value + the deltas of "
             f"merged_adapters={{layer.merged_adapters}}, got a difference of {{error:.3g}}\""]
    return [], None, after


def s3(w, f, op):
    if not w.fsdp:
        raise ValueError("a flag lost at a reshard needs fully_shard")
    before = ["flags = {n: p.requires_grad for n, p in model.named_parameters() if '.lora_' in n}"]
    after = ["lost = {n: (flags[n], shards[n].requires_grad) for n in flags if n in shards and "
             "shards[n].requires_grad != flags[n]}",
             f"assert not lost, f\"expected the shards to keep the requires_grad set before {op.text()} "
             f"(before, after): {{lost}}\""]
    return before, None, after


def s5(w, f, op):
    m = re.match(r"ranks disagree on (.+?): rank \d+ ", f.detail)
    field = m.group(1) if m else ""
    value = None
    if field == "active adapters":
        value = "sorted(model.base_model.active_adapters)"
    elif m and re.match(r"(\S+) merged$", field):
        value = f"{w.layer(field.split()[0])}.merged_adapters"
    elif m and re.match(r"(\S+) (S\.requires_grad|dtype)$", field):
        what = "requires_grad" if "requires_grad" in field else "dtype"
        value = f"str({w.param(field.split()[0])}.{what})"
    vm = re.match(r"ranks hold different values of \{([^,}]+)", f.detail)
    if vm:  # a plain tensor on each rank: the largest difference from rank 0's
        w.rank_needed = True
        after = ["every = [None] * dist.get_world_size()",
                 f"dist.all_gather_object(every, {w.param(vm.group(1))}.detach())",
                 "diff = max((v - every[0]).abs().max().item() for v in every)",
                 f"assert diff == 0, f\"expected every rank to hold the same {vm.group(1)}, got a difference of "
                 f"{{diff:.3g}} between ranks\""]
        return [], None, after
    if value is not None:
        w.rank_needed = True
        after = ["every = [None] * dist.get_world_size()",
                 f"dist.all_gather_object(every, {value})",
                 f"assert all(v == every[0] for v in every), f\"expected every rank to hold the same {field}, "
                 f"got {{every}}\""]
        return [], None, after
    if f.status in ("mismatch", "cross_paired") and "broadcast(" in f.detail:  # broadcasts across dtypes: what each rank holds
        w.timeout = True
        after = ["every = [None] * dist.get_world_size()",
                 "dist.all_gather_object(every, {n: str(p.dtype) for n, p in model.named_parameters()})",
                 "assert all(d == every[0] for d in every), f\"expected every rank to hold each parameter in one "
                 "dtype, got {[{n: d for n, d in e.items() if d != every[0][n]} for e in every]}\""]
        return [], f"expected {op.text()} to complete on every rank", after
    if f.status in ("hang", "mismatch"):
        w.timeout = True
        return [], f"expected {op.text()} to complete on every rank", []
    raise ValueError(f"cannot check this rank-agreement finding with the libraries yet: {f.detail}")


def s6(w, f, op):
    if op.kind == "load_adapters":
        return [], f"expected {op.text()} to load what save_adapters wrote", []
    m = re.match(r"adapters (\{[^}]*\}) were not saved \(saved: (\{[^}]*\})\)", f.detail)
    if m and op.kind == "save_adapters":
        chosen = repr(list(op.names)) if op.names else "model.peft_config"  # save_pretrained's default: all
        after = [f"missing = sorted(a for a in {chosen} if not saved.get(a))",
                 "assert not missing, f\"expected a state dict with the tensors of every adapter to save, "
                 "got none for {missing}\""]
        return [], None, after
    if re.search(r"(\S+) saved (\d+) of (\d+) rows", f.detail) and op.kind == "save_adapters":
        after = ["partial = {k: f'{v.to_local().shape[0]} of {v.shape[0]} rows' for sd in saved.values() "
                 "for k, v in sd.items() if isinstance(v, DTensor)}",
                 "assert not partial, f\"expected get_peft_model_state_dict to return whole tensors (what "
                 "save_pretrained writes), got this rank's shard of {partial}\""]
        return [], None, after
    raise ValueError(f"cannot check this save/load finding with the libraries yet: {f.detail}")


def s7(w, f, op):
    if op.kind != "delta_weight" or f.status != "ok":
        return [], f"expected {op.text()} to run", []
    layer = w.scen.layer(op.names[0])
    if layer.experts:
        raise ValueError("cannot check the delta of an experts layer's values yet")
    prefix = f"base_model.model.{layer.name}"
    full = "full" if w.fsdp else ""
    src = "shards" if w.fsdp else "dict(model.named_parameters())"
    after = [f"want = {{a: {full}({src}[f'{prefix}.lora_B.{{a}}.weight']) @ {full}({src}[f'{prefix}.lora_A.{{a}}.weight'])"
             f" * layer.scaling[a] for a in deltas}}",
             "bad = [a for a in deltas if not torch.allclose(" + (f"{full}(deltas[a])" if full else "deltas[a]") +
             ", want[a], atol=1e-5)]",
             "assert not bad, f\"expected get_delta_weight(a) == B @ A * scaling of the weights the optimizer "
             "steps, got a different delta for {bad}\""]
    return [], None, after


def plan(w, f, op):
    """(before, wrap, after) for finding f at op `op`; wrap is the assert message's start when the
    op raising is the violation, else None."""
    if f.spec == "S1" and f.status != "ok":  # the op raised instead of training: that it runs is the check
        m = re.match(r"expected (?:gradients on (\{[^}]*\})|no gradients)", f.detail)
        return [], f"expected {op.text()} to run and train {_names(adapters(m.group(1) or '{}') if m else [])}", []
    if f.spec == "S4":
        return [], f"expected {op.text()} to run", []
    return {"S1": s1, "S2": s2, "S3": s3, "S5": s5, "S6": s6, "S7": s7}[f.spec](w, f, op)


def expectation(f, op):
    """The docstring's one-line `Expected:`."""
    d = f.detail
    if f.spec == "S1":
        m = re.match(r"expected (gradients on \{[^}]*\}|no gradients), got (.*?);", d)
        return f"{op.text()} puts {m.group(1)} (LoRA weights); it got {m.group(2)}" if m else d
    if f.spec == "S2":
        return "a layer's weight equals its initial value plus the deltas of the adapters it lists as merged"
    if f.spec == "S3":
        return "requires_grad set on the unsharded parameters reaches the shards the optimizer steps"
    if f.spec == "S5":
        return "every rank holds the same state and issues the same collectives"
    if f.spec == "S6":
        return "what is saved holds every selected adapter's whole tensors, and loads back"
    if f.spec == "S7":
        return "get_delta_weight returns B @ A * scaling of the weights the optimizer steps"
    return f"{op.text()} runs without an exception"
