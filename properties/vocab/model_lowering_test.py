"""The model's lowering of `model` scenarios (model/vocab/model_lowering.cpp) against what FSDP2
really packs (label upstream; the project's .venv python; argv[1]: fsdpsim). For each file of
corpus/models, the model's all-gathers (each group's first, rank 0, at the file's world) must name,
group by group, the parameters that torch's fully_shard packs into that group of the real
transformers model under PEFT, in its packing order, each with its shard size at that world: tied weights once,
biases where the module has them, Conv1D weights split along their input rows. The real model
is built from the file's `model` line (real_backend/upstream/fsdpsim_upstream/model_config.py),
wrapped by get_peft_model with the targets as written, and sharded at world 1 on gloo by the
calls the file makes: its fully_shard lines, or for `fully_shard_plan transformer_layers` the
units accelerate's fsdp2_prepare_model was measured to make (docs/design/known-limits.md#real-models)."""
import json
import math
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
CORPUS = os.path.join(ROOT, "corpus", "models")

from fsdpsim_upstream import model_config  # noqa: E402


def model_groups(path):
    """{group: [(param, numel), ...]}: each group's first all-gather on rank 0 in the model's run."""
    out = subprocess.run([FSDPSIM, "run", path, "--backend", "model", "--json", "--quiet"], capture_output=True,
                         text=True, timeout=120)
    groups = {}
    for line in out.stdout.splitlines():
        o = json.loads(line)
        if o.get("type") != "observation" or o["rank"] != 0:
            continue
        for c in o["collectives"]:
            if c["op"] == "all_gather":
                groups.setdefault(c["group"], list(c["parts"].items()))
    if not groups:
        raise AssertionError("no all-gather in " + path + ": " + out.stderr)
    return groups


def fsdpsim_name(fqn):
    """PEFT's parameter name as the observations spell it: no `base_model.model.` prefix, no
    `base_layer`, a LoRA Linear's weight named by its adapter."""
    n = fqn[len("base_model.model."):] if fqn.startswith("base_model.model.") else fqn
    n = n.replace(".base_layer.", ".")
    for part in (".lora_A.", ".lora_B."):
        if part in n and n.endswith(".weight"):
            n = n[: -len(".weight")]
    return n


def read_file(path):
    scen = {"shards": [], "adapters": [], "world": 1}
    with open(path) as f:
        lines = f.read().splitlines()
    # a deferred adapter is in the model at prepare where an add_adapter / load_adapter of it comes
    # before the `prepare` op (without one, prepare runs before every op)
    ops = [raw.split("#", 1)[0].split() for raw in lines[lines.index("---") + 1:]] if "---" in lines else []
    ops = [w for w in ops if w]
    before = ops[:next((i for i, w in enumerate(ops) if w[0] == "prepare"), 0)]
    added = {w[1] for w in before if w[0] in ("add_adapter", "load_adapter") and len(w) > 1}
    for raw in lines:
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "---":
            break
        if words[0] == "adapter" and "deferred" in words and words[1] not in added:
            continue
        if words[0] == "world":
            scen["world"] = int(words[1])
        elif words[0] == "model":
            line = subprocess.run([FSDPSIM, "scenario", path, "--quiet"], capture_output=True, text=True).stdout
            scen["model"] = model_config.parse_model_line(next(l for l in line.splitlines() if l.startswith("model ")))
        elif words[0] == "adapter":
            kv = dict(w.split("=", 1) for w in words[2:] if "=" in w)
            targets = kv["targets"].split(",")
            scen["adapters"].append((words[1], int(kv.get("r", 8)), "all-linear" if targets == ["all-linear"] else targets))
        elif words[0] == "fully_shard":
            raf = {"true": True, "false": False}.get(dict(w.split("=", 1) for w in words[2:] if "=" in w).get("reshard_after_forward"))
            scen["shards"].append((words[1].split(","), raf))
        elif words[0] == "fully_shard_plan":
            scen["plan"] = words[1]
    return scen


def plan_units(m, model):
    """accelerate 1.15's transformer-class units as measured: the decoder layers, the untied input
    embedding, the tail [gpt2's ln_f, tied embedding, lm_head] (reshard_after_forward=False), root."""
    gpt2 = m["family"] == "gpt2"
    emb = "transformer.wte" if gpt2 else "model.embed_tokens"
    layers = [n for n, mod in model.named_modules() if n.count(".") == 2 and n.split(".")[1] in ("layers", "h")]
    units = [([l], None) for l in layers]
    if not m["tie_embeddings"]:
        units.append(([emb], None))
    units.append(((["transformer.ln_f"] if gpt2 else []) + ([emb] if m["tie_embeddings"] else []) + ["lm_head"], False))
    return units + [(["root"], None)]


def real_groups(scen):
    import torch
    from peft import LoraConfig, get_peft_model
    from torch.distributed.fsdp import fully_shard

    model = model_config.build(scen["model"], seed=0)
    name, r, targets = scen["adapters"][0]
    pm = get_peft_model(model, LoraConfig(r=r, lora_alpha=r, target_modules=targets), adapter_name=name)
    for a_name, a_r, a_targets in scen["adapters"][1:]:
        pm.add_adapter(a_name, LoraConfig(r=a_r, lora_alpha=a_r, target_modules=a_targets))
    units = plan_units(scen["model"], model) if scen.get("plan") == "transformer_layers" else scen["shards"]
    base = pm.base_model.model
    for paths, raf in units:
        if paths == ["root"]:
            fully_shard(pm)
        else:
            mods = [base.get_submodule(p) for p in paths]
            fully_shard(mods if len(mods) > 1 else mods[0], reshard_after_forward=raf if raf is not None else True)
    fqn = {id(mod): n for n, mod in pm.named_modules()}
    groups = {}
    for paths, _ in units:
        mod = pm if paths == ["root"] else base.get_submodule(paths[0])
        for pg in mod._get_fsdp_state()._fsdp_param_groups:
            parts = []
            for fp in pg.fsdp_params:
                shape = fp._orig_size
                parts.append((fsdpsim_name(fqn[id(fp._module_info.module)] + "." + fp._module_info.param_name),
                              math.ceil(shape[0] / scen["world"]) * math.prod(shape[1:])))
            groups["root" if paths == ["root"] else paths[0]] = parts
    del torch
    return groups


class LoweringPacksWhatFsdpPacks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR")) as f:
            dist.init_process_group("gloo", init_method="file://" + f.name, rank=0, world_size=1)

    @classmethod
    def tearDownClass(cls):
        import torch.distributed as dist
        dist.destroy_process_group()

    def test_every_corpus_model_file(self):
        files = sorted(f for f in os.listdir(CORPUS) if f.endswith(".seq"))
        self.assertTrue(files)
        for f in files:
            with self.subTest(file=f):
                path = os.path.join(CORPUS, f)
                scen = read_file(path)
                if scen["world"] == 1:
                    continue  # one rank gathers nothing: no packing to read off the model's run
                self.assertEqual(model_groups(path), real_groups(scen))


if __name__ == "__main__":
    unittest.main()
