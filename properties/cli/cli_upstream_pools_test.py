#!/usr/bin/env python3
"""`check --backend model,upstream` keeps one upstream pool per world across files: four
files whose worlds alternate 1, 2, 1, 2 start two pools, not four (a pool's start imports
torch and PEFT in every rank, seconds where a file's run takes tens of milliseconds). The
summary names the starts in text and in --json (schema-checked), and nothing of the pools
is left once the command exits.

Usage: cli_upstream_pools_test.py FSDPSIM REPO_ROOT   (exit 77 without .venv)
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import upstream_session  # noqa: E402

S = upstream_session("fsdpsim-pools-")
check, fsdpsim, TMP = S.check, S.run, S.tmp
w1 = os.path.join(S.reg, "add_adapter_raised_half_added_trains.seq")
w2 = os.path.join(S.reg, "seed000_merged_set_adapter_w2.seq")
FILES = os.path.join(TMP, "files")
os.mkdir(FILES)
# the pools' directories go under the command's own TMPDIR: other runs on the machine have theirs
POOL_TMP = os.path.join(TMP, "tmp")
os.mkdir(POOL_TMP)
env = {"TMPDIR": POOL_TMP}
files = []
for k, src in enumerate([w1, w2, w1, w2]):  # sorted by name: the worlds alternate
    dst = os.path.join(FILES, f"{k}_{os.path.basename(src)}")
    shutil.copy(src, dst)
    files.append(dst)

r = fsdpsim(["check", FILES, "--backend", "model,upstream"], env)
check(r.returncode == 0, "check: exit %d: %s %s" % (r.returncode, r.stdout[-800:], r.stderr[-800:]))
check("4 passed" in r.stdout, "check: not 4 passed: %s" % r.stdout[-800:])
check("upstream pools: 2 started," in r.stdout, "check: the pools line: %s" % r.stdout[-400:])

r = fsdpsim(["check", FILES, "--backend", "model,upstream", "--json"], env)
recs = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
summary = [o for o in recs if o.get("type") == "check_summary"]
check(summary and summary[0].get("upstream_starts") == 2 and summary[0].get("passed") == 4,
      "check --json summary: %s" % summary)
check(summary and 0 < summary[0].get("upstream_start_seconds", 0) < summary[0]["seconds"], "start seconds: %s" % summary)
schema = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "json_schema_check.py"),
                         os.path.join(S.root, "docs", "cli-json.schema.json")], input=r.stdout, capture_output=True, text=True)
check(schema.returncode == 0, "schema: %s %s" % (schema.stdout[-500:], schema.stderr[-500:]))

left = os.listdir(POOL_TMP)
check(not left, "left in the command's TMPDIR: %s" % sorted(left))


def environ_of(pid):
    try:
        return open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return b""


mine = [p for p in os.listdir("/proc") if p.isdigit() and f"TMPDIR={POOL_TMP}".encode() in environ_of(p)]
check(not mine, "processes left: %s" % mine)

shutil.rmtree(TMP, ignore_errors=True)
for p in S.problems:
    print("FAIL:", p)
sys.exit(1 if S.problems else 0)
