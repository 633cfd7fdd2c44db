"""Tests of the upstream backend (real_backend/upstream/fsdpsim_upstream):
the pool's reliability and its observations of known seed bugs on the real
libraries (`export --python`: test_export.py). Run by ctest with the
project's .venv python (label `upstream`); `python test_upstream.py` runs them
by hand."""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import torch_caches  # noqa: F401  (first: torch's caches in a directory removed at exit)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "real_backend", "upstream"))

from fsdpsim_upstream.pool import Pool  # noqa: E402
from fsdpsim_upstream.probe import Probe  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from upstream_test_util import run_on_fresh_pool  # noqa: E402

SEED000 = open(os.path.join(ROOT, "corpus/regressions/seed000_merged_set_adapter_w2.seq")).read()
SEED004 = open(os.path.join(ROOT, "corpus/regressions/seed004_eval_then_save_optimizer.seq")).read()

SIZE_MISMATCH = open(os.path.join(ROOT, "corpus/regressions/size_mismatch_unshard_of_two_groups.seq")).read()
OTHER_OP = open(os.path.join(ROOT, "corpus/regressions/other_op_unshard_against_backward.seq")).read()
GLOO_SAID = " | gloo: "  # probe.py's GLOO_SAID

DIVERGENT = """world 2
seed 0
profile upstream
layer lin0 8 8
adapter a r=2 alpha=2 targets=lin0 init=random
fully_shard root reshard_after_forward=true
---
@0 unshard
@1 train_step
"""


def by(obs, step, rank=0):
    return next(o for o in obs if o["step"] == step and o["rank"] == rank)


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def alive(pids):
    return {p for p in pids if os.path.exists(f"/proc/{p}") and "Z" not in open(f"/proc/{p}/stat").read().split(")")[1][:3]}


class PoolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pool = Pool(2, 8000)
        cls.pool.start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.close()

    def test_seed000_on_real_libraries(self):
        obs, restarted = self.pool.run(SEED000, None)
        self.assertFalse(restarted)
        # set_adapter on the merged model: the flips land on the unsharded copies
        step3 = by(obs, 3)
        self.assertEqual([g["state"] for g in step3["groups"]], ["UNSHARDED", "UNSHARDED"])
        p = {q["name"]: q for q in step3["params"]}
        self.assertTrue(p["lin0.lora_A.default"]["S.requires_grad"])
        self.assertTrue(p["lin0.lora_A.other"]["U.requires_grad"])
        self.assertFalse(p["lin0.lora_A.other"]["S.requires_grad"])
        # step 4 trains other; the reshard drops the flips; step 5 raises autograd's error
        self.assertEqual(by(obs, 4)["grads"], ["other"])
        for r in (0, 1):
            o = by(obs, 5, r)
            self.assertEqual(o["status"], "no_grad_fn")
            self.assertEqual(o["message"], "element 0 of tensors does not require grad and does not have a grad_fn")
            self.assertEqual(o["grads"], [])
        # the merge after the no_grad eval landed on U: the stored shard misses the delta
        self.assertEqual(by(obs, 2)["layers"][0]["stored"], "missing_delta")

    def test_seed004_key_error(self):
        obs, _ = self.pool.run(SEED004, None)
        eval_step = next(o["step"] for o in obs if o["op"] == "eval")
        save = next(o for o in obs if o["op"] == "save_optimizer" and o["step"] > eval_step)
        self.assertEqual(save["status"], "key_error")
        self.assertEqual(save["message"], "KeyError: 0")
        self.assertEqual(save["index"], 0)
        self.assertGreater(save["optimizer"]["missing"], 0)

    def test_exception_inside_op_is_its_status(self):
        text = SEED000.split("---")[0] + "---\nload_optimizer\ndelete_adapter default\ntrain_step\n"
        obs, restarted = self.pool.run(text, None)
        self.assertFalse(restarted)
        self.assertEqual(by(obs, 1)["status"], "value_error")
        self.assertEqual(by(obs, 1)["message"], "no optimizer checkpoint to load (save_optimizer first)")
        self.assertEqual(by(obs, 3)["status"], "ok")  # the pool goes on

    def test_rank_divergent_collective_is_a_hang_read_from_gloo(self):
        # rank 1's all-gather of its backward runs on gloo with no partner: gloo's short timeout says hang
        t0 = time.time()
        obs, restarted = self.pool.run(DIVERGENT, None)
        self.assertTrue(restarted)  # gloo's pairs are spent after a failed collective
        self.assertLess(time.time() - t0, 1 + 5)  # probe.PROBE_TIMEOUT_MS, then a forked restart
        o = by(obs, 2, 1)
        self.assertEqual(o["status"], "hang")
        words, said = o["message"].split(GLOO_SAID)
        self.assertEqual(words, "hang: rank 0 issues no matching collective; rank 1 in all_gather(root, 52) at step 2")
        self.assertRegex(said, r"^rank 1 raised RuntimeError: \[gloo/.*\] Timed out waiting 1000ms for (send|recv) op")
        obs, _ = self.pool.run(SEED000, None)  # the restarted ranks work
        self.assertEqual(by(obs, 4)["grads"], ["other"])

    def test_size_mismatch_is_read_from_gloos_abort(self):
        # other byte counts of one all-gather: gloo aborts the rank that receives more than it posted
        obs, restarted = self.pool.run(SIZE_MISMATCH, None)
        self.assertTrue(restarted)
        for step, rank in ((1, 0), (2, 1)):
            o = by(obs, step, rank)
            self.assertEqual(o["status"], "mismatch")
            words, said = o["message"].split(GLOO_SAID)
            self.assertEqual(words, "collective mismatch: rank 0 in all_gather(lin0, 52) at step 1; "
                                    "rank 1 in all_gather(lin1, 41) at step 2")
            self.assertIn("rank 1 aborted (signal 6, SIGABRT): [enforce fail at gloo/gloo/transport/tcp/pair.cc", said)
            # in bytes, as gloo's ring hands them on (208 vs 164 whole, 104 vs 82 in halves: measured)
            self.assertRegex(said, r"\d+ vs \d+\. Received data size doesn't match expected size")
        obs, _ = self.pool.run(SEED000, None)
        self.assertEqual(by(obs, 4)["grads"], ["other"])

    def test_other_op_is_a_hang_read_from_gloos_timeout(self):
        obs, restarted = self.pool.run(OTHER_OP, None)
        self.assertTrue(restarted)
        for step, rank in ((3, 0), (4, 1)):
            o = by(obs, step, rank)
            self.assertEqual(o["status"], "hang")
            self.assertIn("Timed out waiting 1000ms", o["message"])  # a peer may read the closed connection instead

    def test_rank_holding_no_rows_is_judged(self):
        # lin1's weight has one row: rank 1 holds none of it (crosscheck once failed here).
        # Merging it on the shards is a DTensor error on torch 2.13: B @ A comes out in a
        # placement the in-place add into the Shard(0) weight cannot keep.
        text = ("world 2\nseed 0\nprofile upstream\nlayer lin0 6 4\nlayer lin1 4 1\n"
                "adapter a r=1 alpha=1 targets=lin0,lin1 init=random\nfully_shard root reshard_after_forward=true\n"
                "---\nmerge\nunmerge\ntrain_step\n")
        obs, restarted = self.pool.run(text, None)
        self.assertFalse(restarted)
        for r in (0, 1):
            m = by(obs, 1, r)
            self.assertEqual(m["status"], "exception")
            self.assertIn("in-place operations that require placement changes are not supported", m["message"])
            self.assertEqual([l["merged"] for l in m["layers"]], [["a"], []])
        self.assertEqual([o["status"] for o in obs if o["step"] > 1], ["ok"] * 4)
        self.assertEqual([l["stored"] for l in by(obs, 3, 1)["layers"]], ["exact", "exact"])

    def test_versions_are_the_pinned_ones(self):
        self.assertTrue(self.pool.versions["torch"].startswith("2.13.0"))
        self.assertEqual(self.pool.versions["peft"], "0.21.2")
        self.assertEqual(self.pool.versions["accelerate"], "1.15.0")


