"""Where one sequence's time goes on a rank, for bench.py's breakdown: the scenario's build
(model, PEFT injection, prepare), each op, and inside the ops the time in gloo's collectives
and in the pairing exchange with the coordinator. Accumulators only (a perf_counter read per
phase): nothing here changes what a rank does or observes. rank.py sends them in its `end`
message; pool.py adds the coordinator's own phases."""
import contextlib
import time

clock = time.perf_counter


class Phases:
    def __init__(self):
        self.reset()

    def reset(self):
        self.total = {}  # phase -> seconds, this sequence
        self.ops = []  # [op kind, seconds in the op, of which in gloo, of which pairing]

    def add(self, name, seconds):
        self.total[name] = self.total.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, name):
        t0 = clock()
        try:
            yield
        finally:
            self.add(name, clock() - t0)

    @contextlib.contextmanager
    def op(self, kind):
        """One op's wall time, and how much of it went to gloo and to the pairing exchange."""
        t0, g0, p0 = clock(), self.total.get("gloo", 0.0), self.total.get("pairing", 0.0)
        try:
            yield
        finally:
            self.ops.append([kind, clock() - t0, self.total.get("gloo", 0.0) - g0,
                             self.total.get("pairing", 0.0) - p0])

    def report(self):
        return {"phases": {k: round(v, 6) for k, v in self.total.items()},
                "ops": [[k, round(t, 6), round(g, 6), round(p, 6)] for k, t, g, p in self.ops]}


PHASES = Phases()
