"""A library call as data, for the op table (op_table.py): `[into = ]target.method(args)`
with the names an exported script uses (`model`, `model.base_model`, `opt`, `ctx`, `loss`).
The same Call is performed on a session's real objects (session.py) and printed as a line
of the script (export.py), so the two cannot name different calls. No torch here: the
export imports this without starting the libraries."""

# A keyword argument one side leaves out (its library default then applies).
OMIT = object()

# What each script name is on a session: the PEFT model, the optimizer (None when nothing
# was trainable), the entered disable_adapter() context, the pending forward's loss.
ROOTS = {
    "model": lambda s: s.pm,
    "opt": lambda s: s.opt,
    "ctx": lambda s: s.disable_ctx,
    "loss": lambda s: s.pending_loss,
}
# Whether the script has the name (an optional call's target): the writer knows at export time
# whether the optimizer is built.
SCRIPT_HAS = {"opt": lambda w: w.opt_made}


class Value:
    """An argument whose object and text differ: `value(session)` is what the executor passes,
    `text(writer)` what the script spells; either may be OMIT."""

    def __init__(self, value, text):
        self.value, self.text = value, text


def config(a, inference_mode=None):
    """The adapter's LoraConfig: the object (session.lora_config) and its text (Writer.config)."""
    def value(s):
        from .session import lora_config
        return lora_config(a, inference_mode, s.scen.layers)
    return Value(value, lambda w: w.config(a))


def autocast(a):
    """autocast_adapter_dtype: the executor passes it only when not PEFT's default True (releases
    before the argument, 0.15.x, then run every scenario that keeps it: PeftModel.add_adapter in
    peft/peft_model.py); the script writes it for a bf16 scenario, where it matters."""
    return Value(lambda s: OMIT if s.scen.autocast(a) is True else s.scen.autocast(a),
                 lambda w: OMIT if w.scen.dtype == "fp32" else str(w.scen.autocast(a)))


class Call:
    """One call. `optional`: made only where its target exists (the optimizer: none is built
    when nothing is trainable), on the session at run time, in the script as the writer knows it."""

    def __init__(self, target, method, *args, into=None, optional=False, **kwargs):
        self.target, self.method, self.args, self.kwargs = target, method, args, kwargs
        self.into, self.optional = into, optional

    # -- the executor ---------------------------------------------------------------------------
    def perform(self, s, names=None):
        """Makes the call on the session's objects; `names` binds script names first (a value
        not yet stored on the session) and receives `into`. Returns the call's result."""
        root, *path = self.target.split(".")
        obj = names[root] if names and root in names else ROOTS[root](s)
        if obj is None and self.optional:
            return None
        for attr in path:
            obj = getattr(obj, attr)
        args = [a.value(s) if isinstance(a, Value) else a for a in self.args]
        kwargs = {k: v.value(s) if isinstance(v, Value) else v for k, v in self.kwargs.items()}
        result = getattr(obj, self.method)(*args, **{k: v for k, v in kwargs.items() if v is not OMIT})
        if self.into is not None and names is not None:
            names[self.into] = result
        return result

    # -- the printer ----------------------------------------------------------------------------
    def line(self, w):
        """The script's line, or None where the writer has no such target (an optional call)."""
        root = self.target.split(".")[0]
        if self.optional and not SCRIPT_HAS.get(root, lambda w: True)(w):
            return None
        parts = [text_of(a, w) for a in self.args]
        parts += [f"{k}={t}" for k, t in ((k, text_of(v, w)) for k, v in self.kwargs.items()) if t is not OMIT]
        parts = [p for p in parts if p is not OMIT]
        head = f"{self.into} = " if self.into else ""
        return f"{head}{self.target}.{self.method}({', '.join(parts)})"


def text_of(arg, w):
    return arg.text(w) if isinstance(arg, Value) else repr(arg)


def refusal(message):
    """The harness's own refusal (outcomes.HarnessError), imported when raised: outcomes imports torch."""
    from .outcomes import HarnessError
    return HarnessError(message)


def perform_all(s, calls, names=None):
    for c in calls:
        c.perform(s, names)


def print_all(w, calls, ind):
    for c in calls:
        text = c.line(w)
        if text is not None:
            w.emit(ind + text)
