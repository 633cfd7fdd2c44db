"""The record writer's pure parts (plain python3, no torch): loop cutting, train_step folding,
rank merging with `@R` and error expectations. Usage: writer_test.py SOURCE_DIR"""

import sys
import unittest

sys.path.insert(0, sys.argv.pop(1) + "/real_backend/upstream")
from fsdpsim_upstream.record.loops import cut_loops  # noqa: E402
from fsdpsim_upstream.record.ops import Op, OpWriter, fold_train_steps  # noqa: E402
from fsdpsim_upstream.record.scenario import Scenario, _model_line  # noqa: E402
from fsdpsim_upstream.record.ranks import merge_ranks  # noqa: E402


def ops(*texts, at="t.py:1"):
    return [Op(t, at, None) for t in texts]


class Loops(unittest.TestCase):
    def test_a_loop_past_steps_is_cut_and_named(self):
        body = ops("train_step", "eval")
        out, header = cut_loops(ops("merge") + body * 5 + ops("unmerge"), 2)
        self.assertEqual([o.text for o in out], ["merge"] + ["train_step", "eval"] * 2 + ["unmerge"])
        self.assertEqual(header, ["loop of 2 ops (t.py:1): 5 iterations ran, the first 2 kept (--steps 2)"])

    def test_a_loop_within_steps_is_kept(self):
        seq = ops("forward", "backward") * 3
        self.assertEqual(cut_loops(seq, 3), (seq, []))

    def test_an_iteration_that_raised_stays(self):
        seq = ops("train_step") * 4 + [Op("train_step", "t.py:1", "KeyError: 'x'")]
        out, _ = cut_loops(seq, 2)
        self.assertEqual(len(out), 3)
        self.assertEqual(out[-1].raised, "KeyError: 'x'")


class Fold(unittest.TestCase):
    def test_zero_grad_forward_backward_step_is_train_step(self):
        seq = [Op("zero_grad", "t.py:5", None), Op("forward", "t.py:6", None), Op("backward", "t.py:7", None),
               Op("step", "t.py:8", None)]
        self.assertEqual(fold_train_steps(seq), [Op("train_step", "t.py:5,6,7,8", None)])

    def test_a_raising_backward_is_not_folded(self):
        seq = ops("zero_grad", "forward") + [Op("backward", "t.py:1", "RuntimeError: x")] + ops("step")
        self.assertEqual([o.text for o in fold_train_steps(seq)], ["zero_grad", "forward", "backward", "step"])


class Notes(unittest.TestCase):
    def test_a_tracer_failure_is_named_not_dropped(self):
        w = OpWriter(Scenario())
        events = [{"op": "fully_shard", "at": "t.py:2", "args": {"modules": ["root"]}},
                  {"op": "tracer_error", "at": "t.py:3", "args": {"what": "KeyError: 'x'"}},
                  {"op": "generate", "at": "t.py:4", "args": {"new_tokens": None, "max_new_tokens": 3}}]
        self.assertEqual(w.ops(events), [])
        self.assertEqual(w.notes, ["the call at t.py:3: the tracer failed on it (KeyError: 'x')",
                                   "generate at t.py:4: the tokens it added were not read off its result"])

    def test_generate_is_one_forward_per_new_token_and_merge_and_unload_an_op(self):
        w = OpWriter(Scenario())
        events = [{"op": "fully_shard", "at": "t.py:2", "args": {"modules": ["root"]}},
                  {"op": "generate", "at": "t.py:3", "args": {"new_tokens": 5, "max_new_tokens": 8}},
                  {"op": "generate", "at": "t.py:4", "args": {"new_tokens": None, "max_new_tokens": 2},
                   "raised": "RuntimeError: x"},
                  {"op": "merge_and_unload", "at": "t.py:5", "args": {}}]
        self.assertEqual(w.ops(events), [Op("generate 5", "t.py:3", None), Op("generate 2", "t.py:4", "RuntimeError: x"),
                                         Op("merge_and_unload", "t.py:5", None)])
        self.assertEqual(w.notes, [])


