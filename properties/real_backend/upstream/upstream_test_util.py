"""Shared steps of the upstream backend's Python tests: one sequence on a fresh rank pool."""
from fsdpsim_upstream.pool import Pool


def run_on_fresh_pool(text, world=2, timeout_ms=8000):
    """The observations of one sequence on a pool started for it (closed afterwards)."""
    pool = Pool(world, timeout_ms)
    pool.start()
    try:
        obs, _ = pool.run(text, None)
    finally:
        pool.close()
    return obs
