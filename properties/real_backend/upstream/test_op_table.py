"""The upstream backend's op table (fsdpsim_upstream/op_table.py), without torch: every op
kind of the vocabulary (model/vocab/op.hpp, FSDPSIM_OPS) has exactly one row and no row names
another kind; every row prints script lines; and a row's library calls (op_calls.Call) are
the same call whether the session performs them or the export prints them. Plain python3:
run by ctest (label unit) as `test_op_table.py [unittest args]`."""
import collections
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))
from fsdpsim_upstream import export, op_calls, op_table, profiles, seqfile  # noqa: E402

# The writer asks torch which names nn.Sequential reserves; this scenario's names are none of
# them, and without torch the test runs wherever python3 does.
export.reserved_names = lambda: {"forward", "to"}

SEQ = """world 2
seed 3
layer lin0 6 8
layer lin1 8 2
adapter a r=2 alpha=4 targets=lin0,lin1 init=random
adapter b r=2 alpha=4 targets=lin1 init=random deferred
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=true
---
"""

# One op of each kind, as the .seq grammar writes it.
OPS = ["forward", "eval", "backward", "step", "train_step", "zero_grad", "merge", "merge [a]", "unmerge",
       "set_adapter a", "set_adapter [a]", "disable_enter", "disable_exit", "add_adapter b",
       "load_adapter b trainable", "delete_adapter b", "reshard", "unshard lin0", "state_dict",
       "save_optimizer", "load_optimizer", "save_adapters", "load_adapters", "delta_weight lin0", "prepare",
       "new_optimizer", "gradient_sync off", "save_model full", "load_model plain", "generate 2", "merge_and_unload"]


def vocabulary():
    """The op kinds' names in FSDPSIM_OPS, the X-macro every C++ side expands."""
    with open(os.path.join(ROOT, "model", "vocab", "op.hpp")) as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("#define FSDPSIM_OPS(X)"))
    body = []
    for line in lines[start:]:
        body.append(line)
        if not line.rstrip().endswith("\\"):
            break
    return re.findall(r'X\(\w+, "(\w+)"\)', "\n".join(body))


class Recorder:
    """Stands for a library object: records every call made through it, as the script would spell it."""

    def __init__(self, path, log):
        self.path, self.log = path, log

    def __getattr__(self, name):
        return Recorder(f"{self.path}.{name}", self.log)

    def __call__(self, *args, **kwargs):
        parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
        self.log.append(f"{self.path}({', '.join(parts)})")
        return Recorder("<result>", self.log)


class FakeSession:
    def __init__(self, scen, log):
        self.scen = scen
        self.pm, self.opt = Recorder("model", log), Recorder("opt", log)
        self.disable_ctx, self.pending_loss = Recorder("ctx", log), Recorder("loss", log)


def writer(scen, ops):
    w = export.Writer(scen, ops, profiles.resolve(scen.profile, scen.sets), None)
    w.last_save = 1  # load_adapters prints only after a save
    return w


class OpTable(unittest.TestCase):
    def test_every_vocabulary_op_has_exactly_one_row(self):
        vocab = vocabulary()
        self.assertGreaterEqual(len(vocab), 20, "FSDPSIM_OPS not found in model/vocab/op.hpp")
        rows = collections.Counter(r.kind for r in op_table.ROWS)
        self.assertEqual({k: n for k, n in rows.items() if n != 1}, {}, "op kinds with more than one row")
        self.assertEqual(sorted(set(vocab) - set(rows)), [], "op kinds of the vocabulary without a row")
        self.assertEqual(sorted(set(rows) - set(vocab)), [], "rows for op kinds the vocabulary does not have")
        self.assertEqual(set(op_table.ROW), set(rows))

    def test_ops_cover_the_vocabulary(self):
        self.assertEqual(sorted({seqfile._op(o.split()).kind for o in OPS}), sorted(vocabulary()))

    def test_every_row_prints_lines(self):
        scen, _ = seqfile.parse(SEQ)
        for text in OPS:
            op = seqfile._op(text.split())
            w = writer(scen, [op])
            w.op_body(op, "    ")
            self.assertTrue(w.lines, f"`{text}` printed nothing")
            self.assertTrue(all(l.startswith("    ") for l in w.lines), f"`{text}` lost the indent: {w.lines}")

    def test_unknown_op_is_refused_by_both_sides(self):
        scen, _ = seqfile.parse(SEQ)
        op = seqfile.Op(kind="frobnicate")
        with self.assertRaisesRegex(ValueError, "does not support `frobnicate`"):
            writer(scen, [op]).op_body(op, "")

    def test_a_rows_calls_are_the_same_performed_and_printed(self):
        """Performed on recorders, each call of every row whose arguments are plain values is the
        script's line (an `into` result is then known by its name); one with an argument that differs
        by side (a LoraConfig object or its text) names the same method."""
        scen, _ = seqfile.parse(SEQ)
        checked = 0
        for text in OPS:
            op = seqfile._op(text.split())
            w = writer(scen, [op])
            for c in op_table.ROW[op.kind].calls(scen, op):
                line = c.line(w)
                printed = line.split(" = ", 1)[1] if c.into else line
                if any(isinstance(a, op_calls.Value) for a in (*c.args, *c.kwargs.values())):
                    self.assertTrue(printed.startswith(f"{c.target}.{c.method}("), printed)
                    continue
                log = []
                names = {}
                c.perform(FakeSession(scen, log), names)
                self.assertEqual(log, [printed], f"`{text}`")
                if c.into:
                    self.assertIsInstance(names[c.into], Recorder)
                checked += 1
        self.assertGreaterEqual(checked, 12)

    def test_optional_call_is_skipped_on_both_sides_without_its_target(self):
        scen, _ = seqfile.parse(SEQ)
        op = seqfile._op(["zero_grad"])
        w = writer(scen, [op])
        w.opt_made = False
        w.op_body(op, "")
        self.assertEqual(w.lines, ["model.zero_grad(set_to_none=True)"])
        log = []
        s = FakeSession(scen, log)
        s.opt = None
        op_calls.perform_all(s, op_table.ROW["zero_grad"].calls(scen, op))
        self.assertEqual(log, ["model.zero_grad(set_to_none=True)"])

    def test_omitted_keyword_is_left_out_of_the_line(self):
        w = type("W", (), {"opt_made": True})()
        c = op_calls.Call("model", "f", 1, k=op_calls.Value(lambda s: 2, lambda w: op_calls.OMIT), j="x")
        self.assertEqual(c.line(w), "model.f(1, j='x')")


if __name__ == "__main__":
    unittest.main()