class StateDicts(unittest.TestCase):
    def test_a_load_of_a_recorded_saves_keys_is_load_model_of_its_form(self):
        w = OpWriter(Scenario())
        ev = lambda op, at, **a: {"op": op, "at": f"t.py:{at}", "args": a}
        events = [ev("fully_shard", 2, modules=["root"]), ev("save_model", 3, full=True, keys="k1"),
                  ev("save_model", 4, full=False, keys="k2"), ev("load_model", 5, plain=True, keys="k1"),
                  ev("load_model", 6, full=False, keys="k2"), ev("load_model", 7, full=True, keys="k1"),
                  ev("load_model", 8, full=True, keys="other"), ev("load_model", 9, full=False, keys="k1")]
        self.assertEqual([o.text for o in w.ops(events)], ["save_model full", "save_model sharded", "load_model plain",
                                                           "load_model sharded", "load_model full"])
        self.assertEqual(w.notes, ["set_model_state_dict at t.py:8: a dict no recorded get_model_state_dict (full) saved",
                                   "set_model_state_dict at t.py:9: a dict no recorded get_model_state_dict saved"])


class ModelLine(unittest.TestCase):
    def test_gpt2_sizes_from_its_own_names_and_its_default_mlp(self):
        tree = {"model_type": "gpt2", "config": {"n_embd": 16, "n_inner": None, "n_layer": 1, "n_head": 4,
                                                 "vocab_size": 64, "tie_word_embeddings": True}}
        fwd = [{"op": "forward", "args": {"grad": True, "tokens": 8}}]
        self.assertEqual(_model_line(tree, fwd), "model gpt2 hidden=16 intermediate=64 layers=1 heads=4 kv_heads=4 "
                                                  "vocab=64 tie_embeddings=true seq_len=8")

    def test_qwen2_moe_names_its_experts_and_an_unset_kv_heads_is_heads(self):
        tree = {"model_type": "qwen2_moe", "config": {"hidden_size": 32, "intermediate_size": 16, "num_hidden_layers": 2,
                                                      "num_attention_heads": 4, "vocab_size": 64, "num_experts": 4,
                                                      "num_experts_per_tok": 2, "tie_word_embeddings": False}}
        self.assertEqual(_model_line(tree, []), "model qwen2_moe hidden=32 intermediate=16 layers=2 heads=4 kv_heads=4 "
                                                "vocab=64 tie_embeddings=false experts=4 top_k=2")

    def test_an_unknown_family_or_a_missing_size_is_layer_lines(self):
        self.assertIsNone(_model_line({"model_type": "bert", "config": {"hidden_size": 8}}, []))
        self.assertIsNone(_model_line({"model_type": "llama", "config": {"hidden_size": 8}}, []))


class Ranks(unittest.TestCase):
    def test_same_ops_are_written_once(self):
        self.assertEqual(merge_ranks({0: ops("eval"), 1: ops("eval")}), ["eval".ljust(30) + "  # t.py:1"])

    def test_a_rank_only_op_gets_its_rank(self):
        lines = merge_ranks({0: ops("eval", "set_adapter b", "train_step"), 1: ops("eval", "train_step")})
        self.assertEqual([l.split("#")[0].strip() for l in lines], ["eval", "@0 set_adapter b", "train_step"])

    def test_an_error_on_every_rank_is_expected(self):
        e = "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn"
        lines = merge_ranks({0: [Op("backward", "t.py:9", e)], 1: [Op("backward", "t.py:9", e)]})
        self.assertTrue(lines[0].startswith("backward  expect error=no_grad_fn"), lines)

    def test_an_error_on_one_rank_names_it(self):
        lines = merge_ranks({0: [Op("merge", "t.py:9", "ValueError: v")], 1: [Op("merge", "t.py:9", None)]})
        self.assertTrue(lines[0].startswith("merge  expect @0 error=value_error"), lines)


if __name__ == "__main__":
    unittest.main()
