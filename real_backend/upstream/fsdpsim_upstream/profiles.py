"""The profile switches as the upstream backend applies them. A switch value
that the installed libraries already do is a no-op here; any other value is
the fix the switch names, applied around the real call (the C++ side sends the
resolved switches with every sequence; this table serves `export` alone)."""

# What PEFT 0.21.2, accelerate 1.15.0 and torch 2.13.0 do natively.
NATIVE = {
    "set_adapter_reshard": "none",
    "disable_exit_reshard": "off",
    "optimizer_ckpt_reshard": "off",
    "enable_inference_mode": "ignore",
    "root_reshard_rule": "auto",
    "adapter_meta_check": "container",
    "delta_weight_gather": "off",
    "adapter_save_gather": "off",
    "adapter_save_selection": "all",
}

PROFILES = {
    "upstream": dict(NATIVE),
    # PEFT main as the seed-000 thread (#3872) describes it: units holding no
    # merged layer are resharded before set_adapter (not in PEFT 0.21.2)
    "peft-main-3872": dict(NATIVE, set_adapter_reshard="skip_merged"),
    "patched": dict(NATIVE, set_adapter_reshard="unmerge_first", disable_exit_reshard="on",
                    optimizer_ckpt_reshard="on", enable_inference_mode="respect",
                    adapter_meta_check="per_adapter", delta_weight_gather="on", adapter_save_gather="on"),
}


def resolve(profile, sets, switches=None):
    if switches:
        return dict(NATIVE, **switches)
    out = dict(PROFILES.get(profile, NATIVE))
    out.update(sets)
    return out
