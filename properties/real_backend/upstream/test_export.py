"""`fsdpsim export --python` end to end: the script exported from a corpus finding, run under
torchrun on CPU, reproduces it (exit 1 through its assert, whose message states expected and
actual); with the profile's fix it exits 0. Run by ctest (label upstream) as
`test_export.py FSDPSIM_BINARY [unittest args]`."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

import torch_caches  # noqa: F401  (first: torch's caches in a directory removed at exit)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "real_backend", "upstream"))
from fsdpsim_upstream.repro_run import run_repro  # noqa: E402

FSDPSIM = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "build", "fsdpsim")
CORPUS = os.path.join(HERE, "..", "..", "..", "corpus", "regressions")


FINDINGS = os.path.join(HERE, "..", "..", "..", "docs", "findings")


def export(name, *flags, rc=0):
    """The script exported from a corpus file, or a docs/findings one given as `findings/NAME`
    (with flags), and fsdpsim's stderr."""
    kept = name.startswith("findings/")
    path = os.path.join(FINDINGS, name[len("findings/"):]) if kept else os.path.join(CORPUS, name)
    out = subprocess.run([FSDPSIM, "export", path, "--python", *flags], capture_output=True, text=True, timeout=120)
    assert out.returncode == rc, out.stderr
    return out.stdout, out.stderr


def run_script(text):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "repro.py")
        with open(path, "w") as f:
            f.write(text)
        return run_repro(path)


class Reproduces(unittest.TestCase):
    def assert_reproduces(self, name, got):
        script, _ = export(name)
        code, lines, err = run_script(script)
        self.assertEqual(code, 1, "\n".join(lines) + err)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn(got, lines[0])
        return script

    def test_seed000_set_adapter_on_the_unsharded_copy(self):
        script = self.assert_reproduces("seed000_merged_set_adapter_w2.seq", "expected the shards to keep the requires_grad")
        self.assertIn("model.set_adapter('other')", script)
        self.assertNotIn("S3", script)

    def test_seed004_optimizer_checkpoint_after_eval(self):
        self.assert_reproduces("seed004_eval_then_save_optimizer.seq",
                               "expected save_optimizer to run, it raised KeyError")

    def test_seed003_saved_adapters_hold_the_local_shard(self):
        script = self.assert_reproduces("seed003_save_adapters_upstream.seq", "2 of 4 rows")
        self.assertIn("torchrun --nproc_per_node=2", script)

    def test_status_finding_shape_error(self):
        self.assert_reproduces("seed002_one_expert_upstream.seq", "The size of tensor a")


# `unshard lin2` on the second member of fully_shard([lin0, lin2]), then set_adapter on the group's
# unsharded copy: the next train_step trains nothing, reached only if lin2.unshard() unshards the whole group.
GROUPED_MEMBER_SEQ = """world 2
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 8
layer lin2 8 2
adapter default r=8 alpha=8 targets=lin0,lin2 init=random
adapter other r=8 alpha=8 targets=lin0,lin2 init=random
fully_shard lin0,lin2 reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
---
unshard lin2
set_adapter other
train_step
"""


