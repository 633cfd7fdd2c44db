"""`quant=` layers on the upstream backend (no ranks): the .seq reader keeps the options, the
base is a quantized bitsandbytes Linear4bit, and PEFT wraps it in lora.bnb.Linear4bit because
the model is marked loaded in 4-bit (without the mark it takes its plain Linear)."""
import os
import sys
import unittest

import torch_caches  # noqa: F401  (first: torch's caches in a directory removed at exit)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

from fsdpsim_upstream import rank, seqfile, session  # noqa: E402

TEXT = ("world 1\nseed 3\nprofile upstream\nlayer lin0 16 8 quant=nf4 compute_dtype=bf16\nlayer lin1 8 2 quant=fp4\n"
        "layer lin2 2 2\nadapter a r=2 alpha=2 targets=lin0,lin1 init=random\nfully_shard root\n---\ntrain_step\n")


class QuantLayerTest(unittest.TestCase):
    def test_reader_keeps_the_options(self):
        scen, _ = seqfile.parse(TEXT)
        got = [(l.name, l.quant, l.compute_dtype) for l in scen.layers]
        self.assertEqual(got, [("lin0", "nf4", "bf16"), ("lin1", "fp4", None), ("lin2", None, None)])
        shapes = rank.shapes_of(scen)
        self.assertEqual(shapes["lin0.weight"], [64, 1])  # 128 4-bit codes, two a byte
        self.assertEqual(shapes["lin2.weight"], [2, 2])

    def test_peft_dispatches_its_4bit_layer(self):
        import torch
        from peft import get_peft_model
        scen, _ = seqfile.parse(TEXT)
        net = session.quantize(session.Net(scen.layers).to(torch.float32), scen.layers)
        w = net.lin0.weight
        self.assertEqual((type(w).__name__, w.dtype, w.bnb_quantized, w.quant_type), ("Params4bit", torch.uint8, True, "nf4"))
        self.assertEqual(net.lin0.compute_dtype, torch.bfloat16)
        self.assertEqual(net.lin1.weight.quant_type, "fp4")
        pm = get_peft_model(net, session.lora_config(scen.adapters[0], layers=scen.layers), adapter_name="a")
        for name in ("lin0", "lin1"):
            lin = getattr(pm.base_model.model, name)
            self.assertEqual(f"{type(lin).__module__}.{type(lin).__name__}", "peft.tuners.lora.bnb.Linear4bit")


if __name__ == "__main__":
    unittest.main()
