"""The op half of a recorded `.seq`: one rank's traced calls as `.seq` ops
(docs/guide/seq-format.md "Ops"), each an Op(text, at, raised)."""

from collections import namedtuple

Op = namedtuple("Op", "text at raised")

# The exceptions the `.seq` `expect error=` vocabulary names, by the text PEFT / torch raise.
_ERRORS = (
    ("RuntimeError: element 0 of tensors does not require grad", "no_grad_fn"),
    ("KeyError", "key_error"),
    ("ValueError", "value_error"),
    ("AssertionError", "assertion_error"),
)

_NOT_EXPRESSED = {
    "get_peft_model_state_dict": "get_peft_model_state_dict outside save_pretrained",
    "set_peft_model_state_dict": "set_peft_model_state_dict outside load_adapter",
}


def error_kind(raised):
    return next((kind for prefix, kind in _ERRORS if raised and raised.startswith(prefix)), None)


def _names(op, names):
    if not names:
        return op
    return f"{op} {names[0]}" if len(names) == 1 else f"{op} [{','.join(names)}]"


class OpWriter:
    def __init__(self, scen):
        self.scen = scen
        self.notes = []

    def _one(self, e, state):
        op, a = e["op"], e["args"]
        if op == "forward":
            return "forward" if a.get("grad") else "eval"
        if op in ("backward", "step", "zero_grad", "unmerge", "disable_enter", "disable_exit"):
            return op
        if op == "merge":
            return _names("merge", a.get("adapters"))
        if op == "set_adapter":
            return f"set_adapter {a['adapter']}"
        if op == "set_adapter_list":
            return f"set_adapter [{','.join(a['adapters'] or [])}]"
        if op == "delete_adapter":
            return f"delete_adapter {a['adapter']}"
        if op == "add_adapter":
            if a["adapter"] in self.scen.initial and not state["sharded"]:
                return None  # the scenario's adapter line adds it
            return f"add_adapter {a['adapter']}" if a["adapter"] in self.scen.deferred else None
        if op == "load_adapter":
            if a["adapter"] in self.scen.initial | self.scen.deferred:
                return f"load_adapter {a['adapter']} {'trainable' if a.get('trainable') else 'frozen'}"
            return None
        if op == "save_adapters":
            return _names("save_adapters", a.get("adapters"))
        if op == "gradient_sync":
            if a["module"] != "root":
                self.notes.append(f"set_requires_gradient_sync on {a['module']} (not the root) at {e['at']}")
                return None
            return f"gradient_sync {'on' if a['on'] else 'off'}"
        if op == "optimizer":
            if not state["optimizer"]:
                state["optimizer"] = True
                return None  # the scenario's `optimizer` line
            return "new_optimizer"
        if op == "save_model":
            form = "full" if a.get("full") else "sharded"
            if state["sharded"]:  # (a save before fully_shard is named, not recorded)
                state.setdefault("saved_keys", {})[form] = a.get("keys")
            return f"save_model {form}"
        if op == "load_model":
            # the `.seq` loads the last save of the form (plain: full tensors), so only a dict with its keys
            form = "plain" if a.get("plain") else "full" if a.get("full") else "sharded"
            keys = state.get("saved_keys", {}).get("sharded" if form == "sharded" else "full")
            if keys is not None and keys == a.get("keys"):
                return f"load_model {form}"
            call = "load_state_dict" if form == "plain" else "set_model_state_dict"
            self.notes.append(f"{call} at {e['at']}: a dict no recorded get_model_state_dict"
                              f"{'' if form == 'sharded' else ' (full)'} saved")
            return None
        if op == "merge_and_unload":
            return "merge_and_unload"
        if op == "generate":
            # `generate N`: N no_grad forwards, one per token the decode added (as the call returned them)
            n = a.get("new_tokens") or (a.get("max_new_tokens") if e.get("raised") else None)
            if n:
                return f"generate {n}"
            self.notes.append(f"generate at {e['at']}: the tokens it added were not read off its result")
            return None
        if op == "tracer_error":
            self.notes.append(f"the call at {e['at']}: the tracer failed on it ({a.get('what')})")
            return None
        if op in _NOT_EXPRESSED:
            self.notes.append(f"{_NOT_EXPRESSED[op]} at {e['at']}")
            return None
        self.notes.append(f"{op} at {e['at']}")
        return None

    def ops(self, events):
        out, state = [], {"sharded": False, "optimizer": False}
        for e in events:
            if e["op"] == "get_peft_model":
                continue
            if e["op"] == "fully_shard":
                if e["args"]["modules"] == ["root"] and not state["sharded"]:
                    state["sharded"] = True
                    if out:  # ops before the root's fully_shard: the model's prepare goes here
                        out.append(Op("prepare", e["at"], None))
                continue
            if e["op"] == "prepare":
                if e["args"].get("model") and not state["sharded"]:
                    self.notes.append(f"Accelerator.prepare at {e['at']} made no fully_shard call the tracer saw")
                continue
            text = self._one(e, state)
            if text is None:
                continue
            if not state["sharded"] and text.split()[0] not in ("load_adapter", "add_adapter", "set_adapter", "delete_adapter"):
                self.notes.append(f"{text} at {e['at']} before fully_shard")
                continue
            out.append(Op(text, e["at"], e.get("raised")))
        return fold_train_steps(out)


def fold_train_steps(ops):
    """`zero_grad, forward, backward, step` (none raising) is the `.seq`'s `train_step`."""
    out, i = [], 0
    shape = ("zero_grad", "forward", "backward", "step")
    while i < len(ops):
        window = ops[i:i + 4]
        if tuple(o.text for o in window) == shape and not any(o.raised for o in window):
            lines = []
            for o in window:
                if o.at not in lines:
                    lines.append(o.at)
            out.append(Op("train_step", join_lines(lines), None))
            i += 4
        else:
            out.append(ops[i])
            i += 1
    return out


def join_lines(ats):
    """`train.py:50`, `train.py:53` as `train.py:50,53` (one file), else comma-joined whole."""
    files = {a.rsplit(":", 1)[0] for a in ats}
    if len(files) == 1:
        return f"{files.pop()}:" + ",".join(a.rsplit(":", 1)[1] for a in ats)
    return ",".join(ats)
