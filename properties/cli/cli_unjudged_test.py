#!/usr/bin/env python3
"""`unjudged` is never counted as agreement: a fake upstream pool that reports one stored class
as `unjudged` where the model has a class makes `crosscheck` count the sequence under
`unjudged` (not `agree`, not `divergent`) and `check` count the file apart from the passed ones,
in the text summaries and the --json records.

Usage: cli_unjudged_test.py FSDPSIM REPO_ROOT
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import Session  # noqa: E402

S = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix="fsdpsim-unjudged-"))
check, fsdpsim, TMP = S.check, S.run, S.tmp

seq7 = os.path.join(TMP, "seq7.seq")
open(seq7, "w").write(fsdpsim(["random", "--seed", "7", "--count", "1"]).stdout)
lines = []
for line in fsdpsim(["run", seq7, "--json"]).stdout.splitlines():
    o = json.loads(line)
    if o.get("type") == "observation" and o["step"] == 1 and o["rank"] == 0 and o.get("layers"):
        o["layers"][0]["stored"] = "unjudged"
    lines.append(json.dumps(o))
obs = os.path.join(TMP, "obs7_unjudged.jsonl")
open(obs, "w").write("\n".join(lines) + "\n")
pool = S.fake_pool(obs)

r = fsdpsim(["crosscheck", "--seed", "7", "--count", "1", "--against", "upstream", "--out", os.path.join(TMP, "cc")], pool)
check(r.returncode == 0, "crosscheck: exit %d %s" % (r.returncode, r.stderr[-500:]))
rows = {l.split("  ")[0].strip(): l for l in r.stdout.splitlines()}
check("agree" in rows and rows["agree"].split()[-1] == "0", "crosscheck: agree row %r" % rows.get("agree"))
check("unjudged" in rows and rows["unjudged"].split()[1] == "1" and "1 fields" in rows["unjudged"],
      "crosscheck: unjudged row %r" % rows.get("unjudged"))
r = fsdpsim(["crosscheck", "--seed", "7", "--count", "1", "--against", "upstream", "--out", os.path.join(TMP, "cc"), "--json"], pool)
summary = [json.loads(l) for l in r.stdout.splitlines() if '"crosscheck_summary"' in l]
check(summary and summary[0]["unjudged"] == 1 and summary[0]["divergent"] == [], "crosscheck --json: %s" % summary)

r = fsdpsim(["check", seq7, "--backend", "model,upstream"], pool)
check(r.returncode == 0 and "0 passed," in r.stdout and "; 1 unjudged" in r.stdout, "check: exit %d %s" % (r.returncode, r.stdout))
r = fsdpsim(["check", seq7, "--backend", "model,upstream", "--json"], pool)
recs = {json.loads(l)["type"]: json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")}
check(recs.get("check_summary", {}).get("unjudged") == 1 and recs["check_summary"]["passed"] == 0, "check --json: %s" % recs)
check(any("stored unjudged" in x for x in recs.get("check_file", {}).get("unjudged", [])), "check_file: %s" % recs.get("check_file"))
sys.exit(S.finish("unjudged is counted apart by crosscheck and check"))
