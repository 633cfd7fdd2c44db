"""Tests of the `checkpoint LAYER[,LAYER]` scenario line (hazard B7) on the
upstream backend: the layers wrapped in torch's checkpoint_wrapper before
fully_shard as accelerate wraps them, fsdpsim's parameter names without the
wrapper's `_checkpoint_wrapped_module.`, the CheckpointErrors a flag change
between forward and backward raises. `.venv/bin/python properties/real_backend/upstream/test_checkpoint.py`."""
import os
import sys
import unittest

import torch_caches  # noqa: F401  (first: torch's caches in a directory removed at exit)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

from fsdpsim_upstream import seqfile  # noqa: E402
from fsdpsim_upstream.pool import Pool  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from upstream_test_util import run_on_fresh_pool  # noqa: E402

# seed 000's topology (corpus/regressions/seed000_*_w2.seq) with lin0 checkpointed
HEADER = """world 2
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 2
adapter default r=8 alpha=8 targets=lin0,lin1 init=random
adapter other r={r} alpha=8 targets=lin0,lin1 init=random{deferred}
fully_shard lin0 reshard_after_forward={raf}
fully_shard root reshard_after_forward={raf}
optimizer trainable
checkpoint {ckpt}
---
"""

COUNT = ("CheckpointError: torch.utils.checkpoint: A different number of tensors was saved during the "
         "original forward and recomputation.")
METADATA = ("CheckpointError: torch.utils.checkpoint: Recomputed values for the following tensors have "
            "different metadata than during the forward pass.")


def seq(ops, r=8, raf="true", ckpt="lin0", deferred=""):
    return HEADER.format(r=r, raf=raf, ckpt=ckpt, deferred=deferred) + "\n".join(ops) + "\n"


def at(obs, step):
    """The observations of one step, rank 0 first."""
    return [o for o in obs if o["step"] == step]


class ParseTest(unittest.TestCase):
    def test_checkpoint_line(self):
        scen, _ = seqfile.parse(seq(["train_step"], ckpt="lin0,lin1"))
        self.assertEqual(scen.checkpoint, ["lin0", "lin1"])
        scen, _ = seqfile.parse(seq(["train_step"]).replace("checkpoint lin0\n", ""))
        self.assertEqual(scen.checkpoint, [])


class ClassifyTest(unittest.TestCase):
    def test_checkpoint_error_is_an_exception_never_a_shape_error(self):
        from torch.utils.checkpoint import CheckpointError
        from fsdpsim_upstream.session import classify_exception
        self.assertEqual(classify_exception(CheckpointError(COUNT.split(": ", 1)[1] + "\nNumber of tensors")),
                         ("exception", COUNT))
        self.assertEqual(classify_exception(CheckpointError("a shape differs")),
                         ("exception", "CheckpointError: a shape differs"))


class CheckpointPoolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pool = Pool(2, 20000)
        cls.pool.start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.close()

    def run_seq(self, text):
        obs, restarted = self.pool.run(text, None)
        self.assertFalse(restarted)
        return obs

    def test_names_and_groups_as_without_the_wrapper(self):
        obs = self.run_seq(seq(["train_step"]))
        for o in at(obs, 1):
            self.assertEqual(o["status"], "ok")
            self.assertEqual(o["grads"], ["default"])
            names = [p["name"] for p in o["params"]]
            self.assertIn("lin0.lora_A.default", names)
            self.assertFalse(any("_checkpoint" in n for n in names))
            self.assertEqual({p["name"]: p["group"] for p in o["params"]}["lin0.lora_B.other"], "lin0")
            self.assertEqual([l["group"] for l in o["layers"]], ["lin0", "root"])

    def test_merge_between_forward_and_backward(self):
        obs = self.run_seq(seq(["forward", "merge", "backward", "step", "train_step"]))
        for o in at(obs, 3):
            self.assertEqual((o["status"], o["message"], o["grads"]), ("exception", COUNT, []))
        for o in at(obs, 5):  # the adapters stay merged: nothing requires grad
            self.assertEqual(o["status"], "no_grad_fn")

    def test_other_rank_then_fsdp_stays_in_backward(self):
        # the raising backward leaves FSDP's root in PRE_BACKWARD (torch asks for reset_iter_state,
        # nobody calls it): later forwards skip FSDP's hooks, no shard receives a gradient
        obs = self.run_seq(seq(["forward", "set_adapter other", "backward", "train_step"], r=4))
        for o in at(obs, 3):
            self.assertEqual((o["status"], o["message"], o["grads"]), ("exception", METADATA, []))
        for o in at(obs, 4):
            self.assertEqual((o["status"], o["grads"]), ("ok", []))
            self.assertEqual([g["state"] for g in o["groups"]], ["UNSHARDED", "UNSHARDED"])

    def test_add_adapter_after_prepare_is_refused_by_peft(self):
        obs = self.run_seq(seq(["add_adapter other", "set_adapter other"], deferred=" deferred"))
        for o in at(obs, 1):
            self.assertEqual((o["status"], o["message"]), ("value_error", "Target module FSDPCheckpointWrapper("))
        for o in at(obs, 2):
            self.assertEqual((o["status"], o["message"]), ("value_error", "Adapter other not found."))

    def test_saved_adapters_lack_the_checkpointed_layer(self):
        # peft's get_peft_model_state_dict finds its keys by module path (with the wrapper's prefix)
        # while the state dict's keys have it stripped
        obs = self.run_seq(seq(["save_adapters"]))
        for o in at(obs, 1):
            self.assertEqual(sorted({s["name"].split(".")[0] for s in o["saved"]}), ["lin1"])


if __name__ == "__main__":
    unittest.main()
