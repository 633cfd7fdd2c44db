#!/usr/bin/env python3
"""`fingerprint`: the same seed gives the same hash, another seed or another backend's
different observations another one, and the per-world lines follow --world; the upstream
side runs on the fake pool (properties/real_backend/fake_pool.py), once replaying the
model's own observations (the same hash as the model's) and once with one field flipped.

Usage: cli_fingerprint_test.py FSDPSIM REPO_ROOT
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import Session  # noqa: E402

S = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix="fsdpsim-fingerprint-"))
check, fsdpsim, TMP = S.check, S.run, S.tmp


def hash_of(args, env=None):
    r = fsdpsim(["fingerprint", "--quiet"] + args, env)
    check(r.returncode == 0, "fingerprint %s: exit %d %s" % (args, r.returncode, r.stderr[-400:]))
    first = r.stdout.split("\n", 1)[0].split()
    return (first[1] if len(first) > 1 else "", r.stdout)


a, text = hash_of(["--seed", "11", "--count", "40"])
b, _ = hash_of(["--seed", "11", "--count", "40"])
c, _ = hash_of(["--seed", "12", "--count", "40"])
check(len(a) == 16 and a == b, "same seed, other hash: %s %s" % (a, b))
check(a != c, "seeds 11 and 12 gave one hash %s" % a)
check(all("world %d: 10 sequences" % w in text for w in (1, 2, 3, 4)), "worlds 1..4 in turn: %s" % text)
_, w2 = hash_of(["--seed", "11", "--count", "5", "--world", "2"])
check("world 2: 5 sequences" in w2 and "world 1" not in w2, "--world 2: %s" % w2)
r = fsdpsim(["fingerprint", "--seed", "11", "--count", "3", "--json", "--quiet"])
rec = json.loads(r.stdout.splitlines()[0]) if r.stdout else {}
check(rec.get("type") == "fingerprint" and rec.get("count") == 3 and rec.get("broken") == 0, "--json: %s" % r.stdout)
# --wide: a line per sequence first (seed, world, its hash), the same fingerprint after them
r = fsdpsim(["fingerprint", "--seed", "11", "--count", "3", "--wide", "--quiet"])
lines = r.stdout.splitlines()
each = [l.split() for l in lines[:3]]
check([e[:4] for e in each] == [["seed", str(11 + i), "world", "%d:" % (1 + i)] for i in range(3)] and
      len({e[4] for e in each}) == 3, "--wide: %s" % r.stdout)
three, _ = hash_of(["--seed", "11", "--count", "3"])
check(len(lines) > 3 and lines[3].split()[1] == three, "--wide changed the fingerprint: %s vs %s" % (r.stdout, three))
r = fsdpsim(["fingerprint", "--seed", "11", "--backend", "model,real"])
check(r.returncode == 3 and "one --backend" in r.stderr, "two backends: exit %d %s" % (r.returncode, r.stderr))

# seed 7 at world 2 is `random --seed 7`'s sequence: the fake pool replays its observations.
seq7 = os.path.join(TMP, "seq7.seq")
open(seq7, "w").write(fsdpsim(["random", "--seed", "7", "--count", "1"]).stdout)
obs_text = fsdpsim(["run", seq7, "--json"]).stdout
model7, _ = hash_of(["--seed", "7", "--count", "1", "--world", "2"])
same = os.path.join(TMP, "obs7.jsonl")
open(same, "w").write(obs_text)
up7, _ = hash_of(["--seed", "7", "--count", "1", "--world", "2", "--backend", "upstream"], S.fake_pool(same))
check(up7 == model7, "the model's own observations replayed: %s vs the model's %s" % (up7, model7))
flipped, _ = hash_of(["--seed", "7", "--count", "1", "--world", "2", "--backend", "upstream"], S.fake_pool(S.altered(obs_text, "obs7_flipped.jsonl")))
check(flipped != model7, "one observation flipped, hash unchanged: %s" % flipped)
sys.exit(S.finish("fingerprint is stable per seed and moves with any observation"))
