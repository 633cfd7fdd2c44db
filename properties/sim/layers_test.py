#!/usr/bin/env python3
"""sim/'s layers (docs/design/architecture.md, "Source layout"): every source file
stands in a layer folder, and a layer includes only the layers below it."""
import os
import re
import sys

# Each layer and the layers it may include (itself aside).
BELOW = {
    "core": set(),
    "findings": {"core"},
    "release": {"core", "findings"},
    "report": {"core", "findings"},
    "cli": {"core", "findings", "release", "report"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"sim/([^/"]+)/')


def problems(sim_dir):
    out = []
    for name in sorted(os.listdir(sim_dir)):
        path = os.path.join(sim_dir, name)
        if os.path.isfile(path) and name != "CMakeLists.txt":
            out.append("sim/%s: a file outside every layer folder (%s)" % (name, ", ".join(BELOW)))
        elif os.path.isdir(path) and name not in BELOW:
            out.append("sim/%s/: not a layer (%s)" % (name, ", ".join(BELOW)))
    for layer, allowed in BELOW.items():
        for root, _, files in os.walk(os.path.join(sim_dir, layer)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.join(root, f)
                with open(path, encoding="utf-8") as src:
                    for n, line in enumerate(src, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != layer and m.group(1) not in allowed:
                            rel = os.path.relpath(path, os.path.dirname(sim_dir))
                            out.append("%s:%d: the %s layer includes sim/%s/ (it may include %s)"
                                       % (rel, n, layer, m.group(1), ", ".join(sorted(allowed)) or "no other layer"))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: layers_test.py SOURCE_DIR")
    found = problems(os.path.join(sys.argv[1], "sim"))
    for p in found:
        print(p)
    print("sim layers: %s" % ("%d upward include(s) or stray file(s)" % len(found) if found else "every include points down"))
    sys.exit(1 if found else 0)
