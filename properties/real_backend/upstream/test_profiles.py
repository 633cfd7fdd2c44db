"""The upstream backend's profile table (fsdpsim_upstream/profiles.py) against the
one the C++ side compiled in (`fsdpsim profiles --json`). Both come from
model/vocab/profiles.json, so this catches a broken reader on either side: a
Python loader that drops a `set`, misreads a column or a generator that bakes
in stale values. Plain python3 (profiles.py needs no torch).

Usage: test_profiles.py FSDPSIM"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "real_backend", "upstream"))
from fsdpsim_upstream import profiles  # noqa: E402


def cpp_table(fsdpsim):
    """{profile: {switch: value}} and the switch names in order, as the binary prints them."""
    out = subprocess.run([fsdpsim, "profiles", "--json"], check=True, capture_output=True, text=True).stdout
    lines = [json.loads(l) for l in out.splitlines() if l.strip()]
    names = [l["name"] for l in lines if l["type"] == "profile"]
    switches = [l for l in lines if l["type"] == "switch"]
    table = {p: {s["name"]: s["profiles"][p] for s in switches} for p in names}
    return table, [s["name"] for s in switches]


def differences(cpp, order, native, named):
    """What the Python side gets wrong, one line each ([] when it agrees)."""
    out = []
    if list(native) != order:
        out.append(f"switches {list(native)} != {order}")
    if set(named) != set(cpp):
        out.append(f"profiles {sorted(named)} != {sorted(cpp)}")
    for p in cpp:
        if named.get(p) != cpp[p]:
            out.append(f"profile {p}: python {named.get(p)} != C++ {cpp[p]}")
    if native != cpp.get("upstream"):
        out.append(f"NATIVE {native} != the upstream profile {cpp.get('upstream')}")
    return out


def main():
    cpp, order = cpp_table(sys.argv[1])
    failures = differences(cpp, order, profiles.NATIVE, profiles.PROFILES)
    for p in cpp:  # resolve() with no overrides is the profile itself
        if profiles.resolve(p, {}) != cpp[p]:
            failures.append(f"resolve({p!r}) != C++ {cpp[p]}")

    # The check can fail: a table whose peft-main-3872 loses its `set` must be caught.
    tmp = tempfile.mkdtemp()
    try:
        with open(profiles.TABLE_PATH) as f:
            table = json.load(f)
        for p in table["profiles"]:
            p["set"] = {}
        broken = os.path.join(tmp, "profiles.json")
        with open(broken, "w") as f:
            json.dump(table, f)
        if not differences(cpp, order, *profiles.load(broken)):
            failures.append("a table with every `set` dropped was not caught")
    finally:
        shutil.rmtree(tmp)

    for f in failures:
        print("FAIL:", f)
    print("profiles: python and C++ agree" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
