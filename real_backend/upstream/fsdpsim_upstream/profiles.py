"""The profile switches as the upstream backend applies them. A switch value
that the installed libraries already do is a no-op here; any other value is
the fix the switch names, applied around the real call (the C++ side sends the
resolved switches with every sequence; this table serves `export` alone).

The table is model/vocab/profiles.json, the file the C++ side compiles in
(model/vocab/profile_table.cmake): read here at import, so the two cannot
disagree. Exported scripts get the resolved values written in, not this module."""

import json
import os

TABLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                          "model", "vocab", "profiles.json")


def load(path=TABLE_PATH):
    """(NATIVE, PROFILES) from the table: NATIVE is its upstream column, what PEFT
    0.21.2, accelerate 1.15.0 and torch 2.13.0 do natively; each profile starts
    from the upstream or patched column and applies its `set`."""
    with open(path) as f:
        table = json.load(f)
    columns = {c: {s["name"]: s[c] for s in table["switches"]} for c in ("upstream", "patched")}
    profiles = {p["name"]: dict(columns[p["from"]], **p["set"]) for p in table["profiles"]}
    return columns["upstream"], profiles


NATIVE, PROFILES = load()


def resolve(profile, sets, switches=None):
    if switches:
        return dict(NATIVE, **switches)
    out = dict(PROFILES.get(profile, NATIVE))
    out.update(sets)
    return out
