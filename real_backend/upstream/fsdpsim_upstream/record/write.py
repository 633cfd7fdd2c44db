"""`fsdpsim record`'s writer: the tracer's per-rank event logs (inject/fsdpsim_record_tracer.py)
turned into a `.seq` (docs/guide/seq-format.md). Usage:

    python -m fsdpsim_upstream.record.write EVENT_DIR --out FILE --steps N --command TEXT

The scenario comes from rank 0's structural events (get_peft_model's module tree and adapter
configs, the fully_shard calls, the optimizer); the ops from every rank's calls, loops cut to N
iterations (record/loops.py) and ranks merged with `@R` where they differ (record/ranks.py).
What the tracer saw and the vocabulary cannot say is listed in the header as `# not recorded:`
lines; with no PEFT model or no root fully_shard nothing useful remains: exit 3 with the list."""

import argparse
import glob
import json
import os
import sys

from .loops import cut_loops
from .ops import OpWriter
from .ranks import merge_ranks
from .scenario import scenario_lines


def read_logs(directory):
    """{rank: [events]}, the `process` line dropped and everything after a second model cut."""
    logs = {}
    for path in sorted(glob.glob(os.path.join(directory, "rank-*.jsonl"))):
        rank = int(os.path.basename(path)[5:-6])
        events = []
        with open(path) as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:  # a rank killed mid-write leaves half a line
                    continue
                if ev.get("op") != "process":
                    events.append(ev)
        logs[rank] = events
    return logs


def until_second_model(events, notes):
    for i, ev in enumerate(events):
        if ev["op"] == "second_model":
            notes.append(f"a second PEFT model built at {ev['at']} and every call after it (only the first model is recorded)")
            return events[:i]
    return events


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fsdpsim record (writer)")
    ap.add_argument("dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--command", default="")
    ap.add_argument("--header", action="append", default=[], help="a line the CLI adds (the command's exit status)")
    a = ap.parse_args(argv)
    logs = read_logs(a.dir)
    notes = []
    if not logs:
        print("fsdpsim record: the command made no call the tracer watches (no get_peft_model, no fully_shard)", file=sys.stderr)
        return 3
    for r in logs:
        rank_notes = []
        logs[r] = until_second_model(logs[r], rank_notes)
        if r == min(logs):
            notes += rank_notes
    world = len(logs)
    scen, why_not = scenario_lines(logs[min(logs)], world, notes)
    if scen is None:
        print("fsdpsim record: nothing the .seq vocabulary can express remains:", file=sys.stderr)
        for n in [why_not] + notes:
            print(f"  not recorded: {n}", file=sys.stderr)
        return 3
    per_rank, header = {}, []
    for r, events in sorted(logs.items()):
        w = OpWriter(scen)
        ops = w.ops(events)
        ops, cuts = cut_loops(ops, a.steps)
        per_rank[r] = ops
        if r == min(logs):
            notes += w.notes
            header += cuts
    body = merge_ranks(per_rank)
    out = [f"# recorded by `fsdpsim record` from: {a.command}".rstrip()]
    out += [f"# {h}" for h in a.header + header]
    seen = set()
    for n in notes:
        if n not in seen:
            seen.add(n)
            out.append(f"# not recorded: {n}")
    text = "\n".join(out + scen.lines + ["---"] + body) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
