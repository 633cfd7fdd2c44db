"""The coordinator fsdpsim starts (protocol.md): it keeps W rank processes
(rank.py) alive across sequences, pairs up their collectives before any is
issued (so ranks that part ways report `hang` or `mismatch` at once, as the
model's simulator words it; the same op, size and dtype of other tensors go
to gloo as issued and come back `cross-paired`), kills and restarts the ranks when one is stuck
past the timeout, and judges each rank's stored weights against the peers'
adapter rows. Observations go to stdout as `fsdpsim run --json` prints them.
A rank that makes no progress is a harness condition (liveness.py), never a `hang`."""
import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

from . import judge, liveness, rank_spawn

UNOBSERVED = ["peak_unsharded"]
# How long a run may go without a message from any rank before the coordinator looks at
# their processes (liveness.py); fsdpsim's --timeout, the same default (sim/cli/commands.hpp).
DEFAULT_TIMEOUT_MS = 5000
CROSS_PAIRED = "cross-paired: "  # model/vocab/cross_paired.hpp::kCrossPaired
PACKAGE_ROOT = rank_spawn.PACKAGE_ROOT


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collective_text(c):
    t = f"{c['op']}({c['group']}, {c['count']}"
    if c["op"] == "broadcast":
        t += f" {c.get('dtype', 'fp32')}"
    return t + ")"


def describe_pending(heads):
    """Words a failed pairing as model/vocab/observation.cpp::describe_pending does."""
    waiting = [h for h in heads if h is not None]
    first = waiting[0] if waiting else None
    same = len(waiting) >= 2 and all(
        (h["coll"]["op"], h["coll"]["group"], h["coll"]["count"], h["coll"].get("dtype"))
        == (first["coll"]["op"], first["coll"]["group"], first["coll"]["count"], first["coll"].get("dtype"))
        for h in waiting)
    out = []
    for r, h in enumerate(heads):
        if h is None:
            out.append(f"rank {r} issues no matching collective")
            continue
        s = f"rank {r} in {collective_text(h['coll'])}"
        if same:
            members = ",".join(h["coll"]["parts"].keys())
            s += " of " + (members or "nothing")
        out.append(s + f" at step {h['step']}")
    return "; ".join(out)


def describe_cross_paired(heads):
    """Words a completed cross-pairing as model/vocab/cross_paired.cpp::describe_cross_paired does."""
    return CROSS_PAIRED + "; ".join(
        f"rank {r} in {collective_text(h['coll'])} of {','.join(h['coll']['parts'].keys()) or 'nothing'} at step {h['step']}"
        for r, h in enumerate(heads))


def same_collective(a, b, dtensor=False):
    if dtensor or "?" in (a["group"], b["group"]):
        # a DTensor collective one rank could not attribute (a padded or
        # reshaped copy): the peers' names settle it
        return (a["op"], a["count"], a.get("dtype")) == (b["op"], b["count"], b.get("dtype"))
    return (a["op"], a["group"], a["count"], a.get("dtype"), list(a["parts"].items())) == \
        (b["op"], b["group"], b["count"], b.get("dtype"), list(b["parts"].items()))


def remove_stale_dirs():
    """Removes the directories of pools whose coordinator is gone (killed
    before it could clean up)."""
    import re
    import shutil
    base = tempfile.gettempdir()
    for name in os.listdir(base):
        m = re.match(r"fsdpsim-pool-(\d+)-", name)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except PermissionError:
            pass