class ProbeVerdictTest(unittest.TestCase):
    """The verdict on a let-through collective, from each rank's outcome alone (probe.py)."""

    def verdict(self, *outcomes):
        p = Probe(0, [{"coll": {}, "step": 1}] * len(outcomes), 1000)
        p.outcome = dict(enumerate(outcomes))
        return p.verdict()[0]

    def test_outcomes_map_to_the_vocabulary(self):
        done = {"how": "completed"}
        abort = {"how": "aborted", "signal": "signal 6, SIGABRT", "text": "[enforce fail at x] 8 vs 4"}
        timeout = {"how": "raised", "text": "RuntimeError: [x] Timed out waiting 1000ms for recv operation"}
        reset = {"how": "raised", "text": "RuntimeError: [x] Read error: Connection reset by peer"}
        other = {"how": "raised", "text": "RuntimeError: something else"}
        blocked = {"how": "blocked", "text": "no outcome within 6 s"}
        self.assertIsNone(self.verdict(done, done))
        self.assertEqual(self.verdict(done, abort), "mismatch")
        self.assertEqual(self.verdict(reset, abort), "mismatch")
        self.assertEqual(self.verdict(other, timeout), "mismatch")
        self.assertEqual(self.verdict(timeout, timeout), "hang")
        self.assertEqual(self.verdict(timeout, reset), "hang")  # the reset echoes the peer's timeout
        self.assertEqual(self.verdict(blocked, done), "hang")
        with self.assertRaisesRegex(RuntimeError, "cannot be judged"):
            self.verdict(reset, reset)
        absent = Probe(0, [{"coll": {}, "step": 1}, None], 1000)
        absent.outcome = {0: done}
        with self.assertRaisesRegex(RuntimeError, "never joined"):
            absent.verdict()


class FileWaitTest(unittest.TestCase):
    """A rank's wait for rank 0's adapter file is answered by where rank 0 is, never by a clock
    (pool.py::answer_files): ready once written, missing once rank 0 waits in a collective, has
    ended or died without it, and unanswered while rank 0 runs, however long."""

    class Rank:
        def __init__(self):
            self.sent = []

        def send(self, msg):
            self.sent.append(msg)

    def pool(self, rundir):
        p = Pool.__new__(Pool)  # no rank processes: answer_files reads the run's state alone
        p.ranks = [self.Rank(), self.Rank()]
        p.rundir, p.file_waits, p.dead = rundir, {1: 1}, set()
        return p

    def test_answer_follows_rank0s_state(self):
        with tempfile.TemporaryDirectory() as d:
            p = self.pool(d)
            p.answer_files([None, None], [False, False])  # rank 0 runs: it may still write
            self.assertEqual(p.ranks[1].sent, [])
            p.answer_files([{"t": "coll"}, None], [False, False])  # waits in a collective: never
            self.assertEqual(p.ranks[1].sent, [{"t": "file", "ready": False}])
            p = self.pool(d)
            p.answer_files([None, None], [True, False])  # ended without it
            self.assertEqual(p.ranks[1].sent, [{"t": "file", "ready": False}])
            p = self.pool(d)
            open(os.path.join(d, "adapters-1.done"), "w").close()
            p.answer_files([{"t": "coll"}, None], [False, False])  # written before its collective
            self.assertEqual(p.ranks[1].sent, [{"t": "file", "ready": True}])
            self.assertEqual(p.file_waits, {})


