"""Runs .seq files through the upstream pool (one pool per world size) and
writes {file: [observations]} as JSON: for comparing the backend's
observations before and after a change.

    python run_seqs.py OUT.json FILE.seq...
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fsdpsim_upstream.pool import Pool  # noqa: E402


def main():
    out, files = sys.argv[1], sys.argv[2:]
    by_world = {}
    for f in files:
        m = re.search(r"^world (\d+)", open(f).read(), re.M)
        by_world.setdefault(int(m.group(1)) if m else 1, []).append(f)
    result = {}
    for world, fs in sorted(by_world.items()):
        pool = Pool(world, 20000)
        pool.start()
        try:
            for f in fs:
                try:
                    obs, restarted = pool.run(open(f).read(), None)
                    result[f] = {"obs": obs, "restarted": restarted}
                except Exception as e:  # an infrastructure error: recorded, the pool restarted
                    result[f] = {"error": str(e)}
                    pool.stop()
                    pool.start()
        finally:
            pool.close()
    with open(out, "w") as fh:
        json.dump(result, fh, indent=0, sort_keys=True)


if __name__ == "__main__":
    main()