class RankProc:
    def __init__(self, rank, world, port, log_dir):
        self.rank = rank
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", FSDPSIM_UPSTREAM_DIR=log_dir,
                   PYTHONPATH=os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")])))
        # torch's compile caches (DTensor's sharding propagation can reach inductor) go inside the
        # pool's directory, which close() removes, not into $TMPDIR/torchinductor_<user>
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(log_dir, "inductor"))
        env.setdefault("TRITON_CACHE_DIR", os.path.join(log_dir, "triton"))
        self.log_path = os.path.join(log_dir, f"rank{rank}.log")
        # FSDPSIM_UPSTREAM_DEBUG=1: the ranks' stderr goes to the coordinator's
        self.log = open(self.log_path, "w") if not os.environ.get("FSDPSIM_UPSTREAM_DEBUG") else None
        self.proc = rank_spawn.spawn(env, self.log)
        self.buf = ""

    def send(self, msg):
        try:
            self.proc.stdin.write(json.dumps(msg, separators=(",", ":")) + "\n")
            self.proc.stdin.flush()
        except OSError:  # a dead rank's pipe: say which rank and how it died, not "Broken pipe"
            raise RuntimeError(self.death()) from None

    def last_error(self, n=1):
        try:
            with open(self.log_path) as f:
                return " | ".join(liveness.last_lines(f.read(), n))
        except OSError:
            return ""

    def death(self):
        """'rank 1 died (signal 9, SIGKILL): its last stderr lines'."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        tail = self.last_error(3)
        return f"rank {self.rank} died ({liveness.signal_text(code)})" + (f": {tail}" if tail else "")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.log:
            self.log.close()


class Pool:
    def __init__(self, world, timeout_ms):
        self.world = world
        self.timeout = timeout_ms / 1000.0
        remove_stale_dirs()
        # the owner's pid in the name: a later pool removes it if this one dies unclean
        self.log_dir = tempfile.mkdtemp(prefix=f"fsdpsim-pool-{os.getpid()}-")
        self.ranks = []
        self.versions = {}
        self.on_wait = None  # called with a `wait` event each time a slow rank extends a run

    def start(self, deadline=120.0):
        if rank_spawn.fork_mode():
            rank_spawn.preload(self.log_dir)  # once: the ranks are forked with every library loaded
        port = free_port()
        self.ranks = [RankProc(r, self.world, port, self.log_dir) for r in range(self.world)]
        t0 = time.time()
        for rp in self.ranks:
            while True:
                msg = self.read(rp, max(0.0, deadline - (time.time() - t0)))
                if msg is None:
                    how = "" if rp.proc.poll() is None else f" ({liveness.signal_text(rp.proc.returncode)})"
                    raise RuntimeError(f"rank {rp.rank} did not start{how}: {rp.last_error() or 'no answer'}")
                if msg.get("t") == "ready":
                    self.versions = msg.get("versions", self.versions)
                    break

    def stop(self):
        for rp in self.ranks:
            try:
                rp.send({"cmd": "quit"})
            except RuntimeError:  # dead already
                pass
        deadline = time.time() + 2
        for rp in self.ranks:
            try:
                rp.proc.wait(timeout=max(0.01, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
            rp.kill()
        self.ranks = []

    def close(self):
        """Removes the pool's directory, then stops the ranks (stop alone keeps it for a restart).
        The directory goes first: the ranks' open logs do not keep it, and a kill of this process
        while the ranks take their time to quit then leaves nothing on disk."""
        import shutil
        shutil.rmtree(self.log_dir, ignore_errors=True)
        self.stop()

    def read(self, rp, timeout):
        """One message from a rank, or None on timeout / exit."""
        end = time.time() + timeout
        while "\n" not in rp.buf:
            left = end - time.time()
            if left <= 0:
                return None
            r, _, _ = select.select([rp.proc.stdout], [], [], left)
            if not r:
                return None
            chunk = os.read(rp.proc.stdout.fileno(), 65536).decode()
            if not chunk:
                return None
            rp.buf += chunk
        line, rp.buf = rp.buf.split("\n", 1)
        return json.loads(line)

    def run(self, text, switches):
        """Runs one sequence on every rank. Returns (observations, restarted)."""
        import shutil
        rundir = tempfile.mkdtemp(prefix="run-", dir=self.log_dir)
        try:
            return self._run(text, switches, rundir)
        finally:
            shutil.rmtree(rundir, ignore_errors=True)

    def _run(self, text, switches, rundir):
        from . import seqfile
        scen, ops = seqfile.parse(text)

        for rp in self.ranks:
            rp.send({"cmd": "run", "seq": text, "switches": switches, "dir": rundir})
        obs = {r: [] for r in range(self.world)}
        vals = {r: {} for r in range(self.world)}
        self.cross = {}  # (rank, step) -> the op's first cross-pairing, as judge_crossed words it
        self.crossed = []  # per cross-paired collective, in order: its text, each rank's step, an all-gather's `recv` reports
        init = {}
        pending = [None] * self.world  # the collective each rank waits in
        ended = [False] * self.world
        last_step = [0] * self.world
        fds = {rp.proc.stdout.fileno(): rp for rp in self.ranks}
        last = looked = time.time()  # the last message from a rank; the last look at their processes
        watch = liveness.Watch([rp.proc.pid for rp in self.ranks])
        limit = liveness.slow_limit(scen, len(ops))
        while not all(ended):
            ready = [rp for rp in self.ranks if "\n" in rp.buf]
            if not ready:
                live = [rp.proc.stdout for rp in self.ranks if not ended[rp.rank]]
                r, _, _ = select.select(live, [], [], 0.05)
                for f in r:
                    rp = fds[f.fileno()]
                    chunk = os.read(f.fileno(), 1 << 20).decode()
                    if not chunk:
                        raise RuntimeError(rp.death())
                    rp.buf += chunk
                    last = looked = time.time()
                if not r and time.time() - looked > self.timeout:
                    # no message for the timeout: slow or stopped ranks extend the wait (liveness.py)
                    self.no_progress(watch, ended, pending, time.time() - last, limit)
                    looked = time.time()
                continue
            for rp in ready:
                line, rp.buf = rp.buf.split("\n", 1)
                msg = json.loads(line)
                t = msg.get("t")
                r = rp.rank
                if t == "init":
                    init[r] = msg
                elif t == "obs":
                    obs[r].append(msg["obs"])
                    last_step[r] = msg["obs"]["step"]
                    if msg.get("values") is not None:
                        vals[r][msg["obs"]["step"]] = msg["values"]
                elif t == "coll":
                    pending[r] = msg
                elif t == "recv":
                    self.crossed[msg["id"]]["recv"][r] = msg
                elif t == "end":
                    ended[r] = True
                elif t == "fail":
                    raise RuntimeError(f"rank {r}: {msg['message']}")
            self.pair(pending, ended)
        self.judge_crossed()
        out = []
        log = judge.RoundingLog()
        judge.set_peer_views(obs, self.world)
        for r in range(self.world):
            for o in obs[r]:
                if "layers" in o and r in init:
                    judge.judge_layers(o, r, self.world, init, vals, log)
                if "deltas" in o and r in init:
                    judge.judge_deltas(o, r, self.world, init, vals)
                if r in init:
                    judge.judge_replicas(o, r, self.world, init, vals)
                # an op that went on after gloo cross-paired one of its collectives (an op that
                # raised keeps its exception's text, as the model's simulator does)
                if o.get("status") == "ok" and not o.get("message") and (r, o["step"]) in self.cross:
                    o["message"] = self.cross[(r, o["step"])]
                out.append(o)
        out.sort(key=lambda o: (o["step"], o["rank"]))
        return out, False  # a rank that makes no progress is an error now, never a restart mid-run

    def no_progress(self, watch, ended, pending, silent, limit):
        """No rank has said anything for the timeout: waits on while one is busy or stopped, up to
        `limit` seconds of silence; raises (a harness failure, exit 4) past it or when every rank
        sleeps outside the collectives the coordinator paired."""
        live = [rp for rp in self.ranks if not ended[rp.rank]]
        states = watch.look([rp.proc.pid for rp in live])
        # a stopped rank first: its peers may spin in gloo waiting for it
        moving = sorted(((rp.rank, st) for rp, st in zip(live, states) if st != "asleep"), key=lambda m: m[1] != "stopped")
        if not moving:
            stuck = [rp.rank for rp in live if pending[rp.rank] is None] or [rp.rank for rp in live]
            raise RuntimeError(f"stuck rank {stuck[0]}: no progress for {silent:.0f} s, asleep outside any "
                               f"collective the pool paired (not a proven hang); ranks restarted")
        rank, state = moving[0]
        if silent > limit:
            raise RuntimeError(f"slow rank {rank}: no progress for {silent:.0f} s ({state}), past this scenario's "
                               f"limit of {limit:.0f} s; ranks restarted")
        if self.on_wait:
            self.on_wait({"event": "wait", "rank": rank, "state": state, "ms": int(silent * 1000)})

    def judge_crossed(self):
        """A cross-paired all-gather is one when every rank's slot j of its output holds the bytes
        rank j sent (what gloo delivered, not what was issued); otherwise the ops say `unjudged`."""
        for c in self.crossed:
            got = c["recv"]
            seen = not c["observed"] or len(got) == self.world and all(
                got[r]["got"][j] == got[j]["sent"] for r in range(self.world) for j in range(self.world))
            text = c["desc"] if seen else "unjudged: the bytes this cross-pairing delivered were not observed: " + c["desc"]
            for r, step in c["steps"].items():
                self.cross.setdefault((r, step), text)

    def pair(self, pending, ended):
        """Pairs the collectives the ranks wait in, the model's way: the n-th
        collective of every rank together; a rank that ended without it means
        hang, another op, size or dtype means mismatch, the same ones of another
        group or other parameters run cross-paired."""
        waiting = [r for r in range(self.world) if pending[r] is not None]
        if not waiting:
            return
        if any(pending[r] is None and not ended[r] for r in range(self.world)):
            return  # someone is still running
        first = pending[waiting[0]]["coll"]
        # DTensor's collectives pair by op, size and dtype (one process group under them); a rank
        # that redistributed a parameter's own shard keeps its name, one that could only guess
        # (a reshaped or padded copy) takes the first name a peer knows
        dtensor = any(pending[r].get("dtensor") for r in waiting)
        # ... and by the dtype on the wire: a merge's fp32 copy of a bf16 A against a save's bf16 A
        # has the same count and other bytes (crosscheck seed 460488: gloo aborted the rank)
        wire = pending[waiting[0]].get("wire")
        if len(waiting) == self.world and all(same_collective(pending[r]["coll"], first, dtensor) and
                                              (not dtensor or pending[r].get("wire") == wire) for r in waiting):
            named = next((pending[r]["coll"] for r in waiting if pending[r].get("dtensor") == "exact"),
                         next((pending[r]["coll"] for r in waiting if pending[r]["coll"]["group"] != "?"), first))
            for r in waiting:
                if pending[r].get("dtensor") == "exact":
                    self.ranks[r].send({"t": "go"})
                else:
                    self.ranks[r].send({"t": "go", "group": named["group"], "parts": named["parts"]})
                pending[r] = None
            return
        # ProcessGroupGloo pairs the n-th call of every rank by op and bytes alone (gloo's allgather
        # and reduce_scatter send flat buffers): another group's or other parameters' bytes of that
        # size and dtype go through, and each rank goes on with its peers' (issue 36). The ranks
        # run it as issued; a broadcast of another key still stops here (not yet let through).
        if (len(waiting) == self.world and not dtensor and first["op"] != "broadcast" and all(
                (pending[r]["coll"]["op"], pending[r]["coll"]["count"], pending[r].get("wire"))
                == (first["op"], first["count"], wire) for r in waiting)):
            desc = describe_cross_paired([pending[r] for r in range(self.world)])
            ident = len(self.crossed)
            # an all-gather's ranks report what arrived (judge_crossed); a reduce-scatter's sum
            # cannot be told apart, so the issued records say it
            self.crossed.append({"desc": desc, "steps": {r: pending[r]["step"] for r in waiting}, "recv": {},
                                 "observed": first["op"] == "all_gather"})
            for r in waiting:
                self.ranks[r].send({"t": "go", "observe": ident if first["op"] == "all_gather" else None})
                pending[r] = None
            return
        mismatch = len(waiting) == self.world
        heads = [pending[r] for r in range(self.world)]
        desc = ("collective mismatch: " if mismatch else "hang: ") + describe_pending(heads)
        for r in waiting:
            self.ranks[r].send({"t": "abort", "status": "mismatch" if mismatch else "hang", "message": desc})
            pending[r] = None


def on_exit_signal(sig, _frame):
    """SIGTERM (fsdpsim's cleanup, or its death: PR_SET_PDEATHSIG), SIGHUP, SIGINT: leave through
    main's `finally`, which stops the ranks and removes the pool's directory. Further signals
    are ignored so that nothing cuts the cleanup short."""
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    raise SystemExit(128 + sig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
    args = ap.parse_args()
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_exit_signal)
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: clean up when fsdpsim dies
    except OSError:
        pass
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def emit(msg):
        out.write(json.dumps(msg, separators=(",", ":")) + "\n")
        out.flush()

    pool = None
    try:  # every way out, a signal while the pool makes its directory or starts its ranks included, cleans up
        pool = Pool(args.world, args.timeout_ms)
        pool.on_wait = emit
        try:
            pool.start()
        except Exception as e:
            emit({"event": "error", "message": str(e)})
            return 4
        emit({"event": "ready", "world": args.world, "versions": pool.versions, "unobserved": UNOBSERVED})
        for line in sys.stdin:
            if not line.strip():
                continue
            req = json.loads(line)
            if req.get("cmd") == "quit":
                break
            t0 = time.time()
            try:
                result, restarted = pool.run(req["seq"], req.get("switches"))
            except Exception as e:
                emit({"event": "error", "message": str(e)})
                pool.stop()
                try:
                    pool.start()
                except Exception:
                    return 4
                continue
            for o in result:
                out.write(json.dumps(o, separators=(",", ":")) + "\n")
            emit({"event": "done", "ms": round((time.time() - t0) * 1000, 1), "restarted": restarted})
    finally:
        # The cleanup itself is not cut short: fsdpsim's SIGTERM often arrives right after the error
        # event this process just wrote (a failed start), and would raise in the middle of close().
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        if pool is not None:
            pool.close()
    return 0


if __name__ == "__main__":
    code = main()
    # past the cleanup nothing is left to do: the interpreter's own teardown of torch, PEFT and
    # transformers (a second or more) would only hold fsdpsim's wait for this process
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
