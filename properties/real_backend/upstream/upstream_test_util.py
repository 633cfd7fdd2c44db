"""Shared steps of the upstream backend's Python tests: one sequence on a fresh rank pool, and
an exported repro script under torchrun."""
import json
import os
import subprocess
import sys
import tempfile

from fsdpsim_upstream.pool import Pool, free_port


def run_on_fresh_pool(text, world=2, timeout_ms=8000):
    """The observations of one sequence on a pool started for it (closed afterwards)."""
    pool = Pool(world, timeout_ms)
    pool.start()
    try:
        obs, _ = pool.run(text, None)
    finally:
        pool.close()
    return obs


def run_exported(script, nproc=2):
    """The JSON lines an exported script prints under torchrun, and its stderr's tail."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "repro.py")
        with open(path, "w") as f:
            f.write(script)
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        out = subprocess.run([torchrun, f"--nproc_per_node={nproc}", f"--master_port={free_port()}", path],
                             capture_output=True, text=True, timeout=180, cwd=d)
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")], out.stderr[-2000:]
