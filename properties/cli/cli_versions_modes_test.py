#!/usr/bin/env python3
"""`fsdpsim versions --bisect`, `--compare` and `--peft` on a stand-in: $FSDPSIM_FAKE_RELEASES answers each
release's verdict (cmd_versions.cpp's test seam) and a release list kept in
$FSDPSIM_RELEASES_DIR stands for PyPI's, so no environment is built and no
network is used. Checked: the answer is exact and the probe count at most
2 + ceil(log2 n) (plus one per release that cannot run); --json is
schema-checked; PyPI out of reach with nothing kept is exit 4; a malformed
--releases is exit 3 with its column. A reproduction (matrix or bisect) is exit 1, a finding. --compare: the kept matrix against itself
is exit 0, with one verdict changed exit 1 naming it. --peft: only changed
files are printed, exit 0 / 1; a missing PATH is exit 3.

Usage: cli_versions_modes_test.py FSDPSIM REPO_ROOT
"""
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import Session  # noqa: E402

S = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix="fsdpsim-versions-modes-"))
check, fsdpsim, TMP = S.check, S.run, S.tmp
seq = os.path.join(S.root, "docs", "findings", "flag-on-copy.set_adapter.seq")
RELEASES = ["0.12.0", "0.13.0", "0.13.1", "0.13.2", "0.14.0", "0.15.0", "0.15.1", "0.15.2", "0.16.0", "0.17.0",
            "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.21.0", "0.21.1", "0.21.2"]
SCHEMA = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "json_schema_check.py"),
          os.path.join(S.root, "docs", "cli-json.schema.json")]


