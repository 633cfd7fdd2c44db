"""Where a ten-op sequence's time goes on a started pool (bench.py): the ranks' phases
(timing.py) and the coordinator's, per sequence, and the floor they imply: the libraries' own
work (build, PEFT, prepare, the ops' Python) plus the time inside gloo's collectives, as if the
harness (observation, pairing, judging, the protocol) cost nothing. Columns are variants run
alternately on one pool (reuse off and on; or two scenarios, a variant's `text`: the tiny Llama
beside seed 000's Linear stack), so that a loaded machine's drift hits both alike."""
import statistics
import time

# (key, label): the rows, in the order a sequence spends them
ROWS = [
    ("model", "model build (nn modules, W0 copy)"),
    ("peft", "PEFT injection (get_peft_model, add_adapter)"),
    ("prepare", "prepare (accelerate: fully_shard, AdamW)"),
    ("reset", "reuse: reset of the kept model"),
    ("ops_python", "ops: the libraries' Python"),
    ("gloo", "ops: inside gloo collectives"),
    ("pairing", "ops: pairing with the coordinator (IPC)"),
    ("observe", "observation (read, encode, send)"),
    ("rank_rest", "rank: the rest (parse, session)"),
    ("judge", "coordinator: judging"),
    ("protocol", "coordinator: protocol and the rest"),
    ("total", "total (coordinator wall)"),
    ("floor", "floor: libraries + gloo"),
]
FLOOR = ("model", "peft", "prepare", "ops_python", "gloo")


def one(timing, rank=0):
    """One run's figures in seconds (rank `rank`'s phases, the coordinator's)."""
    t = timing["ranks"].get(rank) or {"phases": {}, "ops": []}
    ph = t["phases"]
    ops = t["ops"]
    row = {k: ph.get(k, 0.0) for k in ("model", "peft", "prepare", "reset", "gloo", "pairing", "observe")}
    row["ops_python"] = sum(o[1] - o[2] - o[3] for o in ops)
    spent = sum(row.values())
    row["rank_rest"] = max(0.0, ph.get("rank_total", spent) - spent)
    row["judge"] = timing.get("judge", 0.0)
    row["total"] = timing.get("wall", 0.0)
    row["protocol"] = max(0.0, row["total"] - ph.get("rank_total", spent) - row["judge"])
    row["floor"] = sum(row[k] for k in FLOOR)
    per_kind = {}
    for kind, sec, gloo, pairing in ops:
        n, s = per_kind.get(kind, (0, 0.0))
        per_kind[kind] = (n + 1, s + sec - gloo - pairing)
    return row, per_kind


def sample(pool, text, variants, seconds, min_runs=3, warm_ups=1):
    """Runs `text` on `pool` for each variant (keyword arguments of Pool.run; a `text` key runs that
    sequence instead) in turn, after `warm_ups` runs of each, until `seconds` pass; returns per
    variant the mean row (ms), the median total (ms), the mean per-op-kind Python time (ms, count
    per sequence), collectives per sequence and the number of runs."""
    runs = [(v.get("text", text), {k: x for k, x in v.items() if k != "text"}) for v in variants]
    for _ in range(warm_ups):
        for t, kw in runs:
            pool.run(t, None, **kw)
    acc = [{"rows": [], "kinds": [], "colls": 0} for _ in variants]
    t0 = time.time()
    n = 0
    while time.time() - t0 < seconds or n < min_runs:
        for i, (t, kw) in enumerate(runs):
            out, _ = pool.run(t, None, **kw)
            row, kinds = one(pool.timing)
            acc[i]["rows"].append(row)
            acc[i]["kinds"].append(kinds)
            acc[i]["colls"] += sum(len(o.get("collectives", [])) for o in out if o["rank"] == 0)
        n += 1
    result = []
    for a in acc:
        mean = {k: 1000 * sum(r[k] for r in a["rows"]) / n for k, _ in ROWS}
        kinds = {}
        for per in a["kinds"]:
            for kind, (c, s) in per.items():
                kc, ks = kinds.get(kind, (0, 0.0))
                kinds[kind] = (kc + c, ks + s)
        kinds = {k: (c / n, 1000 * s / n) for k, (c, s) in kinds.items()}
        result.append({"row": mean, "kinds": kinds, "colls": a["colls"] / n, "runs": n,
                       "median_total": 1000 * statistics.median(r["total"] for r in a["rows"])})
    return result


def table(results, names):
    """The aligned table, one column per variant (ms per sequence and its share of the total)."""
    label_w = max(len(l) for _, l in ROWS) + 2
    head = "".join(f"{n:>18}" for n in names)
    lines = [f"  {'per sequence (rank 0)':<{label_w}}{head}"]

    def cell(ms, total):
        return f"{ms:9.1f} ms {100 * ms / total:4.0f} %" if total else f"{ms:9.1f} ms"

    for key, label in ROWS:
        lines.append(f"  {label:<{label_w}}" + "".join(f"{cell(r['row'][key], r['row']['total']):>18}" for r in results))
        if key == "ops_python":
            for kind in sorted(results[0]["kinds"], key=lambda k: -results[0]["kinds"][k][1]):
                c = results[0]["kinds"][kind][0]
                sub = f"    {kind} (x{c:g})"
                lines.append(f"  {sub:<{label_w}}" + "".join(
                    f"{cell(r['kinds'].get(kind, (0, 0.0))[1], r['row']['total']):>18}" for r in results))
    rates = "".join(f"{1000 / r['row']['total']:>11.1f} seq/s" if r["row"]["total"] else f"{'':>17}" for r in results)
    lines.append(f"  {'sequences/s':<{label_w}}" + rates)
    floors = "".join(f"{1000 / r['row']['floor']:>11.1f} seq/s" if r["row"]["floor"] else f"{'':>17}" for r in results)
    lines.append(f"  {'sequences/s at the floor':<{label_w}}" + floors)
    lines.append("  (collectives per sequence on rank 0 and runs: "
                 + ", ".join(f"{n} {r['colls']:.0f} and {r['runs']}" for n, r in zip(names, results)) + ")")
    return lines


def figures(results, names):
    """bench_figure records: upstream_breakdown_<variant>_<row> in ms per sequence."""
    out = []
    for name, r in zip(names, results):
        for key, _ in ROWS:
            out.append({"type": "bench_figure", "name": f"upstream_breakdown_{name.replace(' ', '_')}_{key}",
                        "value": round(r["row"][key], 3), "unit": "ms per sequence"})
    return out
