"""How an op ended, as the upstream ranks report it: an exception's observed status and
text (classify_exception), the harness's own refusals (HarnessError) and a release that lacks
an API the harness calls (CannotRun, harness_level). session.py re-exports these names."""
import os

from .collectives import CollectiveAbort


def classify_exception(e):
    """(status, message) of an exception an op raised: the known classes by
    type and torch's own text; anything else is reported as `exception` with
    its type and text, never mapped to the nearest known status."""
    if isinstance(e, CollectiveAbort):
        return e.status, e.message
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, KeyError):
        return "key_error", "KeyError: " + (text if text else "")
    if type(e).__name__ == "CheckpointError":
        # torch.utils.checkpoint's RuntimeError: never a shape_error, whatever its text names
        return "exception", f"CheckpointError: {text}"
    if isinstance(e, RuntimeError):
        if "does not require grad and does not have a grad_fn" in text:
            return "no_grad_fn", text
        if any(k in text for k in ("shape", "size mismatch", "must match the size", "einsum", "size of tensor")):
            return "shape_error", text
    if isinstance(e, ValueError):
        return "value_error", text
    if isinstance(e, AssertionError):  # torch _fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes
        # It prints a Python set of torch dtypes, whose order follows the objects' addresses and
        # so differs between rank processes: the observation names them sorted.
        import re
        return "assertion_error", re.sub(r"\{([^{}]*)\}", lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", text)
    return "exception", f"{type(e).__name__}: {text}"


class HarnessError(ValueError):
    """An op the sequence cannot run (fsdpsim's own check, worded as the model words it)."""


class CannotRun(RuntimeError):
    """The installed release lacks what the harness calls (an older API): the
    sequence cannot run on it. Not an observation: rank.py reports it as a
    `fail` whose message starts with "cannot run: " (fsdpsim versions)."""


def harness_level(e):
    """True when `e` is the harness calling an API this release lacks: an
    AttributeError/TypeError/ImportError/NameError raised in the harness's own
    frame (a missing attribute, an unexpected keyword), or by nn.Module's
    __getattr__ straight from it. Exceptions raised deeper, inside torch or
    PEFT, stay the op's observed status."""
    if not isinstance(e, (AttributeError, TypeError, ImportError, NameError)):
        return False
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    ours = os.path.dirname(os.path.abspath(__file__))
    # torch/nn/modules/module.py::Module.__getattr__ raises for a missing submodule or method
    while frames and frames[-1].co_name == "__getattr__" and frames[-1].co_filename.endswith(os.path.join("nn", "modules", "module.py")):
        frames.pop()
    return bool(frames) and os.path.dirname(os.path.abspath(frames[-1].co_filename)) == ours
