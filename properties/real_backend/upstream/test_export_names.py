"""`fsdpsim export --python` with every kind of name the .seq grammar accepts
([A-Za-z_][A-Za-z0-9_-]*): Python keywords (`class`), names with '-' (`lin-0`), names
Python mangles inside a class (`__w`), names nn.Module reserves (`forward`, `to`). Each
export compiles; a clean sequence's script runs to exit 0 (never a false "reproduces")
and a finding's to exit 1 through its assert. The docstring names the --out file in its
`Run:` line and claims no confirmation the export did not make. Run by ctest (label
upstream) as `test_export_names.py FSDPSIM_BINARY [unittest args]`."""
import os
import py_compile
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "real_backend", "upstream"))
from fsdpsim_upstream.repro_run import run_repro  # noqa: E402

FSDPSIM = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "build", "fsdpsim")
AWKWARD = ["class", "lin-0", "__w", "None", "lambda", "forward", "to", "_", "__init__", "a-b-", "x" * 64]


def seq(layer0, layer1, adapter0, adapter1, body):
    return f"""world 1
seed 0
profile upstream
layer {layer0} 6 8
layer {layer1} 8 2
adapter {adapter0} r=2 alpha=4 targets={layer0},{layer1} init=random
adapter {adapter1} r=2 alpha=4 targets={layer1} init=random
fully_shard {layer0} reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
---
{body}
"""


def export(d, text, out_name="repro.py"):
    """(fsdpsim's exit code, the script's path, its stderr)."""
    path = os.path.join(d, "in.seq")
    with open(path, "w") as f:
        f.write(text)
    out = os.path.join(d, out_name)
    r = subprocess.run([FSDPSIM, "export", path, "--python", "--out", out], capture_output=True, text=True, timeout=300)
    return r.returncode, out, r.stderr


class Names(unittest.TestCase):
    def test_every_accepted_name_compiles(self):
        # each name once as a layer and once as an adapter (a layer and an adapter may not share a
        # name: the parser refuses that, docs/guide/seq-format.md)
        accepted = []
        with tempfile.TemporaryDirectory() as d:
            for name in AWKWARD:
                for text in (seq(name, "l1", "p", "q", "train_step\nsave_adapters"),
                             seq("l0", "l1", name, "q", "train_step\nsave_adapters")):
                    rc, out, err = export(d, text)
                    self.assertIn(rc, (0, 3), err)
                    if rc == 3:  # the parser refuses it, with its reason: nothing to export
                        self.assertIn(name, err)
                        continue
                    accepted.append(name)
                    py_compile.compile(out, doraise=True)  # a SyntaxError fails the test
                    os.remove(out)
        for core in ("class", "lin-0", "__w"):
            self.assertIn(core, accepted)

    def test_clean_sequence_runs_to_exit_0(self):
        text = seq("class", "lin-0", "__w", "a-b-", "train_step\nset_adapter a-b-\ntrain_step\nsave_adapters\n"
                   "delta_weight class")
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = export(d, text, "clean-names.py")
            self.assertEqual(rc, 0, err)
            with open(out) as f:
                script = f.read()
            self.assertIn("Run: torchrun --nproc_per_node=1 clean-names.py ", script)
            self.assertNotIn("Confirmed on", script)
            code, lines, err = run_repro(out)
            self.assertEqual(code, 0, "\n".join(lines) + err)

    def test_finding_with_awkward_names_reproduces_by_its_assert(self):
        # set_adapter on the unsharded copy: the next train_step trains nothing (a real finding)
        text = seq("class", "lin-0", "__w", "lambda", "unshard\nset_adapter lambda\ntrain_step")
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = export(d, text)
            self.assertEqual(rc, 0, err)
            code, lines, err = run_repro(out)
            self.assertEqual(code, 1, "\n".join(lines) + err)
            self.assertIn("lambda", lines[0])


if __name__ == "__main__":
    unittest.main()
