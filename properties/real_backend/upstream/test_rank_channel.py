"""The rank's line protocol (fsdpsim_upstream/rank.py, Channel), without torch: a posted
message (initial values, an observation) is held until the rank's next sent one and goes with
it, in order, in one write; one held past Channel.HOLD_S goes out at the next post. Plain
python3: run by ctest (label unit) as `test_rank_channel.py [unittest args]`."""
import io
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "real_backend", "upstream"))
from fsdpsim_upstream import rank  # noqa: E402


class Out(io.StringIO):
    """Counts the writes: each one wakes the coordinator."""

    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, s):
        self.writes += 1
        return super().write(s)


def channel():
    chan = rank.Channel.__new__(rank.Channel)  # without __init__'s redirection of fd 1
    chan.out, chan.inp = Out(), io.StringIO()
    chan.held, chan.held_since = [], None
    return chan


def lines(chan):
    return [json.loads(line) for line in chan.out.getvalue().splitlines()]


class HeldUntilTheNextSend(unittest.TestCase):
    def test_posted_messages_wait_for_the_next_send_and_keep_their_order(self):
        chan = channel()
        chan.post({"t": "init", "n": 0})
        chan.post({"t": "obs", "n": 1})
        self.assertEqual(chan.out.getvalue(), "", "a posted message went out before the next send")
        chan.send({"t": "coll", "n": 2})
        self.assertEqual([m["n"] for m in lines(chan)], [0, 1, 2])
        self.assertEqual(chan.out.writes, 1, "the held messages and the sent one are one write")
        chan.send({"t": "end", "n": 3})
        self.assertEqual([m["n"] for m in lines(chan)], [0, 1, 2, 3], "a held message went out twice")

    def test_a_message_held_too_long_goes_out_at_the_next_post(self):
        chan = channel()
        chan.post({"t": "obs", "n": 0})
        chan.held_since -= rank.Channel.HOLD_S  # as if the op after it took that long
        chan.post({"t": "obs", "n": 1})
        self.assertEqual([m["n"] for m in lines(chan)], [0, 1])
        self.assertEqual(chan.held, [])


if __name__ == "__main__":
    unittest.main()
