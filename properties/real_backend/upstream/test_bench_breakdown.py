"""Tests of bench_breakdown.sample and table (real_backend/upstream/fsdpsim_upstream/bench_breakdown.py)
on a stand-in pool, no ranks started: a variant's `text` runs that sequence (bench.py's tiny Llama
beside the Linear stack), the rest of the variant goes to Pool.run, and each column keeps its own
median total and collectives. Run by ctest with the project's .venv python (label `upstream`)."""
import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

from fsdpsim_upstream import bench_breakdown  # noqa: E402


class StandInPool:
    """Pool.run's shape: each text takes a fixed wall and issues a fixed number of collectives."""

    def __init__(self, walls, colls):
        self.walls, self.colls, self.calls, self.timing = walls, colls, [], {}

    def run(self, text, switches, **kw):
        self.calls.append((text, kw))
        wall = self.walls[text].pop(0) if len(self.walls[text]) > 1 else self.walls[text][0]
        self.timing = {"ranks": {0: {"phases": {"observe": wall / 4, "rank_total": wall / 2}, "ops": []}},
                       "judge": wall / 8, "wall": wall}
        return [{"rank": 0, "collectives": [{}] * self.colls[text]}], False


class Sample(unittest.TestCase):
    def test_a_variants_text_runs_that_sequence_and_each_column_keeps_its_own_figures(self):
        pool = StandInPool({"linear": [0.1], "llama": [0.9, 0.5, 0.6, 0.4]}, {"linear": 10, "llama": 61})
        res = bench_breakdown.sample(pool, None, [{"text": "linear"}, {"text": "llama", "reuse": False}], 0,
                                     min_runs=3, warm_ups=1)
        texts = [t for t, _ in pool.calls]
        self.assertEqual(texts, ["linear", "llama"] * 4)  # one warm-up each, then alternating
        self.assertEqual([kw for _, kw in pool.calls[:2]], [{}, {"reuse": False}])  # `text` is not passed on
        self.assertEqual([r["runs"] for r in res], [3, 3])
        self.assertAlmostEqual(res[0]["median_total"], 100.0)
        self.assertAlmostEqual(res[1]["median_total"], 500.0)  # 500, 600, 400 after the warm-up's 900
        self.assertEqual([r["colls"] for r in res], [10, 61])
        lines = bench_breakdown.table(res, ["linear stack", "tiny llama"])
        self.assertIn("linear stack 10 and 3, tiny llama 61 and 3", lines[-1])


if __name__ == "__main__":
    unittest.main()
