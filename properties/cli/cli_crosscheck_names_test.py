"""crosscheck's divergent files: with --world the file name carries the world, so runs
of one seed at several worlds into one --out dir keep every file; without --world the
name is divergent_S.seq (the fake pool replaying sequence 7 with one field changed)."""
import os
import sys
import tempfile

from cli_util import Session

S = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix="fsdpsim-cc-names-"))


def pool_at(world):
    """A fake pool on which `crosscheck --seed 7 --count 1 --world W --against upstream` diverges."""
    seq = os.path.join(S.tmp, "seq7_w%s.seq" % world)
    open(seq, "w").write(S.run(["random", "--seed", "7", "--count", "1", "--world", world]).stdout)
    return S.fake_pool(S.altered(S.run(["run", seq, "--json"]).stdout, "obs7_w%s.jsonl" % world))


out = os.path.join(S.tmp, "cc")
for world in ("1", "2"):
    r = S.run(["crosscheck", "--seed", "7", "--count", "1", "--world", world, "--against", "upstream", "--out", out, "--quiet"], pool_at(world))
    S.check(r.returncode == 2, "--world %s: exit %d %s" % (world, r.returncode, r.stdout[-300:] + r.stderr[-300:]))
files = sorted(os.listdir(out)) if os.path.isdir(out) else []
S.check(files == ["divergent_7_w1.seq", "divergent_7_w2.seq"], "--world 1 then 2 into one dir: %s" % files)
for world in ("1", "2"):
    path = os.path.join(out, "divergent_7_w%s.seq" % world)
    head = open(path).read() if os.path.exists(path) else ""
    S.check("--world %s\n" % world in head and "\nworld %s\n" % world in head, "divergent_7_w%s.seq is not the world-%s sequence" % (world, world))
plain = os.path.join(S.tmp, "plain")
r = S.run(["crosscheck", "--seed", "7", "--count", "1", "--against", "upstream", "--out", plain, "--quiet"], pool_at("2"))
S.check(r.returncode == 2 and os.listdir(plain) == ["divergent_7.seq"], "without --world: exit %d, %s" % (r.returncode, os.listdir(plain) if os.path.isdir(plain) else None))
sys.exit(S.finish("divergent files carry the world when --world is given"))
