"""Upstream backend speed, where a person waits (`fsdpsim bench` runs this):
- a pool's start at world 2 (the coordinator ready with its ranks), ranks forked from the
  coordinator that imported the libraries once against ranks in fresh interpreters;
- a ten-op sequence on a started pool (per sequence, with where its time goes:
  bench_breakdown.py), the same ten ops on a tiny Llama against it (issue 51's ratio, with its
  breakdown beside the Linear stack's), and a corpus file (per file, one pool
  per world started beforehand, as `check` keeps them);
- `fsdpsim run FILE --backend upstream` end to end (given --fsdpsim);
- a fresh torchrun per sequence (the same sequence exported), against the started pool.
`python -m fsdpsim_upstream.bench [--seconds T] [--world W] [--fsdpsim PATH] [--corpus DIR] [--json]`."""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from . import bench_breakdown
from .pool import Pool, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
SEED000 = os.path.join(ROOT, "corpus", "regressions", "seed000_merged_set_adapter_w2.seq")
# seed 000's scenario with ten ops of every kind the pool handles most
# the breakdown's columns: Pool.run keyword arguments, and their names
VARIANTS = ([{"reuse": False}, {"reuse": True}], ["reuse off", "reuse on"])
TEN_OPS = """---
train_step
eval
merge
set_adapter other
train_step
unmerge
reshard
train_step
state_dict
save_optimizer
"""


# A tiny Llama (2 decoder layers, accelerate's transformer-class plan, two adapters on every
# Linear) as fsdpsim prints it (every model option spelled out): the ten ops on a `model` scenario.
MODEL_SCENARIO = """world {world}
seed 0
model llama hidden=16 intermediate=32 layers=2 heads=4 kv_heads=2 vocab=64 tie_embeddings=false seq_len=8
adapter default r=4 alpha=8 targets=all-linear init=random
adapter other r=4 alpha=8 targets=all-linear init=random
fully_shard_plan transformer_layers
"""


def model_vs_linear(pool, world, seconds):
    """The ten ops on seed 000's Linear stack and on the tiny Llama, alternating on one started
    pool (so load on the machine hits both alike), each scenario's first two runs left out (its
    first build, and the reuse copy its second makes): bench_breakdown's rows per scenario."""
    variants = [{"text": ten_op_sequence(world)}, {"text": MODEL_SCENARIO.format(world=world) + TEN_OPS}]
    return bench_breakdown.sample(pool, None, variants, seconds, warm_ups=2)


def ten_op_sequence(world):
    with open(SEED000) as f:
        scenario = f.read().split("---")[0]
    return re.sub(r"(?m)^world \d+$", f"world {world}", scenario) + TEN_OPS


def world_of(text):
    m = re.search(r"(?m)^world (\d+)", text)
    return int(m.group(1)) if m else 1


