"""The coordinator fsdpsim starts (protocol.md): it keeps W rank processes
(rank.py) alive across sequences, lets the n-th collective of every rank go at once where the
ranks issued it alike, and otherwise lets each issue its own on gloo and observes what gloo does
with them (probe.py: completed `cross-paired`, or a `mismatch` or `hang` read from gloo's abort,
error or timeout), restarts the ranks after a collective gloo failed, and judges each rank's
stored weights against the peers' adapter rows. Observations go to stdout as `fsdpsim run --json` prints them.
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

from . import children, judge, liveness, probe, rank_spawn

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


# bytes an element of each wire dtype takes: gloo compares what travels in bytes (tcp/pair.cc)
WIRE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "torch.uint8": 1, "torch.float64": 8}


def wire_bytes(h):
    return h["coll"]["count"] * WIRE_BYTES.get(h.get("wire") or h["coll"].get("dtype") or "fp32", 4)


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
        if not children.process_exists(int(m.group(1))):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


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
        for f in (self.proc.stdin, self.proc.stdout, self.log):
            if f:
                try:
                    f.close()
                except OSError:  # a dead rank's pipe with unsent bytes
                    pass


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
        self.timing = {}
        # a rank may start a sequence from the model of the previous one when the scenario is the
        # same (reuse.py), with FSDPSIM_UPSTREAM_REUSE=1 only: off by default until fingerprints over
        # thousands of sequences show reuse on and off equal (docs/design/upstream-backend.md)
        self.reuse = os.environ.get("FSDPSIM_UPSTREAM_REUSE", "0") == "1"

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

    def run(self, text, switches, reuse=None):
        """Runs one sequence on every rank. Returns (observations, restarted). `reuse`: whether the
        ranks may run it on the model they kept from the previous sequence (None: the pool's own
        setting, FSDPSIM_UPSTREAM_REUSE)."""
        import shutil
        t0 = time.perf_counter()
        rundir = tempfile.mkdtemp(prefix="run-", dir=self.log_dir)
        self.timing = {"ranks": {}, "judge": 0.0}  # where the run's time went (bench.py's breakdown)
        try:
            return self._run(text, switches, rundir, reuse)
        finally:
            shutil.rmtree(rundir, ignore_errors=True)
            self.timing["wall"] = time.perf_counter() - t0

    def _run(self, text, switches, rundir, reuse):
        from . import seqfile
        scen, ops = seqfile.parse(text)

        for rp in self.ranks:
            rp.send({"cmd": "run", "seq": text, "switches": switches, "dir": rundir,
                     "reuse": self.reuse if reuse is None else reuse})
        obs = {r: [] for r in range(self.world)}
        vals = {r: {} for r in range(self.world)}
        self.cross = {}  # (rank, step) -> the op's first cross-pairing, as settle_probe words it
        self.probe = None  # the let-through collective whose outcomes are awaited (probe.py)
        self.probes = 0
        self.dead = set()  # ranks gloo aborted (or the coordinator killed) in a let-through collective
        self.restart = False  # gloo failed a collective: its process group is spent
        self.coll_log = [(0, []) for _ in range(self.world)]  # each rank's current step, its collectives so far
        self.prepared_by = [None] * self.world  # each rank's prepare path (prepare.py::run), from its end message
        # each rank's collectives in issue order, as the pool paired them: {rank: the step of its op in it}
        self.pairings = {r: [] for r in range(self.world)}
        self.rundir = rundir
        self.file_waits = {}  # rank -> the number of rank 0's adapter file it waits for (answer_files)
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
                        if self.probe is None or rp.rank not in self.probe.ranks or rp.rank in self.probe.outcome:
                            raise RuntimeError(rp.death())
                        self.died(rp, ended)  # gloo aborted it inside the let-through collective
                        continue
                    rp.buf += chunk
                    last = looked = time.time()
                self.answer_files(pending, ended)
                if self.probe is not None:  # its own bound (probe.py), not the liveness watch
                    self.settle_probe(ended, obs, ops)
                    last = looked = time.time()
                    self.pair(pending, ended)
                elif not r and time.time() - looked > self.timeout:
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
                elif t == "shapes":  # rank.py: an adapter's targets resolved after the init message
                    init[r]["shapes"].update(msg["shapes"])
                elif t == "obs":
                    obs[r].append(msg["obs"])
                    last_step[r] = msg["obs"]["step"]
                    if msg.get("values") is not None:
                        vals[r][msg["obs"]["step"]] = msg["values"]
                elif t == "coll":
                    pending[r] = msg
                    if self.coll_log[r][0] != msg["step"]:
                        self.coll_log[r] = (msg["step"], [])
                    self.coll_log[r][1].append(msg["coll"])
                elif t == "out":
                    self.probe.outcome[r] = msg
                elif t == "file":
                    self.file_waits[r] = msg["n"]
                elif t == "end":
                    ended[r] = True
                    self.prepared_by[r] = msg.get("prepared_by")
                    self.timing["ranks"][r] = msg.get("timing")
                elif t == "fail":
                    raise RuntimeError(f"rank {r}: {msg['message']}")
            if self.probe is not None:
                self.settle_probe(ended, obs, ops)
            self.answer_files(pending, ended)
            self.pair(pending, ended)
        t_judge = time.perf_counter()
        out = []
        log = judge.RoundingLog()
        judge.set_peer_views(obs, self.world, self.pairings)
        try:
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
        finally:
            judge.forget()
        out.sort(key=lambda o: (o["step"], o["rank"]))
        self.timing["judge"] = time.perf_counter() - t_judge
        if self.restart:  # a failed collective leaves gloo's pairs unusable: fresh ranks for the next
            for rp in self.ranks:
                rp.kill()
            self.ranks = []
            self.start()
        # a rank that makes no progress outside a let-through collective is an error, never a restart
        return out, self.restart

    def prepare_path(self):
        """The path the ranks' prepare took ("accelerate" or a fallback's reason key, prepare.py), from
        the ranks that ended normally (one gloo aborted sends no end); "mixed" where they differ, ""
        where none prepared."""
        paths = {p for p in self.prepared_by if p is not None}
        if not paths:
            return ""
        return paths.pop() if len(paths) == 1 else "mixed"

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

    def died(self, rp, ended):
        """A rank's process ended inside the let-through collective: gloo aborted it (its enforce
        text is the last thing in its log)."""
        try:
            code = rp.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        try:
            with open(rp.log_path) as f:
                text = probe.enforce_text(f.read())
        except OSError:
            text = ""
        self.probe.outcome[rp.rank] = {"how": "aborted", "signal": liveness.signal_text(code), "text": text}
        ended[rp.rank] = True
        self.dead.add(rp.rank)

    def settle_probe(self, ended, obs, ops):
        """Once every rank in the let-through collective reported (or the coordinator's bound has
        passed: those still inside are killed as blocked), answers them with what gloo's outcomes
        say: `go` after a collective every rank completed (cross-paired), else the verdict."""
        p = self.probe
        if not p.done() and not p.overdue():
            return
        for r in p.ranks:
            if r not in p.outcome:
                self.ranks[r].kill()
                p.outcome[r] = {"how": "blocked", "text": f"no outcome within {p.bound:.0f} s (the coordinator's bound)"}
                ended[r] = True
                self.dead.add(r)
        self.probe = None
        status, said = p.verdict()
        heads = p.heads
        if status is None:
            desc = describe_cross_paired(heads)
            first = heads[p.ranks[0]]["coll"]["op"]
            # an all-gather's ranks report what arrived; a reduce-scatter's sum or a broadcast
            # cannot be told apart, and gloo completing it is what says it paired
            if first == "all_gather" and not p.delivered(self.world):
                desc = "unjudged: gloo completed it, but the bytes delivered are not the ranks' own: " + desc
            for r in p.ranks:
                self.cross.setdefault((r, heads[r]["step"]), desc)
                self.ranks[r].send({"t": "go"})
            return
        self.restart = True
        message = ("collective mismatch: " if status == "mismatch" else "hang: ") + describe_pending(heads) + \
            probe.GLOO_SAID + said
        for r in p.ranks:
            if r in self.dead:
                step = heads[r]["step"]
                colls = self.coll_log[r][1] if self.coll_log[r][0] == step else [heads[r]["coll"]]
                obs[r].append(probe.stuck_observation(step, r, ops[step - 1].text(), status, message, colls))
            else:
                self.ranks[r].send({"t": "abort", "status": status, "message": message})

    def answer_files(self, pending, ended):
        """Answers each rank waiting for rank 0's n-th adapter file (op_checkpoints.py::
        run_load_adapters): ready once rank 0 wrote it; missing once rank 0 waits in a collective
        (which needs the waiting rank too), has ended or died, and still had not: rank 0 writes
        the file before it says anything further, so that is final. While rank 0 runs, the rank
        waits, however long that takes (the model's rule: sim/core/simulator.cpp, file_missing)."""
        for r, n in list(self.file_waits.items()):
            written = os.path.exists(os.path.join(self.rundir, f"adapters-{n}.done"))
            if not written and pending[0] is None and not ended[0] and 0 not in self.dead:
                continue
            del self.file_waits[r]
            self.ranks[r].send({"t": "file", "ready": written})

    def note_pairing(self, heads):
        """The ranks whose collectives went to gloo together, with the step of each one's op: which
        peer state each rank's values met (judge.set_peer_views)."""
        steps = {r: h["step"] for r, h in enumerate(heads) if h is not None}
        for r in steps:
            self.pairings[r].append(steps)

    def pair(self, pending, ended):
        """The n-th collective of every rank together, once no rank is still running: issued alike,
        it goes; otherwise every waiting rank issues its own on gloo and reports how it ended
        (settle_probe), with a short gloo timeout unless op and bytes agree (gloo pairs those)."""
        if self.probe is not None:
            return
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
            self.note_pairing(pending)
            for r in waiting:
                if pending[r].get("dtensor") == "exact":
                    self.ranks[r].send({"t": "go"})
                else:
                    self.ranks[r].send({"t": "go", "group": named["group"], "parts": named["parts"]})
            for r in waiting:  # the log names a DTensor collective as rank.py's check does
                c = pending[r]["coll"]
                if pending[r].get("dtensor") and pending[r].get("dtensor") != "exact":
                    self.coll_log[r][1][-1] = dict(c, group=named["group"], parts={k: c["count"] for k in named["parts"]})
                pending[r] = None
            return
        # ProcessGroupGloo pairs the n-th call of every rank by op and bytes alone (issue 36): those
        # need no short timeout; anything else the ranks wait in is let through under one
        alike = len(waiting) == self.world and all(
            pending[r]["coll"]["op"] == first["op"] and wire_bytes(pending[r]) == wire_bytes(pending[waiting[0]])
            for r in waiting)
        timeout_ms = None if alike else probe.PROBE_TIMEOUT_MS
        self.probe = probe.Probe(self.probes, list(pending), timeout_ms or self.timeout * 1000)
        self.note_pairing(pending)
        self.probes += 1
        for r in waiting:
            self.ranks[r].send({"t": "go", "probe": {"id": self.probe.ident, "timeout_ms": timeout_ms}})
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
            emit({"event": "done", "ms": round((time.time() - t0) * 1000, 1), "restarted": restarted,
                  "prepared_by": pool.prepare_path()})
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
