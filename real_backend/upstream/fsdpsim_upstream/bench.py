"""Upstream backend speed: ten-op sequences per second at world 2 on the
persistent rank pool, against a fresh set of rank processes per sequence
(what one torchrun per sequence costs), measured in one run.
`python -m fsdpsim_upstream.bench [--seconds T] [--world W]`."""
import argparse
import sys
import time

from .pool import Pool

TEN_OPS = """world {world}
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 2
adapter default r=8 alpha=8 targets=lin0,lin1 init=random
adapter other r=8 alpha=8 targets=lin0,lin1 init=random
fully_shard lin0 reshard_after_forward=false
fully_shard root reshard_after_forward=false
optimizer trainable
---
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--world", type=int, default=2)
    args = ap.parse_args()
    text = TEN_OPS.format(world=args.world)
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
    pool.stop()
    m, t0 = 0, time.time()
    while m < 2:
        fresh = Pool(args.world, 20000)
        fresh.start()
        fresh.run(text, None)
        fresh.stop()
        m += 1
    per_fresh = (time.time() - t0) / m
    print(f"upstream backend, world {args.world}, ten-op sequences:")
    print(f"  persistent ranks      {persistent:8.1f} seq/s  ({1000 / persistent:.0f} ms each; pool start {start_s:.1f} s)")
    print(f"  fresh ranks per seq   {1 / per_fresh:8.2f} seq/s  ({per_fresh:.2f} s each)")
    print(f"  persistent / fresh    {persistent * per_fresh:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