def stand_in(name, verdicts):
    """A releases dir holding PyPI's list, and the verdict file: {version: 'reproduces' | ...}."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    with open(os.path.join(d, "pypi-peft.txt"), "w") as f:
        f.write("# stand-in\n" + "".join(v + "\n" for v in RELEASES))
    with open(os.path.join(d, "fake.txt"), "w") as f:
        f.write("".join("peft==%s = %s\n" % (v, verdicts[v]) for v in RELEASES if v in verdicts))
    # release_env.py --list runs on plain python3 here: no .venv needed
    return {"FSDPSIM_RELEASES_DIR": d, "FSDPSIM_FAKE_RELEASES": os.path.join(d, "fake.txt"), "FSDPSIM_PYTHON": "python3"}


def bisect(name, verdicts, releases, extra=0, inside=False):
    env = stand_in(name, verdicts)
    r = fsdpsim(["versions", "--bisect", seq, "--releases", releases, "--json"], env=env)
    recs = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    probes = [x for x in recs if x["type"] == "versions_probe"]
    answer = [x for x in recs if x["type"] == "versions_bisect"]
    in_range = answer[0]["releases"] if answer else len(RELEASES)
    lg = math.ceil(math.log2(max(in_range, 1)))
    # an end reproduces: one narrowing; neither: the sweep (2 * ceil(log2(n + 1))) and two narrowings
    bound = (2 + 2 * math.ceil(math.log2(in_range + 1)) + 2 * lg if inside else 2 + lg) + extra
    check(len(probes) <= bound, "%s: %d probes for %d releases, expected at most %d" % (name, len(probes), in_range, bound))
    check(len({p["release"] for p in probes}) == len(probes), "%s: a release probed twice: %s" % (name, probes))
    schema = subprocess.run(SCHEMA, input=r.stdout, capture_output=True, text=True)
    check(schema.returncode == 0, "%s: schema: %s" % (name, schema.stdout[-600:]))
    return r, (answer[0] if answer else {})


# Appears in 0.15.1, fixed in 0.20.0, over 0.13..0.21.2 (18 releases: at most 7 probes).
truth = {v: "does not reproduce: step 2 rank 0: expected finding=S1" for v in RELEASES}
for v in RELEASES[RELEASES.index("0.15.1"):RELEASES.index("0.20.0")]:
    truth[v] = "reproduces"
r, a = bisect("middle", truth, "0.13..peft==0.21.2", inside=True)
check(r.returncode == 1, "middle (found: a reproduction is a finding): exit %d: %s" % (r.returncode, r.stderr[-600:]))
check(a.get("releases") == 18 and a.get("first_reproducing") == "0.15.1" and a.get("clean_before") == "0.15.0"
      and a.get("last_reproducing") == "0.19.1" and a.get("fixed_in") == "0.20.0", "middle: %s" % a)

# The newest reproduces and 0.13.x cannot run: appears at or after 0.14.0, skipped outward.
truth = {v: "reproduces" for v in RELEASES}
for v in ("0.13.0", "0.13.1", "0.13.2"):
    truth[v] = "cannot run: TypeError: LoraConfig.__init__() got an unexpected keyword argument"
truth["0.14.0"] = "does not reproduce: step 3"
r, a = bisect("cannot-run", truth, "0.13.0..0.21.2", extra=3)
check(a.get("first_reproducing") == "0.15.0" and a.get("clean_before") == "0.14.0" and a.get("fixed_in") == "", "cannot-run: %s" % a)
r = fsdpsim(["versions", "--bisect", seq, "--releases", "0.13.0..0.21.2"], env=stand_in("text", truth))
check("appears: 0.15.0 (0.14.0 does not reproduce)" in r.stdout and "fixed: not in the range (0.21.2 reproduces)" in r.stdout,
      "cannot-run text: %s" % r.stdout[-800:])
check(r.stderr.count("versions: probe ") >= 2, "no probe progress lines: %s" % r.stderr[-600:])

# Every release cannot run but the newest, which reproduces: at or before it.
truth = {v: "cannot run: ImportError" for v in RELEASES}
truth["0.21.2"] = "reproduces"
r, a = bisect("all-cannot", truth, "0.20.0,0.21.0,0.21.1,0.21.2", extra=3)
check(a.get("first_reproducing") == "0.21.2" and a.get("unknown_before") == ["0.20.0", "0.21.0", "0.21.1"], "all-cannot: %s" % a)

# One release strictly inside reproduces: the sweep's first midpoint finds it.
truth = {v: "does not reproduce: x" for v in RELEASES}
truth["0.17.0"] = "reproduces"
r, a = bisect("inside", truth, "0.15.0..0.19.1", inside=True)
check(r.returncode == 1 and a.get("first_reproducing") == "0.17.0" and a.get("fixed_in") == "0.17.1", "inside: %s" % a)
# Nowhere: not found, no finding (exit 0), the text saying what was searched.
truth = {v: "does not reproduce: x" for v in RELEASES}
r, a = bisect("nowhere", truth, "0.15.0..0.19.1", inside=True)
check(r.returncode == 0 and a.get("found") is False, "nowhere: exit %d %s" % (r.returncode, a))

# The matrix run: a file reproducing on a release is a finding (exit 1), as `run` exits 1 on one;
# not reproducing (or not runnable) anywhere is exit 0.
for verdict, code in (("reproduces", 1), ("does not reproduce: step 2", 0), ("cannot run: ImportError", 0)):
    r = fsdpsim(["versions", seq, "--upstream", "peft==0.17.0"], env=stand_in("matrix-" + verdict.split(":")[0].replace(" ", "-"), {"0.17.0": verdict}))
    check(r.returncode == code, "versions on one release that %s: exit %d, expected %d: %s %s"
          % (verdict, r.returncode, code, r.stdout[-400:], r.stderr[-400:]))

# PyPI out of reach, nothing kept: exit 4 naming what to do.
env = {"FSDPSIM_RELEASES_DIR": os.path.join(TMP, "empty"), "FSDPSIM_PYPI_URL": "http://127.0.0.1:9", "FSDPSIM_PYTHON": "python3"}
r = fsdpsim(["versions", "--bisect", seq, "--releases", "0.13..0.21.2"], env=env)
check(r.returncode == 4 and "cannot list peft's releases" in r.stderr and "--releases A,B,C" in r.stderr,
      "offline: exit %d: %s" % (r.returncode, r.stderr[-600:]))

# The releases cache is per user, never the source tree: without $FSDPSIM_RELEASES_DIR it is
# $XDG_CACHE_HOME/fsdpsim/releases, else ~/.cache/fsdpsim/releases. PyPI's list kept there (and
# nowhere else) is what an offline bisect reads; the source tree gains no .venv-releases/.
def cache_env(**extra):
    e = {k: v for k, v in os.environ.items() if k not in ("FSDPSIM_RELEASES_DIR", "XDG_CACHE_HOME")}
    e.update(FSDPSIM_PYPI_URL="http://127.0.0.1:9", FSDPSIM_PYTHON="python3", **extra)
    return e


in_tree = os.path.join(S.root, ".venv-releases")
had_tree_cache = os.path.exists(in_tree)
for name, env_extra, cache in (("xdg", {"XDG_CACHE_HOME": os.path.join(TMP, "xdg"), "HOME": os.path.join(TMP, "nohome")},
                                os.path.join(TMP, "xdg", "fsdpsim", "releases")),
                               ("home", {"HOME": os.path.join(TMP, "home")}, os.path.join(TMP, "home", ".cache", "fsdpsim", "releases"))):
    kept_list = stand_in("cache-" + name, {v: "reproduces" for v in RELEASES})
    os.makedirs(cache)
    os.replace(os.path.join(kept_list["FSDPSIM_RELEASES_DIR"], "pypi-peft.txt"), os.path.join(cache, "pypi-peft.txt"))
    r = subprocess.run([S.fsdpsim, "versions", "--bisect", seq, "--releases", "0.17.0..0.17.1", "--json"], capture_output=True, text=True,
                       timeout=600, env=cache_env(FSDPSIM_FAKE_RELEASES=kept_list["FSDPSIM_FAKE_RELEASES"], **env_extra))
    check(r.returncode == 1 and '"found":true' in r.stdout, "releases cache under %s: exit %d: %s %s" % (cache, r.returncode, r.stdout[-300:], r.stderr[-300:]))
check(os.path.exists(in_tree) == had_tree_cache, "versions made %s in the source tree" % in_tree)

# Bad input: the column of the bad part.
r = fsdpsim(["versions", "--bisect", seq, "--releases", "0.15.0,0.14.0"], env=env)
check(r.returncode == 3 and "<command line>:1:8: expected --releases oldest first" in r.stderr, "order: %d %s" % (r.returncode, r.stderr))
r = fsdpsim(["versions", "--bisect", seq, "--releases", "0.15.0..x1"], env=env)
check(r.returncode == 3 and "<command line>:1:9: expected a release number" in r.stderr, "bad version: %d %s" % (r.returncode, r.stderr))

# --compare: the kept matrix run against itself, then with one verdict changed (the nightly's gate).
kept = os.path.join(S.root, "docs", "findings", "versions.jsonl")
lines = open(kept).read().splitlines()
r = fsdpsim(["versions", "--compare", kept, kept])
check(r.returncode == 0 and "0 changed, 0 contradicted fixes" in r.stdout and
      "fix check: set_adapter_reshard=unmerge_first (flag-on-copy/set_adapter): fix in no PEFT release yet" in r.stdout,
      "compare same: exit %d: %s %s" % (r.returncode, r.stdout[-800:], r.stderr[-400:]))
changed = []
for line in lines:
    rec = json.loads(line)
    if not changed and rec.get("verdict") == "reproduces" and rec["release"] == "peft==0.17.1":
        rec["verdict"], rec["detail"] = "does not reproduce", "step 2 rank 0: expected finding=S1"
        changed.append(rec["file"])
    line = json.dumps(rec)
    open(os.path.join(TMP, "new.jsonl"), "a").write(line + "\n")
stem = os.path.splitext(os.path.basename(changed[0]))[0]
r = fsdpsim(["versions", "--compare", kept, os.path.join(TMP, "new.jsonl")])
check(r.returncode == 1 and ("changed: %s on peft==0.17.1: reproduces -> does not reproduce" % stem) in r.stdout
      and "1 changed" in r.stdout, "compare changed: exit %d: %s" % (r.returncode, r.stdout[-800:]))
r = fsdpsim(["versions", "--compare", kept, os.path.join(TMP, "new.jsonl"), "--json"])
schema = subprocess.run(SCHEMA, input=r.stdout, capture_output=True, text=True)
check(r.returncode == 1 and schema.returncode == 0 and '"type":"versions_change"' in r.stdout, "compare json: %s %s" % (r.stdout[-400:], schema.stdout[-400:]))
open(os.path.join(TMP, "bad.jsonl"), "w").write(lines[0] + "\nnot json\n")
r = fsdpsim(["versions", "--compare", kept, os.path.join(TMP, "bad.jsonl")])
check(r.returncode == 3 and "bad.jsonl:2:1: expected a JSON object" in r.stderr, "compare bad: %d %s" % (r.returncode, r.stderr))

# --peft PATH: only the files whose verdict on PATH differs from the pinned release's.
checkout = os.path.join(TMP, "peft-checkout")
os.makedirs(checkout)
other = os.path.join(S.root, "docs", "findings", "flag-on-copy.disable_adapter-exit.seq")
fake = os.path.join(TMP, "against.txt")
open(fake, "w").write("peft==0.21.2 = reproduces\npeft=%s = reproduces\n" % checkout)
r = fsdpsim(["versions", "--peft", checkout, seq, other], env={"FSDPSIM_FAKE_RELEASES": fake})
check(r.returncode == 0 and "changed:" not in r.stdout and "2 files, 0 changed from peft 0.21.2 to peft " + checkout in r.stdout,
      "against same: exit %d: %s %s" % (r.returncode, r.stdout[-600:], r.stderr[-400:]))
open(fake, "a").write("peft=%s flag-on-copy.disable_adapter-exit = does not reproduce: step 3 rank 0: expected finding=S1\n" % checkout)
r = fsdpsim(["versions", "--peft", checkout, seq, other], env={"FSDPSIM_FAKE_RELEASES": fake})
check(r.returncode == 1 and r.stdout.count("changed: ") == 1 and
      ("changed: %s: reproduces -> does not reproduce (step 3 rank 0: expected finding=S1)" % other) in r.stdout,
      "against changed: exit %d: %s" % (r.returncode, r.stdout[-600:]))
r = fsdpsim(["versions", "--peft", checkout, seq, other, "--json"], env={"FSDPSIM_FAKE_RELEASES": fake})
schema = subprocess.run(SCHEMA, input=r.stdout, capture_output=True, text=True)
check(r.returncode == 1 and schema.returncode == 0 and r.stdout.count('"type":"versions_change"') == 1 and "versions_cell" not in r.stdout,
      "against json: %s %s" % (r.stdout[-400:], schema.stdout[-400:]))
r = fsdpsim(["versions", "--peft", os.path.join(TMP, "no-such-checkout"), seq])
check(r.returncode == 3 and "naming an existing PEFT checkout directory or wheel file" in r.stderr, "against missing: %d %s" % (r.returncode, r.stderr))

sys.exit(S.finish("versions --bisect, --compare and --peft on a stand-in"))
