"""bench_ab.py's two measures of a pool, without a pool: `tree_cpu` counts a process's
descendants (the ranks are the coordinator's children), and `comparable` leaves out gloo's own
words about a failed collective and nothing else. `.venv/bin/python properties/real_backend/upstream/test_bench_ab.py`."""
import json
import os
import subprocess
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

from fsdpsim_upstream.bench_ab import comparable, tree_cpu  # noqa: E402
from fsdpsim_upstream.probe import GLOO_SAID  # noqa: E402

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\nprint('done', flush=True)\ninput()\n"


class BenchAbTest(unittest.TestCase):
    def test_tree_cpu_counts_children(self):
        child = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(child.stdout.readline().strip(), "done")  # 0.4 s of CPU spent, still alive
            own = tree_cpu(child.pid)
            self.assertGreaterEqual(own, 0.35)
            t = os.times()  # this process alone (a child counts there only once reaped)
            self.assertGreaterEqual(tree_cpu(os.getpid()) - (t.user + t.system), 0.9 * own)
        finally:
            child.stdin.close()
            child.wait()

    def test_comparable_drops_gloo_words_only(self):
        o = {"step": 2, "rank": 1, "status": "hang", "message": "hang: rank 0 in x" + GLOO_SAID + "timed out after 1 ms"}
        self.assertEqual(json.loads(comparable(o))["message"], "hang: rank 0 in x")
        self.assertEqual(o["message"].count(GLOO_SAID), 1)  # the observation itself untouched
        plain = {"step": 1, "rank": 0, "status": "ok", "message": "cross-paired: rank 0"}
        self.assertEqual(json.loads(comparable(plain)), plain)


if __name__ == "__main__":
    unittest.main()
