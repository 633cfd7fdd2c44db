"""The `LoraConfig(...)` text of an adapter, as an exported repro (export.py)
writes it."""


def lora_config_text(a, layers):
    experts = {l.name for l in layers if l.experts}
    mods = [t for t in a.targets if t not in experts]
    params = [f"{t}.weight" for t in a.targets if t in experts]
    out = f"LoraConfig(r={a.r}, lora_alpha={a.alpha}"
    if mods:
        out += f", target_modules={mods!r}"
    if params:
        out += f", target_parameters={params!r}"
    if a.init != "zero":
        out += ", init_lora_weights=False"
    if a.modules_to_save:
        out += f", modules_to_save={list(a.modules_to_save)!r}"
    if a.inference_mode:
        out += ", inference_mode=True"
    if a.use_dora:
        out += ", use_dora=True"
    return out + ")"
