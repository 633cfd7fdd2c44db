#!/usr/bin/env python3
"""`fsdpsim bench --discovery`: one row per root cause of the seed threads' corpus files (as
`fsdpsim triage` names them), the hunt's fuzz loop reaching seed 000's at once, and a
lifecycle_fuzzer column read from the fuzzer's `NEW FINDING SIG after T s` lines and the
sequences it writes to FSDPSIM_FINDINGS_DIR (a stand-in fuzzer here, so the times are known): a
directory made under the bench's TMPDIR and removed after.

Usage: cli_discovery_test.py FSDPSIM REPO_ROOT
"""
import glob
import json
import os
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import Session  # noqa: E402

S = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix="fsdpsim-discovery-"))
check, TMP = S.check, S.tmp


# The bench's own TMPDIR, empty: its fuzzer's directory is made there, and removed.
PRIVATE_TMP = os.path.join(TMP, "tmp")
os.mkdir(PRIVATE_TMP)


def bench(*flags):
    return subprocess.run([S.fsdpsim, "bench", "--discovery", "--seconds", "2", *flags], capture_output=True, text=True,
                          timeout=600, cwd=S.root, env=dict(os.environ, TMPDIR=PRIVATE_TMP))


seeds = sorted(glob.glob(os.path.join(S.reg, "seed[0-9][0-9][0-9]_*.seq")))
triaged = subprocess.run([S.fsdpsim, "triage", *seeds], capture_output=True, text=True).stdout.splitlines()
expected = {}
for line in triaged:
    path, _cls, rc = line.split("\t")[:3]
    if rc != "none":
        expected.setdefault(rc, set()).add(os.path.basename(path)[:7])

# A stand-in lifecycle_fuzzer: seed 004's finding after 0.5 s, nothing else.
fuzzer = os.path.join(TMP, "fake_fuzzer.sh")
seed004 = os.path.join(S.reg, "seed004_eval_then_save_optimizer.seq")
with open(fuzzer, "w") as f:
    f.write("#!/bin/sh\n"
            f"echo \"$FSDPSIM_FINDINGS_DIR\" > '{os.path.join(TMP, 'findings_dir')}'\n"
            f"cp '{seed004}' \"$FSDPSIM_FINDINGS_DIR/S4_save_optimizer_key_error.seq\"\n"
            "echo 'NEW FINDING S4:save_optimizer:key_error after 0.50 s: S4 step 3 rank 0: ...' >&2\n")
os.chmod(fuzzer, os.stat(fuzzer).st_mode | stat.S_IEXEC)

r = bench("--fuzzer", fuzzer)
check(r.returncode == 0, "bench --discovery: exit %d %s" % (r.returncode, r.stderr[-800:]))
rows = {}
for line in r.stdout.splitlines():
    if " (seed" in line:
        name, rest = line.split(" (", 1)
        who, times = rest.split(")", 1)
        rows[name.strip()] = (set(who.split(",")), times.split())
check({k: v[0] for k, v in rows.items()} == expected, "rows %s, expected %s" % (rows, expected))
hunt000 = rows.get("flag-on-copy/set_adapter", (None, ["?"]))[1]
check(hunt000[0] != ">2", "the hunt's loop reaches seed 000's root cause within 2 s: %s" % hunt000)
fuzz004 = rows.get("optimizer-checkpoint-while-unsharded", (None, []))[1]
check(fuzz004[-2:] == ["0.50", "s"], "the fuzzer column reads the NEW FINDING time: %s" % fuzz004)
fuzz000 = rows.get("flag-on-copy/set_adapter", (None, []))[1]
check(fuzz000[-2:] == [">2", "s"], "a root cause the fuzzer never reaches counts as the budget: %s" % fuzz000)
reached = [l for l in r.stdout.splitlines() if l.startswith("root causes reached in 2 s")]
check(reached and reached[0].split()[-1] == "1", "the fuzzer reached one root cause: %s" % reached)
said = os.path.join(TMP, "findings_dir")
findings_dir = open(said).read().strip() if os.path.exists(said) else "(the fuzzer did not run)"
check(findings_dir.startswith(PRIVATE_TMP + "/fsdpsim-discovery-"), "the fuzzer's directory is not under TMPDIR: %s" % findings_dir)
check(not os.listdir(PRIVATE_TMP), "left in TMPDIR: %s" % os.listdir(PRIVATE_TMP))

r = bench("--json")
figures = [json.loads(l) for l in r.stdout.splitlines()]
names = {o["name"] for o in figures}
check(all(o["type"] == "bench_figure" for o in figures) and "hunt_loop_root_causes_2s" in names and
      "hunt_loop_time_to_flag_on_copy_set_adapter" in names, "bench --discovery --json: %s" % sorted(names))
schema = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "json_schema_check.py"),
                         os.path.join(S.root, "docs", "cli-json.schema.json")], input=r.stdout, capture_output=True, text=True)
check(schema.returncode == 0, "schema: %s" % schema.stdout[-500:])

r = bench("--fuzzer", os.path.join(TMP, "missing"))
check(r.returncode == 3 and "--fuzzer expects" in r.stderr, "a missing fuzzer: exit %d %s" % (r.returncode, r.stderr))
r = subprocess.run([S.fsdpsim, "bench", "--fuzzer", fuzzer], capture_output=True, text=True, cwd=S.root)
check(r.returncode == 3, "--fuzzer without --discovery: exit %d" % r.returncode)

sys.exit(S.finish("bench --discovery: rows, figures and flags as expected, nothing left in TMPDIR"))
