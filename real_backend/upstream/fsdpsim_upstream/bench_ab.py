"""This tree's pool against another tree's, in one run: two coordinators started as fsdpsim starts
them (`python -m fsdpsim_upstream.pool`), one from each package root, take the same sequences in
turn (the order swapped each round, so that a loaded machine's drift hits both alike). Per side:
the wall time from the request to its `done` line, and the CPU time of the coordinator and its
ranks (/proc), which a shared machine's load inflates far less than the wall; and whether the two
observed the same (every observation line equal).
`python -m fsdpsim_upstream.bench_ab --base ROOT [--seconds T] [--world W] [FILE.seq ...]`, where
ROOT holds another fsdpsim_upstream (`git archive REV real_backend/upstream/fsdpsim_upstream |
tar -x -C DIR`: ROOT is DIR/real_backend/upstream). Without files: bench.py's ten-op sequence."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from . import bench

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid):
    """User + system seconds of `pid` and every descendant alive now (their own, not reaped children's)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):  # gone in between
            continue
    return total


def comparable(o):
    """An observation as compared, gloo's own words about a collective it failed left out: which
    rank's abort or timeout gloo reports first varies run to run (test_reuse.py leaves them out too)."""
    from .probe import GLOO_SAID
    if GLOO_SAID in o.get("message", ""):
        o = dict(o, message=o["message"].split(GLOO_SAID)[0])
    return json.dumps(o, sort_keys=True)


class Side:
    def __init__(self, name, root, world):
        self.name = name
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, "-m", "fsdpsim_upstream.pool", "--world", str(world)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self.proc.stdout:
            if '"event":"ready"' in line:
                break
        else:
            raise RuntimeError(f"{name}: the pool exited before it was ready")
        self.walls, self.cpus = [], []

    def run(self, text):
        """(observation lines, the done event); the wall and CPU recorded."""
        c0, t0 = tree_cpu(self.proc.pid), time.perf_counter()
        self.proc.stdin.write(json.dumps({"seq": text}) + "\n")
        self.proc.stdin.flush()
        lines = []
        for line in self.proc.stdout:
            msg = json.loads(line)
            if msg.get("event") in ("done", "error"):
                self.walls.append(time.perf_counter() - t0)
                if msg.get("event") == "done" and not msg.get("restarted"):  # new ranks: their CPU starts anew
                    self.cpus.append(tree_cpu(self.proc.pid) - c0)
                return lines, msg
            if "event" not in msg:
                lines.append(comparable(msg))
        raise RuntimeError(f"{self.name}: the pool exited")

    def close(self):
        self.proc.stdin.write('{"cmd":"quit"}\n')
        self.proc.stdin.close()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the other tree's package root")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    texts = []
    for path in args.files:
        with open(path) as f:
            text = f.read()
        if bench.world_of(text) == args.world:
            texts.append((path, text))
    texts = texts or [("ten-op", bench.ten_op_sequence(args.world))]
    sides = [Side("base", os.path.abspath(args.base), args.world), Side("this", os.path.dirname(HERE), args.world)]
    same = differ = rounds = 0
    diffs = []
    try:
        for s in sides:  # warm-up: each side's first sequence pays for lazy imports
            s.run(texts[0][1])
        for s in sides:
            s.walls.clear()
            s.cpus.clear()
        t_end = time.time() + args.seconds
        while time.time() < t_end or rounds == 0:
            for path, text in texts:
                order = sides if rounds % 2 == 0 else sides[::-1]
                got = {s.name: s.run(text)[0] for s in order}
                if got["base"] == got["this"]:
                    same += 1
                else:
                    differ += 1
                    diffs.append(path)
                    for a, b in zip(got["base"], got["this"]):
                        if a != b:
                            print(f"{path}: base {a}\n{path}: this {b}", file=sys.stderr)
                            break
                    if len(got["base"]) != len(got["this"]):
                        print(f"{path}: {len(got['base'])} against {len(got['this'])} observations", file=sys.stderr)
                if time.time() >= t_end and rounds > 0:
                    break
            rounds += 1
    finally:
        for s in sides:
            s.close()
    out = {"runs": len(sides[0].walls), "same": same, "differ": differ, "differ_files": sorted(set(diffs))[:20]}
    for s in sides:
        out[s.name] = {"wall_ms_median": round(1000 * statistics.median(s.walls), 1),
                       "wall_ms_mean": round(1000 * statistics.mean(s.walls), 1),
                       "cpu_ms_mean": round(1000 * statistics.mean(s.cpus), 1) if s.cpus else 0.0,
                       "cpu_runs": len(s.cpus)}
    for k in ("wall_ms_median", "wall_ms_mean", "cpu_ms_mean"):
        out["this/base " + k] = round(out["this"][k] / out["base"][k], 3) if out["base"][k] else None
    print(json.dumps(out, indent=1))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