def pool_start_seconds(world, spawn):
    """A coordinator process started as fsdpsim starts it, until its ready line."""
    env = dict(os.environ, FSDPSIM_UPSTREAM_SPAWN=spawn,
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(HERE), os.environ.get("PYTHONPATH")])))
    t0 = time.time()
    p = subprocess.Popen([sys.executable, "-m", "fsdpsim_upstream.pool", "--world", str(world)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in p.stdout:
            if '"event":"ready"' in line:
                return time.time() - t0
        raise RuntimeError(f"the pool ({spawn}) exited before it was ready")
    finally:
        p.stdin.write('{"cmd":"quit"}\n')
        p.stdin.close()
        p.wait()


def started_pool(pools, world):
    """The pool of `world` from `pools` (world -> Pool), started the first time a world comes."""
    if world not in pools:
        pools[world] = Pool(world, 20000)
        pools[world].start()
    return pools[world]


def corpus_files(corpus, seconds):
    """Per-file seconds of the corpus files (sorted), one started pool per world, until `seconds`."""
    pools, per_file = {}, []
    try:
        t_end = None
        for path in sorted(glob.glob(os.path.join(corpus, "*.seq"))):
            with open(path) as f:
                text = f.read()
            pool = started_pool(pools, world_of(text))
            t0 = time.time()
            pool.run(text, None)
            per_file.append(time.time() - t0)
            t_end = t_end or time.time() + seconds
            if time.time() > t_end:
                break
    finally:
        for p in pools.values():
            p.close()
    return per_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--fsdpsim", default="")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "corpus", "regressions"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    lines, figures = [], []

    def figure(name, value, unit, text):
        figures.append({"type": "bench_figure", "name": name, "value": round(value, 4), "unit": unit})
        lines.append(text)

    fork_s = min(pool_start_seconds(args.world, "fork") for _ in range(2))
    exec_s = min(pool_start_seconds(args.world, "exec") for _ in range(2))
    figure("upstream_pool_start", fork_s, "s",
           f"  pool start, world {args.world}     {fork_s:6.2f} s  (ranks forked from the coordinator; "
           f"fresh interpreters {exec_s:.2f} s, {exec_s / fork_s:.1f}x)")
    figures.append({"type": "bench_figure", "name": "upstream_pool_start_exec", "value": round(exec_s, 4), "unit": "s"})

    text = ten_op_sequence(args.world)
    pool = Pool(args.world, 20000)
    pool.start()
    try:
        variants, names = VARIANTS
        results = bench_breakdown.sample(pool, text, variants, args.seconds)
    finally:
        pool.close()
    per_seq = results[0]["row"]["total"] / 1000
    figure("upstream_sequence", per_seq * 1000, "ms",
           f"  ten-op sequence         {per_seq * 1000:6.0f} ms  ({1 / per_seq:.1f} seq/s on a started pool)")
    lines.extend(bench_breakdown.table(results, names))
    figures.extend(bench_breakdown.figures(results, names))

    pool = Pool(args.world, 20000)
    pool.start()
    try:
        results = model_vs_linear(pool, args.world, args.seconds)
    finally:
        pool.close()
    linear_ms, model_ms = (r["median_total"] for r in results)
    figure("upstream_model_vs_linear", model_ms / linear_ms, "x",
           f"  model vs Linear stack   {model_ms / linear_ms:6.1f} x  (the ten ops on a tiny Llama {model_ms:.0f} ms, "
           f"on seed 000's Linear stack {linear_ms:.0f} ms; medians of {results[0]['runs']} each, one pool; "
           f"where the time goes, means:)")
    names = ["linear stack", "tiny llama"]
    lines.extend(bench_breakdown.table(results, names))
    figures.extend(bench_breakdown.figures(results, names))

    per_file = corpus_files(args.corpus, args.seconds)
    med = statistics.median(per_file)
    figure("upstream_corpus_file", med * 1000, "ms",
           f"  corpus file             {med * 1000:6.0f} ms  (median of {len(per_file)} files of {args.corpus}, "
           f"mean {statistics.mean(per_file) * 1000:.0f} ms, max {max(per_file) * 1000:.0f} ms; one run, `check` runs each twice)")

    if args.fsdpsim:
        walls = []
        for _ in range(2):
            t0 = time.time()
            subprocess.run([args.fsdpsim, "run", SEED000, "--backend", "upstream"], capture_output=True)
            walls.append(time.time() - t0)
        figure("upstream_run_command", min(walls), "s",
               f"  fsdpsim run --backend upstream {min(walls):5.2f} s  (seed 000's file end to end, pool start "
               f"included; {' / '.join(f'{w:.2f}' for w in walls)} s)")

    # a fresh torchrun per sequence: the same sequence exported (export.py) and launched
    from .export import export
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "seq.py")
        with open(script, "w") as f:
            f.write(export(text))
        t0 = time.time()
        for _ in range(2):
            r = subprocess.run([torchrun, f"--nproc_per_node={args.world}", f"--master_port={free_port()}",
                                f"--log-dir={os.path.join(d, 'logs')}", script],  # else a torchelastic_* left in $TMPDIR
                               cwd=d, capture_output=True)
            if r.returncode not in (0, 1, 2):  # the script's verdicts: fixed, reproduced, otherwise
                raise RuntimeError(f"torchrun exited {r.returncode}: {r.stderr.decode()[-300:]}")
        per_fresh = (time.time() - t0) / 2
    figure("upstream_fresh_torchrun", per_fresh, "s",
           f"  fresh torchrun per seq  {per_fresh:6.2f} s  ({per_fresh / per_seq:.0f}x the started pool's sequence)")
    if args.json:
        for fgr in figures:
            print(json.dumps(fgr, separators=(",", ":")))
    else:
        print(f"upstream backend (world {args.world}):")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
