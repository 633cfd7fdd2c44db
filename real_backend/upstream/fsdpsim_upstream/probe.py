"""Collectives the ranks did not issue alike, run on gloo as issued and observed (issue 36: the
pool observes, gloo decides). The coordinator lets every waiting rank issue its collective under
a short gloo timeout; each rank then reports its outcome and waits for the verdict: completed
(with fingerprints of what an all-gather delivered), raised (gloo's exception text), aborted (the
process died: its signal and gloo's enforce text from its log), or blocked (no outcome within the
coordinator's own bound, past gloo's). The verdict is read from those outcomes, never from the
issued records: a rank that aborted or raised anything but a timeout makes a `mismatch`, ranks that
only timed out or stayed blocked a `hang`, every rank completed a `cross-paired` collective.

What gloo does, measured on torch 2.13 CPU (docs/design/upstream-backend.md): other byte counts
of one op abort the rank that receives more bytes than it posted (gloo::EnforceNotMet in
tcp/pair.cc, SIGABRT) while a peer completes or reads `Connection reset by peer`; one op and one
byte count pair whatever the dtypes; another op blocks both ranks until the timeout."""
import re
import time

# gloo's timeout for a collective the coordinator knows the ranks issued differently (op or
# bytes): gloo cannot complete those but a broadcast whose root sends fewer bytes, and ends the
# others at once (an abort on other bytes) or never (another op, a rank with no partner). A
# blocked one costs this wait plus the restart (0.1 s forked, measured); one rank late on a
# loaded machine still meets its peer's bytes and aborts, so an abort still reads as a mismatch.
PROBE_TIMEOUT_MS = 1000
# The coordinator's bound past gloo's: a rank with no outcome by then is killed as blocked.
BOUND_SLACK_S = 5.0
# Between the words the model shares and gloo's own text: the comparison stops at it
# (model/vocab/observation.hpp::kGlooSaid).
GLOO_SAID = " | gloo: "
TIMED_OUT = "Timed out waiting"  # gloo/transport/tcp/unbound_buffer.cc's wording
PEER_GONE = ("Connection closed by peer", "Connection reset by peer")  # tcp/pair.cc's


def kind(o):
    """completed, aborted, blocked, or for a raise: timeout, peer_gone (an echo) or error."""
    if o["how"] != "raised":
        return o["how"]
    if TIMED_OUT in o["text"]:
        return "timeout"
    return "peer_gone" if any(p in o["text"] for p in PEER_GONE) else "error"


class Probe:
    """One let-through collective: the ranks in it and what each reported."""

    def __init__(self, ident, heads, timeout_ms):
        self.ident = ident
        self.heads = heads  # each rank's pending `coll` message, None for a rank that ended
        self.ranks = [r for r, h in enumerate(heads) if h is not None]
        self.outcome = {}  # rank -> {"how": completed|raised|aborted|blocked, ...}
        self.bound = timeout_ms / 1000.0 + BOUND_SLACK_S
        self.deadline = time.time() + self.bound

    def done(self):
        return all(r in self.outcome for r in self.ranks)

    def overdue(self):
        return time.time() > self.deadline

    def verdict(self):
        """(status, text of every rank's outcome): status None when every rank completed. A peer's
        closed or reset connection is what another rank's abort or timeout left behind: the
        cause is that rank's outcome. Raises when nothing but such echoes was seen."""
        kinds = [kind(self.outcome[r]) for r in self.ranks]
        said = "; ".join(f"rank {r} {outcome_text(self.outcome[r])}" for r in self.ranks)
        if all(k == "completed" for k in kinds):
            if len(self.ranks) < len(self.heads):  # no gloo collective completes without a rank
                raise RuntimeError("gloo completed a collective a rank never joined: " + said)
            return None, said
        if "aborted" in kinds or "error" in kinds:
            return "mismatch", said
        if "timeout" in kinds or "blocked" in kinds:
            return "hang", said
        raise RuntimeError("gloo's outcome cannot be judged (only peers' closed connections): " + said)

    def delivered(self, world):
        """Every rank's slot j of an all-gather's output holds what rank j sent."""
        got = {r: self.outcome[r] for r in self.ranks}
        return len(got) == world and all("got" in got[r] for r in got) and all(
            got[r]["got"][j] == got[j]["sent"] for r in range(world) for j in range(world))


def gloo_words(text):
    """gloo's message without what changes from run to run or says nothing of this collective:
    the build's source path, the peer's address and port, the advice after the first sentence."""
    text = re.sub(r"\s*\[[0-9a-fA-F.:]+\]:\d+", "", text.replace("/__w/pytorch/pytorch/third_party/", ""))
    return text.split(". This is typically", 1)[0].split(". Is there a", 1)[0]


def outcome_text(o):
    if o["how"] == "completed":
        return "completed"
    if o["how"] == "aborted":
        return f"aborted ({o['signal']})" + (f": {gloo_words(o['text'])}" if o.get("text") else "")
    if o["how"] == "blocked":
        return f"blocked: {o['text']}"
    return f"raised {gloo_words(o['text'])}"


def enforce_text(log_text):
    """gloo's enforce line from a dead rank's stderr (`what(): [enforce fail at ...] ...`), shortened
    to the file and the check; else the last line."""
    lines = [l.strip() for l in log_text.splitlines() if l.strip()]
    for l in reversed(lines):
        if "enforce fail" in l or "EnforceNotMet" in l:
            return l.split("what():", 1)[-1].strip()
    return lines[-1] if lines else ""


def stuck_observation(step, rank, op_text, status, message, collectives):
    """The observation of a rank whose op ended in the collective (rank.py writes the same for a
    CollectiveAbort); the coordinator writes it for a rank that died there."""
    return {"step": step, "rank": rank, "op": op_text, "status": status, "message": message, "active": [],
            "disabled": False, "optimizer": {"missing": 0, "total": 0, "unregistered": []}, "groups": [],
            "params": [], "layers": [], "collectives": collectives, "sharded_bytes": {},
            "peak_unsharded_bytes": {}}
