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

    def test_grouped_fully_shard_falls_back_by_its_own_reason(self):
        got = reasons(2, draw="grouped=100")
        self.assertGreater(got["grouped"], COUNT // 2, got)

    def test_checkpointed_child_falls_back_by_its_own_reason(self):
        """accelerate's auto-wrap shards the module inside a CheckpointWrapper, the scenario the wrapper."""
        got = reasons(2, draw="checkpoint=100")
        self.assertGreater(got["checkpoint_child"], COUNT // 4, got)
        self.assertGreater(got["accelerate"], COUNT // 4, got)  # a checkpointed layer no child shards is accelerate's


if __name__ == "__main__":
    FSDPSIM = sys.argv.pop(1)
    unittest.main()
