"""fsdpsim_upstream/children.py, the pool's one way to signal or reap a process: pid <= 1 refused
(os.kill(0) is the caller's process group, -1 everyone), its own children signalled and reaped.
Plain python3, no torch. A broken guard is probed with signal 0 or inside a child alone in its
own process group, so a failure here is an assertion, never a kill."""
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "real_backend", "upstream"))
from fsdpsim_upstream import children  # noqa: E402


class Children(unittest.TestCase):
    def test_refuses_zero_one_and_negative_pids(self):
        for pid in (0, 1, -1, -7, None):
            self.assertFalse(children.signal_child(pid, 0), pid)
            self.assertFalse(children.process_exists(pid), pid)
            self.assertEqual(children.wait_child(pid, os.WNOHANG), (0, 0), pid)

    def test_a_zero_pid_kills_nobody(self):
        pid = os.fork()
        if pid == 0:  # alone in its own group: a broken guard would kill this child only
            os.setpgid(0, 0)
            children.signal_child(0, signal.SIGKILL)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)

    def test_signals_and_reaps_its_own_child(self):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        self.assertTrue(children.process_exists(pid))
        self.assertTrue(children.signal_child(pid, signal.SIGTERM))
        got, status = children.wait_child(pid)
        self.assertEqual((got, os.waitstatus_to_exitcode(status)), (pid, -signal.SIGTERM))
        self.assertFalse(children.signal_child(pid, 0))  # reaped: gone


if __name__ == "__main__":
    unittest.main()