class GroupedMember(unittest.TestCase):
    def test_grouped_member_unshard_calls_the_members_own_method(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "grouped.seq")
            with open(path, "w") as f:
                f.write(GROUPED_MEMBER_SEQ)
            out = subprocess.run([FSDPSIM, "export", path, "--python", "--no-shrink"], capture_output=True, text=True,
                                 timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("model.base_model.model.lin2.unshard()", out.stdout)
        code, lines, err = run_script(out.stdout)
        self.assertEqual(code, 1, "\n".join(lines) + err)
        self.assertIn("gradients on the LoRA weights of ['other'] only", lines[0])

    def test_unshard_of_a_layer_a_later_adapter_wraps_reaches_its_fsdp_module(self):
        # a deferred adapter wraps lin0 after fully_shard: `model...lin0` is PEFT's LoRA layer, and
        # the FSDPModule its base_layer; calling unshard on the wrapper raised AttributeError (exit 2)
        script, _ = export("unshard_of_a_layer_a_later_adapter_wraps.seq", "--no-shrink")
        self.assertIn("getattr(model.base_model.model.lin0, 'base_layer', model.base_model.model.lin0).unshard()",
                      script)
        code, lines, err = run_script(script)
        self.assertEqual(code, 0, "\n".join(lines) + err)


class SessionTrigger(unittest.TestCase):
    """The script runs what the upstream session ran up to the finding, no more and no less."""

    def test_a_finding_before_prepare_is_checked_before_any_fully_shard(self):
        script, _ = export("export_load_adapter_before_prepare_placement.seq", "--no-shrink")
        self.assertNotIn("fully_shard(", script)
        code, lines, err = run_script(script)
        self.assertEqual(code, 1, "\n".join(lines) + err)
        self.assertIn("['torch.bfloat16', 'torch.float32']", lines[0])

    def test_the_saved_state_dict_is_a_copy_the_optimizer_cannot_move(self):
        script, _ = export("export_reload_into_merged_adapter_copies_the_save.seq", "--no-shrink")
        self.assertNotIn("torch.distributed", script)  # plain python: no FSDP needed
        code, lines, err = run_script(script)
        self.assertEqual(code, 1, "\n".join(lines) + err)
        self.assertIn("expected lin0.weight == its initial value + the deltas", lines[0])


class FourBit(unittest.TestCase):
    """A 4-bit base (`quant=`) written as the upstream backend builds it (session.py::linear4bit,
    quantize) and, on accelerate's path, its uint8 weight left out of every fully_shard as
    accelerate's fsdp2_prepare_model leaves it (ignored_params)."""

    def test_linear4bit_quantized_and_left_out_of_fully_shard(self):
        script, _ = export("../qlora/merge_after_prepare_raises.seq")
        self.assertIn("import bitsandbytes as bnb", script)
        self.assertIn("bnb.nn.Linear4bit(16, 8, compute_dtype=torch.float32, quant_type='nf4')", script)
        self.assertIn("net.is_loaded_in_4bit = True", script)
        self.assertLess(script.index("net.to('cpu')"), script.index("get_peft_model("))
        self.assertEqual(script.count("ignored_params=ignored"), 2)  # the child and the root


class Verdicts(unittest.TestCase):
    def test_with_the_fix_it_exits_0(self):
        script, err = export("seed000_merged_set_adapter_w2.seq", "--set", "set_adapter_reshard=unmerge_first")
        self.assertIn("has no finding", err)
        self.assertIn("# fix (unmerge, reshard every FSDP module", script)
        code, lines, err = run_script(script)
        self.assertEqual(code, 0, "\n".join(lines) + err)

    def test_broadcast_mismatch_of_ram_efficient_loading(self):
        script, _ = export("findings/placement-differs-across-ranks.seq", "--no-shrink")
        self.assertIn("fsdp2_load_full_state_dict(", script)
        code, lines, err = run_script(script)
        self.assertEqual(code, 1, "\n".join(lines) + err)
        self.assertIn("lin0.lora_A.other.weight': 'torch.float32'", lines[0])

    def test_inference_mode_fix_keeps_the_adapter_frozen(self):
        script, _ = export("findings/enable-ignores-inference-mode.seq", "--no-shrink",
                           "--set", "enable_inference_mode=respect")
        self.assertIn("# fix (enable_adapters keeps", script)
        code, lines, err = run_script(script)
        self.assertEqual(code, 0, "\n".join(lines) + err)

    def test_an_unwritten_fix_is_refused(self):
        _, err = export("findings/param-wrapper-single-expert.seq", "--no-shrink", "--set", "delta_weight_gather=on",
                        rc=3)
        self.assertIn("does not write the fix of delta_weight_gather=on", err)

    def test_public_apis_and_short(self):
        script, _ = export("seed000_merged_set_adapter_w2.seq", "--no-shrink")
        for private in ("_get_fsdp_state", "_fsdp_param", "sharded_param", "distributed_type", "Experts", "def "):
            self.assertNotIn(private, script)
        self.assertLess(len(script.splitlines()), 50)  # short enough to paste into an issue


if __name__ == "__main__":
    unittest.main()
