"""Upstream backend speed: ten-op sequences per second at world 2 on the
persistent rank pool, against a fresh set of rank processes per sequence
(the same sequence exported and launched with torchrun each time), measured in one run.
`python -m fsdpsim_upstream.bench [--seconds T] [--world W]`."""
import argparse
import os
import re
import sys
import time

from .pool import Pool

# seed 000's scenario (the corpus file) with ten ops of every kind the pool handles most
SCENARIO = os.path.join(os.path.dirname(__file__), "..", "..", "..", "corpus", "regressions",
                        "seed000_merged_set_adapter_w2.seq")
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


def ten_op_sequence(world):
    with open(SCENARIO) as f:
        scenario = f.read().split("---")[0]
    return re.sub(r"(?m)^world \d+$", f"world {world}", scenario) + TEN_OPS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--world", type=int, default=2)
    args = ap.parse_args()
    text = ten_op_sequence(args.world)
    pool = Pool(args.world, 20000)
    t0 = time.time()
    pool.start()
    start_s = time.time() - t0
    pool.run(text, None)  # warm-up
    n, t0 = 0, time.time()
    while time.time() - t0 < args.seconds or n < 3:
        pool.run(text, None)
        n += 1
    persistent = n / (time.time() - t0)
    pool.close()
    # a fresh torchrun per sequence: the same sequence exported (export.py) and launched
    import os
    import subprocess
    import tempfile
    from .export import export
    from .pool import free_port
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "seq.py")
        with open(script, "w") as f:
            f.write(export(text))
        m, t0 = 0, time.time()
        while m < 2:
            subprocess.run([torchrun, f"--nproc_per_node={args.world}", f"--master_port={free_port()}", script],
                           cwd=d, check=True, capture_output=True)
            m += 1
        per_fresh = (time.time() - t0) / m
    print(f"upstream backend, world {args.world}, ten-op sequences:")
    print(f"  persistent ranks      {persistent:8.1f} seq/s  ({1000 / persistent:.0f} ms each; pool start {start_s:.1f} s)")
    print(f"  fresh torchrun per seq{1 / per_fresh:8.2f} seq/s  ({per_fresh:.2f} s each)")
    print(f"  persistent / fresh    {persistent * per_fresh:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
