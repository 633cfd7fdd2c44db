#!/usr/bin/env python3
"""`fsdpsim versions` on the upstream backend: seed 000's root cause (its minimal
sequence, docs/findings/flag-on-copy.set_adapter.seq) reproduces on the pinned release
(matrix `pinned`: .venv itself); the same file with its recorded finding taken out of its
expectations does not (exit 0; a reproduction is exit 1, a finding); --json is schema-checked; a malformed --upstream set is
exit 3 with its column. With an older release's environment already cached
(peft-0.17.1 in the releases cache, made by `fsdpsim versions --matrix pair` or release_env.py),
matrix `pair` gives that release a verdict too; without it that part is skipped.

Usage: cli_versions_test.py FSDPSIM REPO_ROOT   (exit 77 without .venv)
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import upstream_session  # noqa: E402

S = upstream_session("fsdpsim-versions-")
check, fsdpsim, TMP = S.check, S.run, S.tmp
seq = os.path.join(S.root, "docs", "findings", "flag-on-copy.set_adapter.seq")

r = fsdpsim(["versions", seq, "--matrix", "pinned"])
check(r.returncode == 1, "pinned (a reproduction is a finding): exit %d: %s %s" % (r.returncode, r.stdout[-800:], r.stderr[-800:]))
rows = [l for l in r.stdout.splitlines() if l.startswith("flag-on-copy.set_adapter")]
check(len(rows) == 1 and rows[0].split()[1:] == ["reproduces"], "pinned: not reproduces: %s" % r.stdout[-800:])

# The finding taken out of the file's expectations: the pinned release no longer shows what it records.
text = open(seq).read().replace(" finding=S3", "")
check(text != open(seq).read(), "the minimal sequence no longer announces finding=S3")
altered = os.path.join(TMP, "without_finding.seq")
open(altered, "w").write(text)
r = fsdpsim(["versions", altered, "--matrix", "pinned", "--json"])
check(r.returncode == 0, "altered: exit %d, expected 0: %s %s" % (r.returncode, r.stdout[-800:], r.stderr[-800:]))
cells = [json.loads(l) for l in r.stdout.splitlines() if '"versions_cell"' in l]
check(len(cells) == 1 and cells[0]["verdict"] == "does not reproduce" and cells[0]["peft"] == "0.21.2",
      "altered: %s" % r.stdout[-800:])
schema = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "json_schema_check.py"),
                         os.path.join(S.root, "docs", "cli-json.schema.json")], input=r.stdout, capture_output=True, text=True)
check(schema.returncode == 0, "schema: %s %s" % (schema.stdout[-800:], schema.stderr[-800:]))

r = fsdpsim(["versions", seq, "--upstream", "peft==0.17.1,torch==2.1"])
check(r.returncode == 3 and "<command line>:1:14: expected one of peft, accelerate, transformers" in r.stderr,
      "bad set: exit %d: %s" % (r.returncode, r.stderr[-400:]))

# An older release's environment made earlier, in the per-user releases cache (release_env.releases_dir):
# used only when it is already there, so this test builds nothing and writes nothing into that cache
# beyond its lock file.
sys.path.insert(0, os.path.join(S.root, "real_backend", "upstream"))
from fsdpsim_upstream.release_env import releases_dir  # noqa: E402
cached = os.path.join(releases_dir(), "peft-0.17.1")
if os.path.exists(os.path.join(cached, "fsdpsim-release.json")):
    r = fsdpsim(["versions", seq, "--matrix", "pair"])
    rows = [l for l in r.stdout.splitlines() if l.startswith("flag-on-copy.set_adapter")]
    check(r.returncode in (0, 1) and len(rows) == 1 and rows[0].split()[-1] == "reproduces"
          and rows[0].split()[1] in ("reproduces", "does", "cannot"),
          "pair: exit %d: %s %s" % (r.returncode, r.stdout[-800:], r.stderr[-800:]))
else:
    print("skipped the older release: %s is not cached" % cached)

shutil.rmtree(TMP, ignore_errors=True)
for p in S.problems:
    print("FAIL:", p)
sys.exit(1 if S.problems else 0)
