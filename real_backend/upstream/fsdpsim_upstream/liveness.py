"""Telling a slow rank from a dead one (issue 37). A run in which no rank
has said anything for the base timeout is not yet a failure: a rank that is
stopped (SIGSTOP, a debugger), runnable, in disk sleep, or that used CPU since
the last look is making progress the coordinator cannot see, and the wait goes
on, up to a limit scaled by the scenario's size. Past that limit, or when
every rank sleeps without using CPU, the run is a harness failure (`slow rank
N` / `stuck rank N`), never a `hang` observation: only the pairing of the
collectives proves a hang."""
import signal

# A run may go without progress while a rank is busy or stopped for this long,
# plus PER_OP_S and a second per PER_OP_MB of the scenario's parameters for each op.
BASE_LIMIT_S = 60.0
PER_OP_S = 5.0
PER_OP_MB = 20.0


def scenario_bytes(scen):
    """The scenario's base parameters in bytes (its layers' weights, every expert)."""
    width = 2 if scen.dtype == "bf16" else 4
    return sum(l.fan_in * l.fan_out * max(l.experts, 1) * width for l in scen.layers)


def slow_limit(scen, n_ops):
    """Seconds a run may go on without a message from the ranks while one of them is busy or stopped."""
    return BASE_LIMIT_S + n_ops * (PER_OP_S + scenario_bytes(scen) / 1e6 / PER_OP_MB)


def proc_state(pid):
    """(state letter, CPU ticks of every thread) from /proc, or (None, 0) once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None, 0
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return fields[0], int(fields[11]) + int(fields[12])  # state, utime + stime


class Watch:
    """What each rank's process did since the last look."""

    def __init__(self, pids):
        self.ticks = {pid: proc_state(pid)[1] for pid in pids}

    def look(self, pids):
        """'stopped', 'busy' or 'asleep' for each pid, in order."""
        out = []
        for pid in pids:
            state, ticks = proc_state(pid)
            if state in ("T", "t"):
                out.append("stopped")
            elif state in ("R", "D") or ticks > self.ticks.get(pid, 0):
                out.append("busy")
            else:
                out.append("asleep")
            self.ticks[pid] = ticks
        return out


def signal_text(code):
    """A Popen returncode as words: 'exit 17' or 'signal 9, SIGKILL'."""
    if code is None:
        return "still running"
    if code >= 0:
        return f"exit {code}"
    try:
        return f"signal {-code}, {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def is_noise(line):
    """A warning a library printed on the way (torch's C++ `[W...] Warning:` lines, Python's
    warnings and the source line under them): not why a rank died."""
    s = line.strip()
    return (not s or (s.startswith("[W") and "Warning" in s) or "Warning:" in s or s.startswith("warnings.warn"))


def last_lines(text, n=3):
    """The last n lines of a rank's stderr that say something (warnings left out)."""
    lines = text.splitlines()
    keep = []
    skip_next = False
    for l in lines:
        if skip_next and l.startswith(" "):  # the source line Python prints under a warning
            skip_next = False
            continue
        skip_next = "Warning:" in l
        if not is_noise(l):
            keep.append(l.strip())
    return keep[-n:]
