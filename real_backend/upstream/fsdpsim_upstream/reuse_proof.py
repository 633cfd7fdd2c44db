"""Whether a sequence run on a copy of a kept model (reuse.py) observes what a fresh build does:
`python -m fsdpsim_upstream.reuse_proof DIR... [--limit N]` runs every .seq file of the
directories (`fsdpsim random --out DIR`) three times in a row on one pool per world with reuse
on: the first and second runs build the model afresh (the second keeps it: reuse.py copies from
a scenario's second sequence on), the third starts from the copy. It prints one line per file
and a summary; exit 0 when every copied run observed exactly what the first fresh run did, 1
when one did not, 4 when a pool failed. Generated scenarios never repeat (each has its own
`seed` line), so a `fingerprint` or `crosscheck` never copies a model: this is where reuse is
exercised on generated sequences. A file whose two fresh runs already differ is counted apart
(the sequence itself varies from run to run); its copied run proves nothing either way."""
import argparse
import glob
import json
import os
import sys

from .bench import started_pool, world_of


def observed(pool, text):
    """The run's observations as one comparable text, and whether the ranks built the model
    (timing.py records a `model` phase only for a build: reuse.take skips it)."""
    out, _ = pool.run(text, None, reuse=True)
    built = all("model" in ((t or {}).get("phases") or {}) for t in pool.timing["ranks"].values())
    return json.dumps(out, sort_keys=True), built


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--limit", type=int, default=0, help="at most N files (0: all)")
    args = ap.parse_args()
    # the directories' files in turn (the first of each, then the second...): worlds mixed as they come
    files = sorted((f for d in args.dirs for f in glob.glob(os.path.join(d, "*.seq"))),
                   key=lambda f: (os.path.basename(f), f))
    if args.limit:
        files = files[:args.limit]
    pools, counts = {}, {"files": 0, "copied": 0, "same": 0, "differs": 0, "varies": 0, "not_copied": 0}
    try:
        for path in files:
            with open(path) as f:
                text = f.read()
            w = world_of(text)
            pool = started_pool(pools, w)
            try:
                first, _ = observed(pool, text)
                second, _ = observed(pool, text)
                third, built = observed(pool, text)
            except RuntimeError as e:
                print(f"{os.path.basename(path)}: pool failure: {e}", flush=True)
                return 4
            counts["files"] += 1
            if built:  # nothing kept (reuse.keepable refused the model, or a restart lost it)
                verdict = "not_copied"
            elif first != second:
                verdict = "varies"
            else:
                verdict = "same" if third == first else "differs"
            counts[verdict] += 1
            counts["copied"] += not built
            print(f"{os.path.basename(path)} world {w}: {verdict}", flush=True)
    finally:
        for p in pools.values():
            p.close()
    print("reuse proof: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if counts["differs"] else 0


if __name__ == "__main__":
    sys.exit(main())
