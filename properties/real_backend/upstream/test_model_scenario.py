"""A `model` scenario on the upstream backend (real_backend/upstream/fsdpsim_upstream/model_scenario.py;
label upstream, the project's .venv python): its dotted module paths read back as the model
backend names them (observe.model_name after observe.set_layers), and the layers read off a real
tiny model. Its own process: importing transformers adds attributes to nn.Module (test_names.py
reads them)."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_caches  # noqa: F401,E402  (first: torch's caches in a directory removed at exit)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "real_backend", "upstream"))


class DottedModulePaths(unittest.TestCase):
    """observe.model_name on a transformers model's parameter names: the layer is the longest
    scenario layer the name starts with, PEFT's wrappers and the adapter's `.weight` dropped after it."""

    def setUp(self):
        from fsdpsim_upstream import observe
        self.observe = observe
        self.addCleanup(observe.set_layers, [])

    def test_dotted_layers(self):
        o = self.observe
        o.set_layers(["model.layers.0.self_attn.q_proj", "model.layers.0.input_layernorm", "lm_head"])
        q = "base_model.model.model.layers.0.self_attn.q_proj"
        self.assertEqual(o.model_name(q + ".lora_A.default.weight"), "model.layers.0.self_attn.q_proj.lora_A.default")
        self.assertEqual(o.model_name(q + ".base_layer.weight"), "model.layers.0.self_attn.q_proj.weight")
        self.assertEqual(o.model_name(q + ".lora_B.base_layer.weight"), "model.layers.0.self_attn.q_proj.lora_B.base_layer")
        self.assertEqual(o.model_name("base_model.model.model.layers.0.input_layernorm.weight"),
                         "model.layers.0.input_layernorm.weight")
        o.set_layers(["lin0"])  # a layer scenario again: the first part is the layer
        self.assertEqual(o.model_name("base_model.model.lin0.base_layer.weight"), "lin0.weight")

    def test_layers_of_a_tiny_gpt2(self):
        from fsdpsim_upstream import model_config, model_scenario
        m = model_config.parse_model_line("model gpt2 hidden=16 intermediate=32 layers=1 heads=4 kv_heads=4 vocab=64 "
                                          "tie_embeddings=true seq_len=8")
        layers = {l.name: l for l in model_scenario.layers_of(model_config.build(m, 0))}
        self.assertNotIn("lm_head", layers)  # tied to transformer.wte: counted once, there
        c = layers["transformer.h.0.attn.c_attn"]  # a Conv1D: weight (in, out)
        self.assertEqual((c.fan_in, c.fan_out, c.shape, c.transposed), (16, 48, [16, 48], True))
        self.assertEqual((layers["transformer.ln_f"].fan_in, layers["transformer.ln_f"].fan_out), (1, 16))


if __name__ == "__main__":
    unittest.main()
