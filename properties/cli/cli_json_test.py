#!/usr/bin/env python3
"""Every command that prints results, run with --json: each line validates
against docs/cli-json.schema.json, each command prints the record kinds it
documents, every kind of the schema is printed by some command, and the
schema is strict (a renamed, missing or extra key, a wrong type or kind fails).

Usage: cli_json_test.py FSDPSIM REPO_ROOT   (the model and the C++ backend;
upstream records come from the fake pool, properties/real_backend/fake_pool.py)
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_util import Session  # noqa: E402
from json_schema_check import Validator, check_lines  # noqa: E402

S = Session(sys.argv[1], sys.argv[2], tempfile.mkdtemp(prefix="fsdpsim-json-"))
ROOT, REG, SEED000, TMP = S.root, S.reg, S.seed000, S.tmp
NO_UPSTREAM = {"FSDPSIM_PYTHON": "/nonexistent"}  # the hunt confirms on the real backend only
seen = set()
validator = Validator(json.load(open(os.path.join(ROOT, "docs", "cli-json.schema.json"))))


def case(args, codes, kinds, env=None):
    """Runs `fsdpsim ARGS --json`; its exit code is one of `codes` and it prints exactly the record kinds `kinds`."""
    r = S.run(args + ["--json"], env)
    name = "fsdpsim " + " ".join(a.replace(ROOT, "$ROOT").replace(TMP, "$TMP") for a in args) + " --json"
    S.check(r.returncode in codes, "%s: exit %d, expected %s\n%s" % (name, r.returncode, codes, r.stderr[-2000:]))
    bad, got = check_lines(validator, r.stdout.splitlines(), name)
    S.problems.extend(bad)
    S.check(set(got) == set(kinds), "%s: printed record kinds %s, expected %s" % (name, sorted(set(got)), sorted(kinds)))
    seen.update(got)
    print("ok" if not bad else "FAIL", name, "(%d lines)" % len(got))
    return r.stdout


def main():
    model = case(["run", SEED000], [1], {"observation", "finding", "trace_hash"})
    same = os.path.join(TMP, "same.jsonl")
    open(same, "w").write(model)
    case(["run", SEED000, "--backend", "model,upstream"], [1], {"observation", "finding", "trace_hash", "upstream_versions"}, S.fake_pool(same))
    case(["run", SEED000, "--backend", "model,upstream"], [2], {"observation", "finding", "trace_hash", "divergence", "upstream_versions"},
         S.fake_pool(S.altered(model, "altered.jsonl")))
    case(["check", SEED000, S.wrong_seed000(), os.path.join(TMP, "missing.seq")], [3], {"check_file", "check_summary"})
    patched = os.path.join(REG, "seed000_patched_w2.seq")
    patched_obs = S.run(["run", patched, "--json"]).stdout
    open(os.path.join(TMP, "patched.jsonl"), "w").write(patched_obs)
    case(["check", patched, "--backend", "model,upstream"], [0], {"check_file", "check_summary", "upstream_versions"},
         S.fake_pool(os.path.join(TMP, "patched.jsonl")))
    case(["check", os.path.join(ROOT, "examples", "sft_two_adapters.seq"), "--near", "1"], [1], {"near_class", "near_summary"})
    results = os.path.join(TMP, "results.json")
    case(["crosscheck", "--seed", "20000", "--count", "3", "--out", os.path.join(TMP, "cc"), "--results", results], [0], {"crosscheck_summary"})
    case(["crosscheck", "--seed", "5", "--count", "1", "--timeout", "2000", "--out", os.path.join(TMP, "cc_broken")], [4],
         {"crosscheck_broken", "crosscheck_summary"}, {"FSDPSIM_CRASH_RANK": "1"})
    case(["crosscheck", "--seed", "7", "--count", "1", "--against", "upstream", "--out", os.path.join(TMP, "cc_div")], [2],
         {"crosscheck_divergent", "crosscheck_summary", "upstream_versions"}, S.divergent_seed7_pool())
    # the pinned release set is the default Python: here the fake pool
    case(["versions", patched, "--matrix", "pinned"], [1], {"versions_cell", "versions_summary"}, S.fake_pool(os.path.join(TMP, "patched.jsonl")))
    # --bisect on the stand-in releases (cmd_versions.cpp's $FSDPSIM_FAKE_RELEASES): nothing built
    fake = os.path.join(TMP, "fake-releases.txt")
    open(fake, "w").write("peft==0.15.2 = does not reproduce: step 2\npeft==0.17.1 = reproduces\npeft==0.21.2 = reproduces\n")
    case(["versions", "--bisect", patched, "--releases", "0.15.2,0.17.1,0.21.2"], [1], {"versions_probe", "versions_bisect"},
         {"FSDPSIM_FAKE_RELEASES": fake})
    kept = os.path.join(ROOT, "docs", "findings", "versions.jsonl")
    flipped = os.path.join(TMP, "flipped.jsonl")
    open(flipped, "w").write(open(kept).read().replace('"verdict":"reproduces"', '"verdict":"does not reproduce"', 1))
    case(["versions", "--compare", kept, flipped], [1], {"versions_change", "versions_fix"})
    case(["merge-results", results], [0], {"merged_results"})
    case(["shrink", SEED000], [1], {"shrunk"})
    case(["shrink", patched, "--divergence", "--backend", "model,upstream"], [2], {"shrunk"},
         S.fake_pool(S.altered(patched_obs, "patched_altered.jsonl")))
    case(["triage", SEED000, patched], [0], {"triage"})
    case(["cost", os.path.join(REG, "seed003_switch_and_two_active.seq"), "--backend", "both"], [0], {"cost", "cost_row", "cost_comparison"})
    case(["profiles"], [0], {"switch", "profile"})
    case(["random", "--seed", "1", "--count", "2"], [0], {"sequence"})
    case(["random", "--seed", "1", "--count", "2", "--out", os.path.join(TMP, "random")], [0], {"sequence"})
    case(["fingerprint", "--seed", "1", "--count", "8"], [0], {"fingerprint"})
    case(["fingerprint", "--seed", "1", "--count", "2", "--wide"], [0], {"fingerprint_sequence", "fingerprint"})
    case(["coverage", "--count", "20", "--world", "2"], [1], {"coverage_feature", "coverage_pair", "coverage_gap", "coverage_summary"})
    case(["bench", "--seconds", "1", "--model-only"], [0], {"bench_figure", "bench_explorer"})
    case(["explore", "--builtin", "seed000_merged_raf_false", "--depth", "3", "--out", os.path.join(TMP, "explore")], [1], {"explore_summary", "explore_class"})
    case(["hunt", "--seconds", "2", "--seed", "3", "--out", os.path.join(TMP, "hunt")], [0], {"hunt_class", "hunt_report", "hunt_root_cause", "hunt_summary"},
         NO_UPSTREAM)
    # summary.json: each class names its root cause, and the root_causes list holds exactly those, each listing its classes.
    summary = json.load(open(os.path.join(TMP, "hunt", "summary.json")))
    by_class = {c["class"]: c["root_cause"] for c in summary["classes"]}
    listed = {rc["id"]: rc for rc in summary["root_causes"]}
    S.check(set(by_class.values()) == set(listed), "summary.json: root_causes %s vs the classes' %s" % (sorted(listed), sorted(set(by_class.values()))))
    for rid, rc in listed.items():
        S.check(all(by_class.get(c) == rid for c in rc["classes"]), "summary.json: root cause %s lists classes of another" % rid)
        S.check(rc["verdict"] != "" and rc["title"] != "", "summary.json: root cause %s has no verdict or title" % rid)
    case(["report", SEED000, "--html", os.path.join(TMP, "r.html")], [1], {"report"})

    kinds = set(validator.root["$defs"]) - {"backend"}
    if kinds - seen:
        S.problems.append("schema kinds no command printed here: %s" % sorted(kinds - seen))
    # The schema is strict: each of these edits of a valid record must fail.
    record = json.loads(model.splitlines()[-1])  # a trace_hash record
    edits = {
        "a key renamed": {("hash" if k == "trace_hash" else k): v for k, v in record.items()},
        "a key missing": {k: v for k, v in record.items() if k != "backend"},
        "an extra key": dict(record, extra=1),
        "a wrong type": dict(record, backend=3),
        "an unknown kind": dict(record, type="trace"),
        "no kind": {k: v for k, v in record.items() if k != "type"},
    }
    for what, value in edits.items():
        if not validator.errors(validator.root, value):
            S.problems.append("the schema accepts a trace_hash record with %s: %s" % (what, json.dumps(value)))
    return S.finish("%d record kinds, every line of every command valid" % len(seen))

if __name__ == "__main__":
    sys.exit(main())
