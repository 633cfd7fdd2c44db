"""Candidate PEFT fixes the upstream backend applies around the real calls when their profile
switch asks for them (model/vocab/profiles.json): the same change as the patch under
docs/findings/, made at run time so the pinned wheel stays untouched."""
import contextlib


@contextlib.contextmanager
def add_adapter_rollback(s, name):
    """add_adapter_rollback=on, docs/findings/half-added-adapter.patch: when the injection raises,
    peft/peft_model.py::PeftModel.add_adapter's rollback (which drops the config) also deletes the
    adapter from every tuner layer holding it and restores the requires_grad flags taken before."""
    if s.sw.get("add_adapter_rollback", "off") != "on":
        yield
        return
    from peft.tuners.tuners_utils import BaseTunerLayer
    before = [(p, p.requires_grad) for p in s.pm.parameters()]
    try:
        yield
    except Exception:
        for m in s.pm.modules():
            if isinstance(m, BaseTunerLayer) and name in m._all_available_adapter_names():
                m.delete_adapter(name)
        for p, requires_grad in before:
            p.requires_grad = requires_grad
        raise

