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


@contextlib.contextmanager
def single_expert_delta(s):
    """single_expert_delta=param_layout, docs/findings/param-wrapper-single-expert.patch: while an
    op runs, peft/tuners/lora/layer.py::ParamWrapper.get_delta_weight returns a one-expert 3-d
    parameter's delta in the parameter's layout, (1, in, out) (or (1, out, in) when swapped), not
    Linear's (out, in). The class method is swapped for the op only (a process runs one session)."""
    if s.sw.get("single_expert_delta", "linear") != "param_layout":
        yield
        return
    from peft.tuners.lora.layer import ParamWrapper
    pinned = ParamWrapper.get_delta_weight

    def in_param_layout(self, adapter_name, *args, **kwargs):
        delta = pinned(self, adapter_name, *args, **kwargs)
        if self.num_experts == 1 and self.get_param().ndim == 3:
            delta = (delta if self._did_swap_in_out_features else delta.T).unsqueeze(0)
        return delta

    ParamWrapper.get_delta_weight = in_param_layout
    try:
        yield
    finally:
        ParamWrapper.get_delta_weight = pinned
