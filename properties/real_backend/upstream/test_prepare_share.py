"""The share of generated sequences whose `prepare` goes through accelerate's own
Accelerator.prepare (fsdpsim_upstream/prepare.py::blocker), per world 1-4, over a fixed
seed range of `fsdpsim random`: the decision is the scenario's, so no rank is started.
Usage: test_prepare_share.py FSDPSIM (the binary that generates the sequences)."""
import collections
import json
import os
import subprocess
import sys
import unittest
from types import SimpleNamespace

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

FSDPSIM = None
SEED, COUNT = 7000, 300


def reasons(world, draw=None):
    """Counter of prepared_by over the range: "accelerate" or a fallback's reason key."""
    from fsdpsim_upstream import prepare, seqfile
    cmd = [FSDPSIM, "random", "--seed", str(SEED), "--count", str(COUNT), "--world", str(world), "--json"]
    if draw:
        cmd += ["--draw", draw]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    got = collections.Counter()
    for line in out.splitlines():
        rec = json.loads(line)
        if rec.get("type") != "sequence":
            continue
        scen, ops = seqfile.parse(rec["seq"])
        # the first adapter is always trainable at prepare: the optimizer has something to hold
        reason = prepare.blocker(SimpleNamespace(scen=scen, world=world, prepared=False), [None])
        got[reason or "accelerate"] += 1
    assert sum(got.values()) == COUNT, got
    return got


class PrepareShareTest(unittest.TestCase):
    def test_accelerate_prepares_every_default_draw_scenario_at_every_world(self):
        """The default draw has no fallback at any world, ram-efficient loading included (its
        meta ranks go through accelerate's data_ptr mapping as users get it): red on the old
        rule, where `loading ram_efficient` fell back (about 12 %), and on the older one, where a
        child sharded before prepare with an empty shard fell back (21 % accelerate at worlds 3-4)."""
        for world in (1, 2, 3, 4):
            got = reasons(world)
            self.assertEqual(set(got), {"accelerate"}, (world, got))

    def test_accelerate_prepares_nine_in_ten_of_every_draw_at_every_world(self):
        """With every draw on, groups and checkpointed children included: at least 90 % at each world
        (red on the old rule, where every group and checkpointed child fell back: about 45 %)."""
        for world in (1, 2, 3, 4):
            got = reasons(world, draw="all")
            self.assertGreaterEqual(got["accelerate"], COUNT * 9 // 10, (world, got))

    def test_groups_and_checkpointed_children_are_accelerates_units(self):
        """A group is accelerate's tail, a checkpointed child its input embedding (or the tail); what
        stays direct is a checkpointed child before an auto-wrap one (`unit_order`: 38 of 300 when
        measured) or more checkpointed children than the two units hold."""
        for draw, tenths in (("grouped=100", 9), ("checkpoint=100", 8)):
            got = reasons(2, draw=draw)
            self.assertGreaterEqual(got["accelerate"], COUNT * tenths // 10, (draw, got))
            self.assertLessEqual(set(got), {"accelerate", "unit_order", "checkpoint_child"}, (draw, got))


SCEN = """world 2
layer lin0 4 4
layer lin1 4 4
layer lin2 4 4
layer lin3 4 2
adapter a r=2 alpha=2 targets=lin0,lin1,lin2,lin3
{lines}
fully_shard root
---
forward
"""


def blocker(lines):
    from fsdpsim_upstream import prepare, seqfile
    scen, _ = seqfile.parse(SCEN.format(lines=lines))
    return prepare.blocker(SimpleNamespace(scen=scen, world=2, prepared=False), [None])


class UnitsTest(unittest.TestCase):
    """Which children accelerate's fsdp2_prepare_model can make as the scenario says
    (prepare.py::Units): auto-wrap units in layer order, then the input embedding, then the tail."""

    def test_accelerate_makes_one_group_and_two_checkpointed_units_in_its_order(self):
        self.assertIsNone(blocker("fully_shard lin1\nfully_shard lin3,lin0"))
        self.assertIsNone(blocker("checkpoint lin0,lin2\nfully_shard lin1\nfully_shard lin0\nfully_shard lin2"))
        self.assertIsNone(blocker("checkpoint lin2\nfully_shard lin0\nfully_shard lin2\nfully_shard lin1,lin3"))

    def test_what_accelerate_cannot_make_keeps_its_reason(self):
        self.assertEqual(blocker("fully_shard lin0,lin1\nfully_shard lin2,lin3"), "grouped")
        self.assertEqual(blocker("checkpoint lin0,lin1,lin2\nfully_shard lin0\nfully_shard lin1\nfully_shard lin2"),
                         "checkpoint_child")
        self.assertEqual(blocker("checkpoint lin0,lin3\nfully_shard lin0\nfully_shard lin3\nfully_shard lin1,lin2"),
                         "checkpoint_child")
        self.assertEqual(blocker("fully_shard lin1\nfully_shard lin0"), "unit_order")
        self.assertEqual(blocker("fully_shard lin1,lin2\nfully_shard lin0"), "unit_order")
        self.assertEqual(blocker("checkpoint lin0\nfully_shard lin0\nfully_shard lin1"), "unit_order")


if __name__ == "__main__":
    FSDPSIM = sys.argv.pop(1)
    unittest.main()
