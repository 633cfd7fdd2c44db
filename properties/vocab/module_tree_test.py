"""The model's module trees (model/vocab/module_tree.cpp) against the installed transformers
(label upstream; the project's .venv python; argv[1]: fsdpsim). For every family at a few sizes,
`fsdpsim scenario --tree` of a `model` line must list what AutoModelForCausalLM.from_config builds
(real_backend/upstream/fsdpsim_upstream/model_config.py): named_modules() with class names,
named_parameters(remove_duplicate=False) with shapes, and which parameter is the same object as an
earlier one (the tied lm_head). Also: `scenario` prints the canonical line, the model runs the
file, and the backends and commands that do not refuse it with exit 3."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "properties", "real_backend", "upstream"))
import torch_caches  # noqa: F401,E402  (first: torch's caches in a directory removed at exit)
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))
FSDPSIM = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "fsdpsim")

from fsdpsim_upstream import model_config  # noqa: E402

# Small on purpose: a tiny model costs ~1-2 s to build. Each line varies what the tree depends on.
LINES = [
    "model llama hidden=16 intermediate=24 layers=2 heads=4 kv_heads=2 vocab=64",
    "model llama hidden=32 intermediate=40 layers=1 heads=8 kv_heads=8 vocab=50 tie_embeddings=true",
    "model qwen2 hidden=16 intermediate=24 layers=2 heads=4 kv_heads=1 vocab=64",
    "model mistral hidden=24 intermediate=16 layers=1 heads=6 kv_heads=2 vocab=40",
    "model gpt2 hidden=16 intermediate=40 layers=2 heads=4 kv_heads=4 vocab=64",
    "model gpt2 hidden=16 intermediate=24 layers=1 heads=2 kv_heads=2 vocab=30 tie_embeddings=false",
    "model qwen2_moe hidden=16 intermediate=8 layers=2 heads=4 kv_heads=2 vocab=64 experts=4 top_k=2",
]
TARGET = {"gpt2": "c_attn"}


def run(*args):
    r = subprocess.run([FSDPSIM, *args, "--quiet"], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def seq_file(tmp, line):
    path = os.path.join(tmp, "m.seq")
    fam = line.split()[1]
    with open(path, "w") as f:
        f.write("world 2\n%s\nadapter a targets=%s\nfully_shard_plan transformer_layers\n---\ntrain_step\n"
                % (line, TARGET.get(fam, "q_proj,v_proj")))
    return path


def real_tree(m):
    """The tree as `fsdpsim scenario --tree` prints it, read off the real model."""
    model = model_config.build(m, seed=0)
    lines = ["module %s %s" % (n or ".", type(mod).__name__) for n, mod in model.named_modules()]
    first = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        tied = first.setdefault(id(p), n)
        lines.append("param %s [%s]%s" % (n, ",".join(str(d) for d in p.shape), "" if tied == n else " tied=" + tied))
    return lines


class ModuleTrees(unittest.TestCase):
    def test_every_family_matches_transformers(self):
        with tempfile.TemporaryDirectory() as tmp:
            for line in LINES:
                with self.subTest(line=line):
                    path = seq_file(tmp, line)
                    code, printed = run("scenario", path)
                    self.assertEqual(code, 0, printed)
                    canonical = next(l for l in printed.splitlines() if l.startswith("model "))
                    code, tree = run("scenario", "--tree", path)
                    self.assertEqual(code, 0, tree)
                    self.assertEqual(tree.splitlines(), real_tree(model_config.parse_model_line(canonical)))

    def test_model_runs_it_and_the_others_refuse(self):
        """`check` and `run` run a `model` file on the model (model/vocab/model_lowering.cpp) and on
        upstream (fsdpsim_upstream/model_scenario.py); the C++ backend and the commands that take
        `layer` scenarios only refuse it at its `model` line, in one line, exit 3."""
        with tempfile.TemporaryDirectory() as tmp:
            path = seq_file(tmp, LINES[0])
            for args in (["run", path], ["check", path], ["run", path, "--backend", "model,upstream"]):
                with self.subTest(args=args):
                    code, out = run(*args)
                    self.assertEqual(code, 0, out)
            refusals = {("run", path, "--backend", "real"): "the C++ backend (real) does not implement `model` scenarios",
                        ("cost", path): "a `model` scenario runs with `fsdpsim check` and `run`"}
            for args, said in refusals.items():
                with self.subTest(args=args):
                    code, out = run(*args)
                    self.assertEqual(code, 3, out)
                    self.assertIn("%s:2:1: %s" % (path, said), out)
                    self.assertEqual(len(out.strip().splitlines()), 1, out)
            # what upstream does not run yet in a `model` file: refused at its line, the model alone runs it
            ram = os.path.join(tmp, "ram.seq")
            with open(path) as f, open(ram, "w") as g:
                g.write(f.read().replace("world 2\n", "world 2\nloading ram_efficient\n").replace("---\n", "---\nprepare\n"))
            code, out = run("run", ram, "--backend", "upstream")
            self.assertEqual(code, 3, out)
            self.assertIn("%s:2:1: the upstream backend does not run `loading ram_efficient`" % ram, out)
            self.assertEqual(run("run", ram, "--backend", "model")[0], 0)


if __name__ == "__main__":
    unittest.main()