class FaultTest(unittest.TestCase):
    def test_stuck_rank_is_an_error_not_a_hang(self):
        # asleep outside any paired collective: a harness failure (exit 4), never a `hang` observation
        os.environ["FSDPSIM_UPSTREAM_STALL"] = "1:4"
        pool = Pool(2, 2000)
        try:
            pool.start()
            del os.environ["FSDPSIM_UPSTREAM_STALL"]
            t0 = time.time()
            with self.assertRaisesRegex(RuntimeError, r"stuck rank 1: no progress for \d+ s"):
                pool.run(SEED000, None)
            self.assertLess(time.time() - t0, 30)
            pool.stop()
            pool.start()
            obs, _ = pool.run(SEED000, None)  # the fresh ranks work
            self.assertEqual(by(obs, 5)["status"], "no_grad_fn")
        finally:
            os.environ.pop("FSDPSIM_UPSTREAM_STALL", None)
            pool.close()

    def test_stopped_rank_is_waited_for(self):
        # SIGSTOP for three timeouts: the run waits (a `wait` event each look), then goes on as usual
        pool = Pool(2, 1000)
        waits = []
        pool.on_wait = waits.append
        try:
            pool.start()
            want, _ = pool.run(SEED000, None)
            rank1 = pool.ranks[1].proc.pid
            os.kill(rank1, signal.SIGSTOP)
            timer = threading.Timer(3.5, os.kill, (rank1, signal.SIGCONT))
            timer.start()
            got, _ = pool.run(SEED000, None)
            timer.join()
            self.assertGreaterEqual(len(waits), 2, waits)
            self.assertEqual({(w["rank"], w["state"]) for w in waits}, {(1, "stopped")})
            self.assertEqual(json.dumps(got, sort_keys=True), json.dumps(want, sort_keys=True))
        finally:
            pool.close()

    def test_crashed_rank_is_an_error_naming_it(self):
        os.environ["FSDPSIM_UPSTREAM_CRASH"] = "1:2"
        pool = Pool(2, 5000)
        try:
            pool.start()
            with self.assertRaisesRegex(RuntimeError, r"rank 1 died \(exit 17\)"):
                pool.run(SEED000, None)
        finally:
            os.environ.pop("FSDPSIM_UPSTREAM_CRASH", None)
            pool.close()

    def test_killed_rank_is_named_with_its_signal(self):
        # between two runs: the next request's broken pipe names the rank, not "[Errno 32]"
        pool = Pool(2, 5000)
        try:
            pool.start()
            os.kill(pool.ranks[1].proc.pid, signal.SIGKILL)
            pool.ranks[1].proc.wait()
            with self.assertRaisesRegex(RuntimeError, r"^rank 1 died \(signal 9, SIGKILL\)"):
                pool.run(SEED000, None)
        finally:
            pool.close()

    def test_nothing_left_behind(self):
        tmp = tempfile.mkdtemp(prefix="fsdpsim-test-")
        env = dict(os.environ, TMPDIR=tmp, PYTHONPATH=os.path.join(ROOT, "real_backend", "upstream"))
        p = subprocess.Popen([sys.executable, "-u", "-m", "fsdpsim_upstream.pool", "--world", "2"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        ready = json.loads(p.stdout.readline())
        self.assertEqual(ready["event"], "ready")
        ranks = children(p.pid)
        self.assertEqual(len(ranks), 2)
        # a sequence gloo aborts a rank in (the pool restarts its ranks), then one that runs
        for seq in (SIZE_MISMATCH, SEED000):
            p.stdin.write(json.dumps({"cmd": "run", "seq": seq}) + "\n")
            p.stdin.flush()
            while True:
                msg = json.loads(p.stdout.readline())
                if "event" in msg:
                    self.assertEqual(msg["event"], "done")
                    break
            ranks |= children(p.pid)
        self.assertEqual(len(ranks), 4)
        p.stdin.write('{"cmd":"quit"}\n')
        p.stdin.flush()
        self.assertEqual(p.wait(timeout=20), 0)
        time.sleep(0.3)
        self.assertEqual(os.listdir(tmp), [])
        self.assertEqual(alive(ranks), set())
        os.rmdir(tmp)

    def test_stale_directory_of_a_dead_pool_is_removed(self):
        stale = os.path.join(tempfile.gettempdir(), "fsdpsim-pool-999999-x")
        os.makedirs(stale, exist_ok=True)
        pool = Pool(1, 5000)
        self.assertFalse(os.path.exists(stale))
        pool.close()
        self.assertFalse(os.path.exists(pool.log_dir))


# PEFT's modules_to_save (ModulesToSaveWrapper, peft/utils/other.py): lin1 trained whole, one copy
# per adapter; its own parameters become lin1.original_module.*
MODULES_TO_SAVE = """world 2
seed 3
profile upstream
layer lin0 6 8
layer lin1 8 4
adapter a r=2 alpha=4 targets=lin0 init=random modules_to_save=lin1
adapter b r=2 alpha=4 targets=lin0 init=random modules_to_save=lin1
fully_shard lin1 reshard_after_forward=true
fully_shard root reshard_after_forward=true
---
train_step
set_adapter b
train_step
disable_enter
forward
disable_exit
set_adapter [a,b]
"""


class ModulesToSaveTest(unittest.TestCase):
    def test_names_and_owners_from_the_declarations(self):
        from fsdpsim_upstream import seqfile, session
        scen, _ = seqfile.parse(MODULES_TO_SAVE)
        self.assertEqual(scen.adapter("a").modules_to_save, ["lin1"])
        owners = scen.param_owners()
        self.assertEqual(owners["lin1.modules_to_save.b.bias"], ("lin1", "modules_to_save", "b"))
        self.assertNotIn("lin1.original_module.weight", owners)
        self.assertEqual(scen.base_name("lin1"), "lin1.original_module.weight")
        self.assertEqual(scen.base_name("lin0", "bias"), "lin0.bias")
        # get_peft_model_state_dict keys of a copy drop the wrapper's path
        self.assertEqual(session.saved_name("base_model.model.lin1.weight", "b", scen), "lin1.modules_to_save.b.weight")
        self.assertEqual(session.saved_name("base_model.model.lin0.lora_A.weight", "b", scen), "lin0.lora_A.b")
        self.assertEqual(session.lora_config(scen.adapter("a"), layers=scen.layers).modules_to_save, ["lin1"])

    def test_copies_follow_the_active_adapter(self):
        obs = run_on_fresh_pool(MODULES_TO_SAVE)
        names = [p["name"] for p in by(obs, 1)["params"]]
        self.assertEqual(names[4:], ["lin1.modules_to_save.a.weight", "lin1.modules_to_save.a.bias",
                                     "lin1.modules_to_save.b.weight", "lin1.modules_to_save.b.bias"])
        colls = by(obs, 1)["collectives"]
        self.assertIn("lin1.original_module.weight", colls[1]["parts"])
        self.assertEqual(by(obs, 1)["layers"][1], {"name": "lin1", "group": "lin1", "merged": [],
                                                   "stored": "exact", "registered": "exact"})

        def trainable(step):
            return [p["name"] for p in by(obs, step)["params"] if p["S.requires_grad"]]

        self.assertEqual(trainable(1), ["lin0.lora_A.a", "lin0.lora_B.a", "lin1.modules_to_save.a.weight",
                                        "lin1.modules_to_save.a.bias"])
        self.assertEqual(by(obs, 3)["grads"], ["b"])
        self.assertIn("lin1.modules_to_save.b.weight", trainable(3))
        self.assertNotIn("lin1.modules_to_save.a.weight", trainable(3))
        # disabling freezes every copy; enabling unfreezes the running one
        self.assertEqual(trainable(4), [])
        self.assertIn("lin1.modules_to_save.b.bias", trainable(6))
        o = by(obs, 7)
        self.assertEqual(o["status"], "value_error")
        self.assertEqual(o["message"], "Only one adapter can be set at a time for FSDPModulesToSaveWrapper(")

    def test_save_adapters_names_the_copies(self):
        text = MODULES_TO_SAVE.split("---")[0] + "---\ntrain_step\nsave_adapters [a]\nload_adapters\n"
        obs = run_on_fresh_pool(text)
        saved = {x["name"]: (x["rows"], x["full_rows"]) for x in by(obs, 2)["saved"]}
        self.assertEqual(saved, {"lin0.lora_A.a": (1, 2), "lin0.lora_B.a": (4, 8),
                                 "lin1.modules_to_save.a.weight": (2, 4), "lin1.modules_to_save.a.bias": (2, 4)})
        self.assertEqual(by(obs, 3)["status"], "ok")
        self.assertNotIn("reload_diff", by(obs, 3, 0))


if __name__ == "__main__":
    unittest.main()
