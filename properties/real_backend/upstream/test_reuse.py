"""Reuse of the kept model (fsdpsim_upstream/reuse.py) gives the observations a fresh build
gives: generated scenarios (`fsdpsim random --draw all`, world 2), each run with four op lists
in a row (its own, reversed, its first and its second half), once with reuse off and once on, on
one pool; every observation of every rank must be the same, and a scenario's run with reuse on
must have come from the kept model exactly where one was kept (from its third run on, unless
gloo's failure restarted the ranks in between): else the test would prove nothing.
Usage: test_reuse.py FSDPSIM (the binary that generates the sequences)."""
import json
import os
import subprocess
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

FSDPSIM = None
SEED, COUNT, WORLD = 31000, 8, 2


def variants(seq):
    """The scenario with four op lists: the generated one, reversed, its first half, its second half."""
    head, ops = seq.split("\n---\n", 1)
    lines = [l for l in ops.splitlines() if l.strip()]
    half = max(1, len(lines) // 2)
    return [f"{head}\n---\n" + "\n".join(v) + "\n" for v in (lines, lines[::-1], lines[:half], lines[half:] or lines)]


def comparable(observations):
    """The observations as text, gloo's own words about a collective it failed left out: which
    rank's abort or timeout gloo reports first depends on the ranks' timing, run to run, with or
    without reuse (the verdict, `hang` or `mismatch`, and everything before those words stay)."""
    from fsdpsim_upstream.probe import GLOO_SAID
    out = []
    for o in observations:
        o = dict(o)
        if GLOO_SAID in o.get("message", ""):
            o["message"] = o["message"].split(GLOO_SAID)[0]
        out.append(json.dumps(o, sort_keys=True))
    return out


class ReuseTest(unittest.TestCase):
    def test_reuse_on_and_off_observe_the_same(self):
        from fsdpsim_upstream.pool import Pool
        out = subprocess.run([FSDPSIM, "random", "--seed", str(SEED), "--count", str(COUNT), "--world", str(WORLD),
                              "--draw", "all", "--json"], capture_output=True, text=True, check=True).stdout
        seqs = [json.loads(l)["seq"] for l in out.splitlines() if json.loads(l).get("type") == "sequence"]
        self.assertEqual(len(seqs), COUNT)
        pool = Pool(WORLD, 20000)
        pool.start()
        reused = 0
        try:
            for seq in seqs:
                kept_here = False  # whether the ranks hold this scenario's model now
                seen = False  # a scenario's model is kept from its second build on (reuse.keep)
                for text in variants(seq):
                    fresh, restarted = pool.run(text, None, reuse=False)
                    if restarted:  # fresh ranks after gloo failed a collective: nothing kept or seen
                        kept_here = seen = False
                    kept, restarted = pool.run(text, None, reuse=True)
                    # every rank's build left out the model and PEFT phases: the kept model was copied
                    copied = all("model" not in t["phases"] for t in pool.timing["ranks"].values())
                    self.assertEqual(copied, kept_here, text)
                    reused += copied
                    if restarted:
                        kept_here = seen = False
                    else:
                        kept_here, seen = copied or seen, True
                    self.assertEqual(comparable(fresh), comparable(kept), text)
        finally:
            pool.close()
        # a scenario's third and fourth runs copy its model (unless gloo's failures restarted the ranks)
        self.assertGreaterEqual(reused, COUNT)


if __name__ == "__main__":
    FSDPSIM = sys.argv.pop(1)
    unittest.main()
