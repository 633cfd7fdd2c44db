"""Names on the upstream backend (label `upstream`, the project's .venv python; argv[1]: fsdpsim).

- The parser's torch-derived name lists (model/vocab/name_rules.cpp) against the installed torch:
  every attribute of an nn.Module instance is refused as a layer and as an adapter, every attribute
  of an nn.ModuleDict as an adapter (exit 3, the message naming the rule).
- Scenarios of awkward but legal names (awkward_names*.seq) run on model,upstream and
  model,real to the model's own exit code, 0 or 1, never 4 (infrastructure failure)."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
FSDPSIM = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "build", "fsdpsim")
AWKWARD = [os.path.join(HERE, f) for f in ("awkward_names.seq", "awkward_names_more.seq")]
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def run(*args, timeout=600):
    """(exit code, stdout and stderr together)."""
    r = subprocess.run([FSDPSIM, *args, "--quiet"], capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def names_of(obj):
    return sorted(n for n in dir(obj) if NAME.fullmatch(n))


class TorchAttributesRefused(unittest.TestCase):
    def refused(self, kind, names, phrase):
        """One file per name, all checked by one `fsdpsim check DIR`: each must be BAD at the name."""
        with tempfile.TemporaryDirectory(prefix="fsdpsim-names-") as d:
            for i, n in enumerate(names):
                layer, adapter = (n, "a") if kind == "layer" else ("lin0", n)
                with open(os.path.join(d, f"{i:03d}.seq"), "w") as f:
                    f.write(f"layer {layer} 4 4\nadapter {adapter} targets={layer}\nfully_shard root\n---\ntrain_step\n")
            rc, out = run("check", d)
            self.assertEqual(rc, 3, out)
            lines = [l for l in out.splitlines() if l.startswith(("BAD", "PASS", "FAIL"))]
            self.assertEqual(len(lines), len(names), out)
            line, col = (1, 7) if kind == "layer" else (2, 9)
            for i, n in enumerate(names):
                want = f"BAD  {os.path.join(d, f'{i:03d}.seq')}:{line}:{col}: '{n}' is an attribute of {phrase}"
                self.assertTrue(any(l.startswith(want) for l in lines), f"{kind} {n!r} not refused by its rule")

    def test_module_attributes_refused_for_layers(self):
        self.refused("layer", names_of(nn.Module()), "every torch module")

    def test_module_dict_attributes_refused_for_adapters(self):
        self.refused("adapter", names_of(nn.ModuleDict()), "torch's nn.ModuleDict")


class AwkwardLegalNames(unittest.TestCase):
    def test_upstream_and_real_exit_as_the_model(self):
        for path in AWKWARD:
            rc_model, err = run("run", path, "--backend", "model")
            self.assertIn(rc_model, (0, 1), err)
            for backends in ("model,upstream", "model,real"):
                rc, err = run("run", path, "--backend", backends)
                self.assertEqual(rc, rc_model, f"{os.path.basename(path)} --backend {backends}: exit {rc}, "
                                 f"the model's {rc_model}\n{err}")


if __name__ == "__main__":
    unittest.main()
